package apikey

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/fleet/fleet/cloud"
)

// DefaultCacheSize bounds the cache of verified keys.
const DefaultCacheSize = 10000

// Versioned is implemented by key services that can tell cheaply whether
// anything was committed since an earlier call (the SQLite store's
// DataVersion): equal numbers mean a key row read at the first is current.
type Versioned interface {
	DataVersion(ctx context.Context) (uint64, error)
}

// Authenticator verifies bearer keys against a cloud.KeyService. The secret
// is checked with bcrypt the first time a whole key is seen; the outcome is
// cached under the key's SHA-256 sum (never the key itself). Revocation and
// expiry are checked on every call, so a revoked key is refused on its very
// next request, even when another process (the admin CLI) revoked it: the
// key's row is read on every call, or, when the key service is Versioned,
// kept until the store's data version changes (any commit, by any process).
type Authenticator struct {
	keys cloud.KeyService
	now  cloud.Now
	max  int

	bcrypts atomic.Int64

	mu sync.Mutex
	// verified holds keys whose secret matched; refused, kept apart so that
	// a flood of wrong secrets cannot evict good keys, those that did not.
	verified map[[32]byte]cacheEntry
	refused  map[[32]byte]cacheEntry
	inflight map[[32]byte]*verifyCall
	// rows holds key rows by id with the data version they were read at
	// (Versioned key services only).
	rows map[string]keyRow
	// used holds when each key's use was last recorded (key services that
	// are cloud.KeyUseRecorders only).
	used map[string]time.Time
}

type keyRow struct {
	key     *cloud.APIKey
	version uint64
}

type cacheEntry struct {
	id   string
	hash string // the bcrypt hash the outcome was computed against
	ok   bool
}

type verifyCall struct {
	done chan struct{}
	ok   bool
}

// NewAuthenticator returns an Authenticator reading keys from keys. now may
// be nil (time.Now); cacheSize <= 0 means DefaultCacheSize.
func NewAuthenticator(keys cloud.KeyService, now cloud.Now, cacheSize int) *Authenticator {
	if now == nil {
		now = time.Now
	}
	if cacheSize <= 0 {
		cacheSize = DefaultCacheSize
	}
	return &Authenticator{
		keys:     keys,
		now:      now,
		max:      cacheSize,
		verified: make(map[[32]byte]cacheEntry),
		refused:  make(map[[32]byte]cacheEntry),
		inflight: make(map[[32]byte]*verifyCall),
		rows:     make(map[string]keyRow),
		used:     make(map[string]time.Time),
	}
}

// FromHeader authenticates the value of an Authorization header, which must
// be "Bearer <key>" (scheme case-insensitive).
func (a *Authenticator) FromHeader(ctx context.Context, header string) (*cloud.APIKey, error) {
	scheme, key, found := strings.Cut(header, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return nil, unauthorized()
	}
	return a.Authenticate(ctx, strings.TrimSpace(key))
}

// Authenticate returns the key that key names. Errors are *cloud.Error:
// EUNAUTHORIZED for a malformed key, an unknown id or a wrong secret (one
// message for all three); EREVOKED or EEXPIRED only once the secret
// verified. Store failures are returned wrapped, as internal errors.
func (a *Authenticator) Authenticate(ctx context.Context, key string) (*cloud.APIKey, error) {
	id, secret, ok := Parse(key)
	if !ok {
		return nil, unauthorized()
	}
	k, err := a.keyByID(ctx, id)
	if err != nil {
		if cloud.ErrorCode(err) == cloud.ENOTFOUND {
			return nil, unauthorized()
		}
		return nil, err
	}
	if !a.verify(key, secret, k) {
		return nil, unauthorized()
	}
	if !k.RevokedAt.IsZero() {
		return nil, cloud.Errorf(cloud.EREVOKED, "the API key was revoked")
	}
	if !k.ExpiresAt.IsZero() && !a.now().Before(k.ExpiresAt) {
		return nil, cloud.Errorf(cloud.EEXPIRED, "the API key expired at %s", k.ExpiresAt.UTC().Format(time.RFC3339))
	}
	a.recordUse(k.ID)
	return k, nil
}

// recordUse tells a cloud.KeyUseRecorder key service that key id was used,
// at most once per cloud.KeyUseResolution per key and in the background:
// the request does not wait for the store's writer.
func (a *Authenticator) recordUse(id string) {
	rec, ok := a.keys.(cloud.KeyUseRecorder)
	if !ok {
		return
	}
	now := a.now()
	a.mu.Lock()
	if last, seen := a.used[id]; seen && now.Sub(last) < cloud.KeyUseResolution {
		a.mu.Unlock()
		return
	}
	if len(a.used) >= a.max {
		for victim := range a.used {
			delete(a.used, victim)
			break
		}
	}
	a.used[id] = now
	a.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if rec.RecordKeyUse(ctx, id, now) != nil {
			a.mu.Lock()
			delete(a.used, id) // try again on the next request
			a.mu.Unlock()
		}
	}()
}

// keyByID returns the key's row: from the row cache when the store's data
// version has not changed since it was read, else from the store. The
// returned key is shared; callers must not modify it.
func (a *Authenticator) keyByID(ctx context.Context, id string) (*cloud.APIKey, error) {
	vs, ok := a.keys.(Versioned)
	if !ok {
		return a.keys.KeyByID(ctx, id)
	}
	// The version is read before the row: a commit racing with the read
	// below changes the version the next call sees, so a row is never
	// trusted beyond the version it was read at.
	ver, err := vs.DataVersion(ctx)
	if err != nil {
		return a.keys.KeyByID(ctx, id)
	}
	a.mu.Lock()
	r, hit := a.rows[id]
	a.mu.Unlock()
	if hit && r.version == ver {
		return r.key, nil
	}
	k, err := a.keys.KeyByID(ctx, id)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	if _, present := a.rows[id]; !present && len(a.rows) >= a.max {
		for victim := range a.rows { // random eviction
			delete(a.rows, victim)
			break
		}
	}
	a.rows[id] = keyRow{key: k, version: ver}
	a.mu.Unlock()
	return k, nil
}

// verify checks secret against k's hash, from the cache when the whole key
// was seen before. Concurrent first sights of one key share one bcrypt run.
func (a *Authenticator) verify(key, secret string, k *cloud.APIKey) bool {
	sum := sha256.Sum256([]byte(key))
	a.mu.Lock()
	for _, cache := range [...]map[[32]byte]cacheEntry{a.verified, a.refused} {
		if e, hit := cache[sum]; hit && e.id == k.ID && subtle.ConstantTimeCompare([]byte(e.hash), k.Hash) == 1 {
			a.mu.Unlock()
			return e.ok
		}
	}
	if c, busy := a.inflight[sum]; busy {
		a.mu.Unlock()
		<-c.done
		return c.ok
	}
	c := &verifyCall{done: make(chan struct{})}
	a.inflight[sum] = c
	a.mu.Unlock()

	a.bcrypts.Add(1)
	c.ok = bcrypt.CompareHashAndPassword(k.Hash, []byte(secret)) == nil

	a.mu.Lock()
	delete(a.inflight, sum)
	cache, max := a.verified, a.max
	if !c.ok {
		cache, max = a.refused, a.max/10+1
	}
	if len(cache) >= max {
		for victim := range cache { // map order is random: evict one at random
			delete(cache, victim)
			break
		}
	}
	cache[sum] = cacheEntry{id: k.ID, hash: string(k.Hash), ok: c.ok}
	a.mu.Unlock()
	close(c.done)
	return c.ok
}

// BcryptRuns returns how many bcrypt comparisons the Authenticator ran.
func (a *Authenticator) BcryptRuns() int64 { return a.bcrypts.Load() }

// CacheLen returns the number of cached verifications (keys that matched).
func (a *Authenticator) CacheLen() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.verified)
}

func unauthorized() error {
	return cloud.Errorf(cloud.EUNAUTHORIZED, "missing or invalid API key")
}
