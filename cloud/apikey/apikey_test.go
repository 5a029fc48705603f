package apikey_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/ids"
)

func TestGenerateAndParse(t *testing.T) {
	g, err := apikey.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(g.Key, "svc_sk_"+g.ID+"_") {
		t.Fatalf("key %q does not start with svc_sk_<id>_", g.Key)
	}
	id, secret, ok := apikey.Parse(g.Key)
	if !ok || id != g.ID || len(secret) != apikey.SecretLength {
		t.Fatalf("Parse(%q) = %q, %q, %v", g.Key, id, secret, ok)
	}
	if strings.Contains(string(g.Hash), secret) || !strings.HasPrefix(string(g.Hash), "$2") {
		t.Errorf("hash %q is not a bcrypt hash of the secret", g.Hash)
	}
	g2, _ := apikey.Generate()
	if g2.Key == g.Key || g2.ID == g.ID {
		t.Errorf("two keys are equal")
	}
}

func TestParseRejects(t *testing.T) {
	for _, k := range []string{
		"",
		"svc_sk_",
		"svc_sk_abc",
		"svc_sk_abc_",
		"svc_pk_abc_secret",
		"sk_abc_secret",
		"svc_sk_ABC_secret",  // id must be a cuid
		"svc_sk_abc_sec-ret", // secret is base62
		"svc_sk_abc_secret ", // trailing space
		"svc_sk_abc_" + strings.Repeat("a", 300),
	} {
		if _, _, ok := apikey.Parse(k); ok {
			t.Errorf("Parse(%q) accepted", k)
		}
	}
}

func TestParseExpiry(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"", 90 * day, false},
		{"never", 0, false},
		{"1d", day, false},
		{"90d", 90 * day, false},
		{"365d", 365 * day, false},
		{"720h", 30 * day, false},
		{"0d", 0, true},
		{"366d", 0, true},
		{"-1d", 0, true},
		{"12h", 0, true},
		{"forever", 0, true},
		{"1.5d", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := apikey.ParseExpiry(tc.in)
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("ParseExpiry(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
			}
		})
	}
}

func TestValidScopes(t *testing.T) {
	got, err := apikey.ValidScopes([]string{"alerts:write", "devices:read", "alerts:write"})
	if err != nil || strings.Join(got, ",") != "devices:read,alerts:write" {
		t.Errorf("ValidScopes = %v, %v", got, err)
	}
	for _, bad := range [][]string{nil, {"devices:admin"}, {"devices:read", ""}} {
		if _, err := apikey.ValidScopes(bad); err == nil {
			t.Errorf("ValidScopes(%q) accepted", bad)
		}
	}
}

func TestDeviceToken(t *testing.T) {
	tok, sum, err := apikey.NewDeviceToken()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, apikey.DeviceTokenPrefix) || len(tok) != len(apikey.DeviceTokenPrefix)+apikey.SecretLength {
		t.Errorf("token %q", tok)
	}
	if string(apikey.HashDeviceToken(tok)) != string(sum) || len(sum) != 32 {
		t.Errorf("sum does not match HashDeviceToken")
	}
}

// wrongSecret returns key with the last character of its secret changed.
// (Overwriting it with fixed characters fails the test whenever the
// random secret already ends with them.)
func wrongSecret(key string) string {
	c := byte('z')
	if key[len(key)-1] == c {
		c = 'y'
	}
	return key[:len(key)-1] + string(c)
}

// fixture is a store on a temp file with one organization.
type fixture struct {
	path string
	db   *sqlite.DB
	org  cloud.Org
	now  *storetest.Clock // shared with the store and the authenticator
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{path: filepath.Join(t.TempDir(), "fleet.db"), now: storetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	db, err := sqlite.Open(context.Background(), f.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.Now = f.now.Now
	f.db = db
	if f.org, err = db.CreateOrg(context.Background(), "acme"); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) key(t testing.TB, ttl time.Duration) (*cloud.APIKey, string) {
	t.Helper()
	k, key, err := f.db.CreateKey(context.Background(), f.org.ID, "ci", []string{cloud.ScopeDevicesRead}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return k, key
}

// revokeFromCLI revokes key id through a second handle on the store's
// file, as the admin CLI does while the relay runs.
func (f *fixture) revokeFromCLI(t *testing.T, id string) {
	t.Helper()
	cli, err := sqlite.Open(context.Background(), f.path)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.RevokeKey(context.Background(), id); err != nil {
		t.Fatal(err)
	}
}

// mustAuthenticate fails the test unless auth accepts key.
func mustAuthenticate(t *testing.T, auth *apikey.Authenticator, key string) {
	t.Helper()
	if _, err := auth.Authenticate(context.Background(), key); err != nil {
		t.Fatal(err)
	}
}

func TestAuthenticate(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	auth := apikey.NewAuthenticator(f.db, f.now.Now, 0)
	k, key := f.key(t, 90*24*time.Hour)

	got, err := auth.Authenticate(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != k.ID || got.OrgID != f.org.ID || !got.HasScope(cloud.ScopeDevicesRead) || got.HasScope(cloud.ScopeDevicesWrite) {
		t.Errorf("key = %+v", got)
	}
	fromHeader, err := auth.FromHeader(ctx, "bearer "+key)
	if err != nil || fromHeader.ID != k.ID {
		t.Errorf("FromHeader: %v", err)
	}

	_, other := f.key(t, 0)
	otherID, _, _ := apikey.Parse(other)
	id, secret, _ := apikey.Parse(key)
	flipped := []byte(secret)
	flipped[0] ^= 1
	if flipped[0] < '0' || flipped[0] > 'z' {
		flipped[0] = 'Q'
	}
	var wantMsg string
	for _, tc := range []struct{ name, key string }{
		{"empty", ""},
		{"malformed", "hello"},
		{"unknown id", "svc_sk_" + ids.New() + "_" + secret},
		{"wrong secret", "svc_sk_" + id + "_" + string(flipped)},
		{"other key's secret", "svc_sk_" + id + "_" + strings.TrimPrefix(other, "svc_sk_"+otherID+"_")},
		{"truncated secret", key[:len(key)-1]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := auth.Authenticate(ctx, tc.key)
			if cloud.ErrorCode(err) != cloud.EUNAUTHORIZED {
				t.Fatalf("err = %v, want unauthorized", err)
			}
			if wantMsg == "" {
				wantMsg = cloud.ErrorMessage(err)
			} else if cloud.ErrorMessage(err) != wantMsg {
				t.Errorf("message %q differs from %q: failures must be indistinguishable", cloud.ErrorMessage(err), wantMsg)
			}
		})
	}
	for _, h := range []string{"", "Basic " + key, "Bearer", key} {
		if _, err := auth.FromHeader(ctx, h); cloud.ErrorCode(err) != cloud.EUNAUTHORIZED {
			t.Errorf("FromHeader(%q): err = %v, want unauthorized", h, err)
		}
	}
}

func TestExpiry(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	auth := apikey.NewAuthenticator(f.db, f.now.Now, 0)
	_, key := f.key(t, 24*time.Hour)
	_, never := f.key(t, 0)
	mustAuthenticate(t, auth, key)
	f.now.Add(24*time.Hour - time.Millisecond)
	if _, err := auth.Authenticate(ctx, key); err != nil {
		t.Fatalf("a millisecond before expiry: %v", err)
	}
	f.now.Add(time.Millisecond)
	if _, err := auth.Authenticate(ctx, key); cloud.ErrorCode(err) != cloud.EEXPIRED {
		t.Errorf("at expiry: err = %v, want api_key_expired", err)
	}
	// The secret is checked before expiry is revealed.
	if _, err := auth.Authenticate(ctx, wrongSecret(key)); cloud.ErrorCode(err) != cloud.EUNAUTHORIZED {
		t.Errorf("expired key, wrong secret: err = %v, want unauthorized", err)
	}
	f.now.Add(10 * 365 * 24 * time.Hour)
	if _, err := auth.Authenticate(ctx, never); err != nil {
		t.Errorf("never-expiring key after ten years: %v", err)
	}
}

// TestRevocationFromAnotherHandle revokes through a second handle on the
// same file, as the admin CLI does while the relay runs: the very next
// request is refused, although the key's verification is cached.
func TestRevocationFromAnotherHandle(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	auth := apikey.NewAuthenticator(f.db, nil, 0)
	k, key := f.key(t, 0)
	for i := 0; i < 3; i++ {
		mustAuthenticate(t, auth, key)
	}
	if auth.BcryptRuns() != 1 {
		t.Errorf("bcrypt ran %d times for three requests of one key, want 1", auth.BcryptRuns())
	}
	f.revokeFromCLI(t, k.ID)
	if _, err := auth.Authenticate(ctx, key); cloud.ErrorCode(err) != cloud.EREVOKED {
		t.Fatalf("after revocation: err = %v, want api_key_revoked", err)
	}
	if _, err := auth.Authenticate(ctx, wrongSecret(key)); cloud.ErrorCode(err) != cloud.EUNAUTHORIZED {
		t.Errorf("revoked key, wrong secret: err = %v, want unauthorized", err)
	}
}

func TestCacheConcurrentFirstSightAndBound(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	auth := apikey.NewAuthenticator(f.db, nil, 2)
	_, key := f.key(t, 0)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := auth.Authenticate(ctx, key)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := auth.BcryptRuns(); n != 1 {
		t.Errorf("16 concurrent first requests ran bcrypt %d times, want 1", n)
	}
	for i := 0; i < 3; i++ {
		_, k := f.key(t, 0)
		mustAuthenticate(t, auth, k)
	}
	if n := auth.CacheLen(); n > 2 {
		t.Errorf("cache holds %d entries, bound is 2", n)
	}
}

// TestWrongSecretsDoNotEvictGoodKeys floods the authenticator with wrong
// secrets of a real key id: the good key stays cached (no second bcrypt),
// and a repeated wrong secret is refused from the cache.
func TestWrongSecretsDoNotEvictGoodKeys(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	auth := apikey.NewAuthenticator(f.db, nil, 4)
	_, key := f.key(t, 0)
	mustAuthenticate(t, auth, key)
	id, _, _ := apikey.Parse(key)
	for i := 0; i < 6; i++ {
		bad := wrongKey(id, i)
		if _, err := auth.Authenticate(ctx, bad); cloud.ErrorCode(err) != cloud.EUNAUTHORIZED {
			t.Fatalf("wrong secret: %v", err)
		}
	}
	runs := auth.BcryptRuns()
	mustAuthenticate(t, auth, key)
	if _, err := auth.Authenticate(ctx, wrongKey(id, 5)); cloud.ErrorCode(err) != cloud.EUNAUTHORIZED {
		t.Fatal(err)
	}
	if auth.BcryptRuns() != runs {
		t.Errorf("bcrypt ran %d more times: the good key or the last wrong secret was not cached", auth.BcryptRuns()-runs)
	}
}

// countingStore is the real store, counting key row reads.
type countingStore struct {
	*sqlite.DB
	reads atomic.Int64
}

func (c *countingStore) KeyByID(ctx context.Context, id string) (*cloud.APIKey, error) {
	c.reads.Add(1)
	return c.DB.KeyByID(ctx, id)
}

// TestKeyRowReadOnlyAfterCommit: with the store's data version, the key row
// is not read again while nothing was committed, and is read again (and a
// revocation seen) after any commit, here one by another handle.
func TestKeyRowReadOnlyAfterCommit(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	store := &countingStore{DB: f.db}
	auth := apikey.NewAuthenticator(store, nil, 0)
	k, key := f.key(t, 0)
	// The first request records the key's use in the background, a commit
	// of its own (once a minute per key): let it land before counting.
	mustAuthenticate(t, auth, key)
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		keys, err := sqlite.NewPanelStore(f.db).OrgKeys(ctx, k.OrgID)
		if err == nil && len(keys) == 1 && !keys[0].LastUsedAt.IsZero() {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the key's first use was not recorded: %+v, %v", keys, err)
		}
	}
	store.reads.Store(0)
	for i := 0; i < 5; i++ {
		mustAuthenticate(t, auth, key)
	}
	if n := store.reads.Load(); n != 1 {
		t.Errorf("5 requests after one commit (the recorded use) read the key row %d times, want 1", n)
	}
	// An unrelated commit: the row is read again, the key still works.
	if _, err := f.db.CreateOrg(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	mustAuthenticate(t, auth, key)
	if n := store.reads.Load(); n != 2 {
		t.Errorf("after a commit: %d row reads, want 2", n)
	}
	f.revokeFromCLI(t, k.ID)
	for i := 0; i < 2; i++ {
		if _, err := auth.Authenticate(ctx, key); cloud.ErrorCode(err) != cloud.EREVOKED {
			t.Fatalf("request %d after revocation: err = %v, want api_key_revoked", i, err)
		}
	}
}
