package apikey_test

import (
	"context"
	"runtime"
	"sync"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/shared/ids"
)

// floodBound bounds the comparisons run while a new key waits for its own
// during a flood from another address (see TestHashQueueIsFairPerAddress).
const floodBound = 10

// Two client addresses, as the API names them (clientaddr.Key).
const (
	attacker = "192.0.2.66"
	owner    = "198.51.100.7"
)

// TestLockoutIsPerAddress: whoever knows a key's id uses up its failures
// from their own address only: there even the right key is refused until
// the window ends, while from the owner's address it verifies.
func TestLockoutIsPerAddress(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	auth := apikey.NewAuthenticator(f.db, f.now.Now, 0)
	_, key := f.key(t, 0)
	id, _, _ := apikey.Parse(key)
	lockFrom(t, auth, id, attacker)
	if _, err := auth.AuthenticateAt(ctx, key, attacker, 0, false); cloud.ErrorCode(err) != cloud.EUNAUTHORIZED {
		t.Errorf("the right key from the address that used up the id's failures: %v, want unauthorized", err)
	}
	if k, err := auth.AuthenticateAt(ctx, key, owner, 0, false); err != nil || k.ID != id {
		t.Errorf("the right key from another address: %v, %v; want it verified", k, err)
	}
}

// lockFrom uses up the failures of key id from addr.
func lockFrom(tb testing.TB, auth *apikey.Authenticator, id, addr string) {
	tb.Helper()
	for i := range apikey.MaxFailures {
		if _, err := auth.AuthenticateAt(context.Background(), wrongKey(id, i), addr, 0, false); cloud.ErrorCode(err) != cloud.EUNAUTHORIZED {
			tb.Fatalf("wrong secret %d: %v", i, err)
		}
	}
}

// TestUnknownIDDoesTheSameWork: on every path (first sight, the same key
// again, and an id locked for the address) a key naming an unknown id reads
// the store and runs bcrypt exactly as often as one naming a real id, so
// no timing tells them apart.
func TestUnknownIDDoesTheSameWork(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	store := &countingStore{DB: f.db}
	auth := apikey.NewAuthenticator(store, f.now.Now, 0)
	_, key := f.key(t, 0)
	known, _, _ := apikey.Parse(key)
	unknown := ids.New()
	const version = 7 // one data version throughout: the row caches hold

	type work struct{ reads, bcrypts int64 }
	try := func(k string) work {
		reads, runs := store.reads.Load(), auth.BcryptRuns()
		if _, err := auth.AuthenticateAt(ctx, k, attacker, version, true); cloud.ErrorCode(err) != cloud.EUNAUTHORIZED {
			t.Fatalf("%s: %v", k, err)
		}
		return work{store.reads.Load() - reads, auth.BcryptRuns() - runs}
	}
	for _, step := range []struct {
		name string
		key  func(id string) string
	}{
		{"first sight", func(id string) string { return wrongKey(id, 0) }},
		{"the same key again", func(id string) string { return wrongKey(id, 0) }},
		{"another wrong secret", func(id string) string { return wrongKey(id, 1) }},
	} {
		k, u := try(step.key(known)), try(step.key(unknown))
		if k != u {
			t.Errorf("%s: a real id cost %+v, an unknown one %+v", step.name, k, u)
		}
	}
	for i := 2; i < apikey.MaxFailures; i++ {
		try(wrongKey(known, i))
		try(wrongKey(unknown, i))
	}
	k, u := try(wrongKey(known, 99)), try(wrongKey(unknown, 99))
	if k != u || k != (work{}) {
		t.Errorf("locked: a real id cost %+v, an unknown one %+v; want no store read and no bcrypt for either", k, u)
	}
}

// TestHashQueueIsFairPerAddress: while one address floods the authenticator
// with well-formed keys of unknown ids (each costs a bcrypt run), a new
// valid key from another address is verified after at most the flood's one
// place in the queue, not after the whole flood.
func TestHashQueueIsFairPerAddress(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	f := newFixture(t)
	auth := apikey.NewAuthenticator(f.db, nil, 0)
	_, key := f.key(t, 0)
	var flood sync.WaitGroup
	for range 100 {
		flood.Add(1)
		go func() {
			defer flood.Done()
			for i := 0; ctx.Err() == nil; i++ {
				auth.AuthenticateAt(ctx, wrongKey(ids.New(), i), attacker, 0, false)
			}
		}()
	}
	for auth.BcryptRuns() < 3 { // the flood is under way
		runtime.Gosched()
	}
	before := auth.BcryptRuns()
	if _, err := auth.AuthenticateAt(ctx, key, owner, 0, false); err != nil {
		t.Fatalf("the valid key during the flood: %v", err)
	}
	// Counted: the flood's one place ahead of it, its own run, and the
	// flood's runs (one at a time) while the answer comes back to this
	// goroutine on a busy machine: a handful, where a queue shared by all
	// ran the whole flood (100) first.
	if n, bound := auth.BcryptRuns()-before, int64(floodBound); n > bound {
		t.Errorf("the valid key was verified after %d comparisons, want at most %d", n, bound)
	}
	stop()
	flood.Wait()
}

// BenchmarkLockedOut refuses a wrong key of an id locked for the address,
// for a real id and for an unknown one, side by side: the same work.
func BenchmarkLockedOut(b *testing.B) {
	ctx := context.Background()
	f := newFixture(b)
	_, key := f.key(b, 0)
	known, _, _ := apikey.Parse(key)
	for _, c := range []struct{ name, id string }{{"known", known}, {"unknown", ids.New()}} {
		auth := apikey.NewAuthenticator(f.db, f.now.Now, 0) // each its own: no state of the other
		lockFrom(b, auth, c.id, attacker)
		k := wrongKey(c.id, 99)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := auth.AuthenticateAt(ctx, k, attacker, 7, true); cloud.ErrorCode(err) != cloud.EUNAUTHORIZED {
					b.Fatal(err)
				}
			}
		})
	}
}
