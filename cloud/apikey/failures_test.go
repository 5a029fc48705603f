package apikey_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/shared/ids"
)

// wrongKey returns a well-formed key naming id with a secret that is not
// its own.
func wrongKey(id string, i int) string { return fmt.Sprintf("svc_sk_%s_Wrong%dSecret", id, i) }

// TestUnknownIDCostsWhatAWrongSecretCosts: a key naming an unknown id runs
// the same bcrypt comparison as a wrong secret of a known id, is cached
// alike, and answers the same error.
func TestUnknownIDCostsWhatAWrongSecretCosts(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	auth := apikey.NewAuthenticator(f.db, f.now.Now, 0)
	_, key := f.key(t, 0)
	known, _, _ := apikey.Parse(key)
	unknown := ids.New()

	for i, k := range []string{wrongKey(known, 1), wrongKey(unknown, 1)} {
		before := auth.BcryptRuns()
		_, err := auth.Authenticate(ctx, k)
		if cloud.ErrorCode(err) != cloud.EUNAUTHORIZED || cloud.ErrorMessage(err) != "missing or invalid API key" {
			t.Errorf("key %d: err = %v, want the one unauthorized answer", i, err)
		}
		if n := auth.BcryptRuns() - before; n != 1 {
			t.Errorf("key %d (%s id): %d bcrypt comparisons, want 1", i, []string{"known", "unknown"}[i], n)
		}
		before = auth.BcryptRuns()
		if _, err := auth.Authenticate(ctx, k); cloud.ErrorCode(err) != cloud.EUNAUTHORIZED {
			t.Errorf("key %d again: err = %v", i, err)
		}
		if n := auth.BcryptRuns() - before; n != 0 {
			t.Errorf("key %d again: %d bcrypt comparisons, want 0 (cached)", i, n)
		}
	}
}

// TestFailureLimitPerKeyID: after MaxFailures wrong secrets of one id in a
// window, further wrong secrets (and uncached right ones) of that id run no
// bcrypt; a key whose verification is cached keeps working; other ids are
// unaffected; unknown ids are limited alike; the limit lifts with the window.
func TestFailureLimitPerKeyID(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	auth := apikey.NewAuthenticator(f.db, f.now.Now, 0)
	_, cached := f.key(t, 0)
	mustAuthenticate(t, auth, cached)
	id, _, _ := apikey.Parse(cached)
	_, other := f.key(t, 0)
	unknown := ids.New()

	for _, target := range []string{id, unknown} {
		before := auth.BcryptRuns()
		for i := 0; i < apikey.MaxFailures+20; i++ {
			if _, err := auth.Authenticate(ctx, wrongKey(target, i)); cloud.ErrorCode(err) != cloud.EUNAUTHORIZED {
				t.Fatalf("wrong secret %d: err = %v", i, err)
			}
		}
		if n := auth.BcryptRuns() - before; n != apikey.MaxFailures {
			t.Errorf("%d wrong secrets of one id ran bcrypt %d times, want %d", apikey.MaxFailures+20, n, apikey.MaxFailures)
		}
	}
	before := auth.BcryptRuns()
	if _, err := auth.Authenticate(ctx, cached); err != nil {
		t.Errorf("the cached key of the attacked id: %v", err)
	}
	if auth.BcryptRuns() != before {
		t.Error("the cached key ran bcrypt")
	}
	if _, err := auth.Authenticate(ctx, other); err != nil {
		t.Errorf("another key id: %v", err)
	}

	// A right key of the locked id not yet verified is refused until the
	// window ends, then verifies.
	_, fresh := f.key(t, 0)
	freshID, freshSecret, _ := apikey.Parse(fresh)
	for i := 0; i < apikey.MaxFailures; i++ {
		auth.Authenticate(ctx, wrongKey(freshID, i))
	}
	if _, err := auth.Authenticate(ctx, fresh); cloud.ErrorCode(err) != cloud.EUNAUTHORIZED {
		t.Errorf("right secret of a locked id: err = %v, want unauthorized", err)
	}
	f.now.Add(apikey.FailureWindow)
	if _, err := auth.Authenticate(ctx, "svc_sk_"+freshID+"_"+freshSecret); err != nil {
		t.Errorf("after the window: %v", err)
	}
}

// TestHashChecksBounded floods the authenticator with wrong secrets of many
// ids (so that no failure limit applies) from many goroutines: at most
// MaxHashChecks comparisons run at once, and a key whose verification is
// cached is answered meanwhile without waiting for a slot.
func TestHashChecksBounded(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	auth := apikey.NewAuthenticator(f.db, nil, 0)
	_, key := f.key(t, 0)
	mustAuthenticate(t, auth, key)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 3; i++ {
				auth.Authenticate(ctx, wrongKey(ids.New(), i))
			}
		}()
	}
	wg.Wait()
	if peak := auth.BcryptPeak(); peak < 1 || peak > int64(apikey.MaxHashChecks()) {
		t.Errorf("%d bcrypt comparisons ran at once, bound %d", peak, apikey.MaxHashChecks())
	}

	// Every slot held (as by a flood): the cached key is answered, an
	// uncached one waits and gives up with its caller, unverified.
	slots := auth.HashSlots()
	for i := 0; i < cap(slots); i++ {
		slots <- struct{}{}
	}
	defer func() {
		for i := 0; i < cap(slots); i++ {
			<-slots
		}
	}()
	done := make(chan error, 1)
	go func() { _, err := auth.Authenticate(ctx, key); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("cached key while every slot is held: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cached key waited for a bcrypt slot")
	}
	_, uncached := f.key(t, 0)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	runs := auth.BcryptRuns()
	if _, err := auth.Authenticate(short, uncached); cloud.ErrorCode(err) != cloud.EUNAUTHORIZED {
		t.Errorf("uncached key while every slot is held: err = %v, want unauthorized once its caller gave up", err)
	}
	if auth.BcryptRuns() != runs {
		t.Error("bcrypt ran without a slot")
	}
}
