package apikey

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/fleet/fleet/cloud"
)

// DefaultCacheSize bounds the cache of verified keys.
const DefaultCacheSize = 10000

// Failure limit: after MaxFailures failed verifications of one key id from
// one client address within FailureWindow, further keys naming that id
// from that address that are not already in the cache are refused without
// running bcrypt until the window ends. Other addresses are not held: who
// knows a key's id cannot lock its owner out. Unknown ids are counted
// alike, and a locked id is refused before its row is looked up, so the
// limit tells nothing about which ids exist.
const (
	MaxFailures   = 10
	FailureWindow = time.Minute
)

// MaxHashChecksPerAddress bounds the bcrypt comparisons one client address
// runs or waits for in the relay-wide queue at once: its other keys wait
// for their address's turn, so a flood from one address holds one place in
// the queue and a key from another address waits for at most that many
// comparisons per busy address.
const MaxHashChecksPerAddress = 1

// MaxHashChecks returns the relay-wide bound on concurrent bcrypt
// comparisons: half the usable CPUs, at least one, so that a flood of
// wrong secrets leaves the other half to requests whose keys are cached.
func MaxHashChecks() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// Authenticator verifies bearer keys against a cloud.KeyService. The secret
// is checked with bcrypt the first time a whole key is seen; the outcome is
// cached under the key's SHA-256 sum (never the key itself). A key naming
// an unknown id is checked against a hash of a random secret, so that it
// costs what a wrong secret of a real id costs (no key-id oracle); at most
// MaxHashChecks comparisons run at once (MaxHashChecksPerAddress per client
// address), and a key id with MaxFailures failures from one address in
// FailureWindow runs none from there until the window ends. Revocation and
// expiry are checked on every call, so a revoked key is refused on its very
// next request, even when another process (the admin CLI, another relay)
// revoked it: the key's row is read on every call, or kept while the store's
// data version (cloud.Versioner) holds still (no commit, by any process):
// Authenticate reads that version itself when the key service is also a
// cloud.Versioner; AuthenticateAt takes the one its caller read (the API
// reads it once per request and shares it with its page cache).
type Authenticator struct {
	keys cloud.KeyService
	now  cloud.Now
	max  int

	bcrypts atomic.Int64
	// hashing and hashPeak: comparisons running now, and the most at once.
	hashing, hashPeak atomic.Int64
	// hashSlots bounds concurrent bcrypt comparisons (MaxHashChecks).
	hashSlots chan struct{}
	// unknownHash is the hash that keys naming an unknown id are checked
	// against (a random secret's, made at the first such key).
	unknownHash     []byte
	unknownHashOnce sync.Once

	mu sync.Mutex
	// verified holds keys whose secret matched; refused, kept apart so that
	// a flood of wrong secrets cannot evict good keys, those that did not.
	verified map[[32]byte]cacheEntry
	refused  map[[32]byte]cacheEntry
	inflight map[[32]byte]*verifyCall
	// rows holds key rows by id with the data version they were read at
	// (calls that have a data version only); missing, ids the store did
	// not know at a data version, kept apart so that made-up ids cannot
	// evict real rows. A known and an unknown id cost the same lookups.
	rows    map[string]keyRow
	missing map[string]uint64
	// used holds when each key's use was last recorded (key services that
	// are cloud.KeyUseRecorders only).
	used map[string]time.Time
	// failures counts failed verifications per key id and client address
	// (fixed windows of FailureWindow), bounded like the caches.
	failures map[string]failureCount
	// addrSlots holds each client address's places in the hash queue
	// (MaxHashChecksPerAddress), while anyone from there uses or awaits one.
	addrSlots map[string]*addrSlot
}

type addrSlot struct {
	ch    chan struct{}
	users int
}

type failureCount struct {
	window time.Time // start of the window counted
	n      int
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
	err  error // the comparison did not run (its caller's context ended, or its address got locked)
}

// errLocked: the comparison did not run, its address having used up the
// key id's failures while it waited.
var errLocked = errors.New("apikey: key id locked for this address")

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
		keys:      keys,
		now:       now,
		max:       cacheSize,
		verified:  make(map[[32]byte]cacheEntry),
		refused:   make(map[[32]byte]cacheEntry),
		inflight:  make(map[[32]byte]*verifyCall),
		rows:      make(map[string]keyRow),
		missing:   make(map[string]uint64),
		addrSlots: make(map[string]*addrSlot),
		failures:  make(map[string]failureCount),
		used:      make(map[string]time.Time),
		hashSlots: make(chan struct{}, MaxHashChecks()),
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
// verified. Store failures are returned wrapped, as internal errors. When
// the key service is also a cloud.Versioner, its data version is read
// first (see AuthenticateAt). The caller's address is not known: all such
// calls count as one address.
func (a *Authenticator) Authenticate(ctx context.Context, key string) (*cloud.APIKey, error) {
	if _, _, ok := Parse(key); !ok {
		return nil, unauthorized()
	}
	var version uint64
	var versioned bool
	if vs, ok := a.keys.(cloud.Versioner); ok {
		v, err := vs.DataVersion(ctx)
		version, versioned = v, err == nil
	}
	return a.AuthenticateAt(ctx, key, "", version, versioned)
}

// AuthenticateAt is Authenticate with the store's data version as the
// caller read it, before this call and before anything it tags (the rule
// of cloud.Versioner): the key's row is taken from the row cache when it
// was read at that version, else read from the store and kept tagged with
// it. versioned false means the caller has no version (the store offers
// none, or its read failed): the row is read from the store and not kept.
// addr is the client's address (clientaddr.Key): failures are counted,
// and the hash queue shared fairly, per address.
func (a *Authenticator) AuthenticateAt(ctx context.Context, key, addr string, version uint64, versioned bool) (*cloud.APIKey, error) {
	id, secret, ok := Parse(key)
	if !ok {
		return nil, unauthorized()
	}
	sum := sha256.Sum256([]byte(key))
	k, hit := a.steady(sum, id, version, versioned)
	if hit {
		return a.admit(k)
	}
	fk := failureKey(id, addr)
	if a.lockedOut(sum, id, fk) {
		return nil, unauthorized()
	}
	k, err := a.keyByID(ctx, id, version, versioned)
	if err != nil {
		return nil, err
	}
	known := k != nil
	if !known {
		// The same work as a wrong secret: no answer tells an unknown id
		// from a known one.
		k = &cloud.APIKey{ID: id, Hash: a.hashOfUnknown()}
	}
	ok, err = a.verify(ctx, sum, secret, addr, fk, k)
	if err != nil || !ok || !known { // err: the caller left while waiting
		return nil, unauthorized()
	}
	return a.admit(k)
}

// steady answers the steady state of a key in one look at the caches: the
// whole key (sum) verified before against the hash of its row, and the row
// read at this data version. Such a key is answered by verify's cache
// whatever its failures from any address (a lockout spares keys that
// verified), so the slow path would answer the same, through more locks.
func (a *Authenticator) steady(sum [32]byte, id string, ver uint64, versioned bool) (*cloud.APIKey, bool) {
	if !versioned {
		return nil, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	e, hit := a.verified[sum]
	if !hit || e.id != id || !e.ok {
		return nil, false
	}
	r, hit := a.rows[id]
	if !hit || r.version != ver || subtle.ConstantTimeCompare([]byte(e.hash), r.key.Hash) != 1 {
		return nil, false
	}
	return r.key, true
}

// admit answers a key whose secret matched: refused when revoked or
// expired, else noted as used and returned.
func (a *Authenticator) admit(k *cloud.APIKey) (*cloud.APIKey, error) {
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

// keyByID returns the key's row, or nil when the store knows no key id:
// from the row caches when it was read at data version ver, else from the
// store. The returned key is shared; callers must not modify it.
func (a *Authenticator) keyByID(ctx context.Context, id string, ver uint64, versioned bool) (*cloud.APIKey, error) {
	if !versioned {
		return a.readKey(ctx, id)
	}
	// The version was read before the row: a commit racing with the read
	// below changes the version the next call sees, so a row is never
	// trusted beyond the version it was read at.
	a.mu.Lock()
	r, hit := a.rows[id]
	missVer, missHit := a.missing[id]
	a.mu.Unlock()
	if hit && r.version == ver {
		return r.key, nil
	}
	if missHit && missVer == ver {
		return nil, nil
	}
	k, err := a.readKey(ctx, id)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	if k == nil {
		if _, present := a.missing[id]; !present {
			evictOne(a.missing, a.max/10+1)
		}
		a.missing[id] = ver
	} else {
		if _, present := a.rows[id]; !present {
			evictOne(a.rows, a.max)
		}
		a.rows[id] = keyRow{key: k, version: ver}
	}
	a.mu.Unlock()
	return k, nil
}

// readKey reads key id from the store: nil when there is none.
func (a *Authenticator) readKey(ctx context.Context, id string) (*cloud.APIKey, error) {
	k, err := a.keys.KeyByID(ctx, id)
	if cloud.ErrorCode(err) == cloud.ENOTFOUND {
		return nil, nil
	}
	return k, err
}

// lockedOut reports whether id used up its failures from addr and the key
// (by its sum) did not verify before: then it is refused before its row
// is looked up, known id or not, and the refusal counts as a failure. fk is
// failureKey(id, addr).
func (a *Authenticator) lockedOut(sum [32]byte, id, fk string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.lockedLocked(fk) {
		return false
	}
	if e, hit := a.verified[sum]; hit && e.id == id {
		return false // verified before: the cache answers, no bcrypt
	}
	a.countFailureLocked(fk)
	return true
}

// verify checks secret against k's hash, from the cache when the whole key
// (sum) was seen before. Concurrent first sights of one key share one
// bcrypt run; a key id over its failure limit from addr runs none; every
// run waits for its address's place in the queue (MaxHashChecksPerAddress),
// then for one of the relay-wide hash slots; fk is failureKey(k.ID, addr).
// The error is ctx's when it ended while waiting.
func (a *Authenticator) verify(ctx context.Context, sum [32]byte, secret, addr, fk string, k *cloud.APIKey) (bool, error) {
	for {
		a.mu.Lock()
		for _, cache := range [...]map[[32]byte]cacheEntry{a.verified, a.refused} {
			if e, hit := cache[sum]; hit && e.id == k.ID && subtle.ConstantTimeCompare([]byte(e.hash), k.Hash) == 1 {
				if !e.ok {
					a.countFailureLocked(fk)
				}
				a.mu.Unlock()
				return e.ok, nil
			}
		}
		if a.lockedLocked(fk) {
			a.countFailureLocked(fk)
			a.mu.Unlock()
			return false, nil
		}
		c, busy := a.inflight[sum]
		if !busy {
			break
		}
		a.mu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return false, ctx.Err()
		}
		if c.err == nil {
			return c.ok, nil
		}
		// The first caller did not compare: compare here.
	}
	c := &verifyCall{done: make(chan struct{})}
	a.inflight[sum] = c
	a.mu.Unlock()

	c.ok, c.err = a.compare(ctx, k.Hash, secret, addr, fk)

	a.mu.Lock()
	delete(a.inflight, sum)
	switch {
	case c.err == nil:
		cache, max := a.verified, a.max
		if !c.ok {
			cache, max = a.refused, a.max/10+1
			a.countFailureLocked(fk)
		}
		evictOne(cache, max)
		cache[sum] = cacheEntry{id: k.ID, hash: string(k.Hash), ok: c.ok}
	case errors.Is(c.err, errLocked):
		a.countFailureLocked(fk)
	}
	a.mu.Unlock()
	close(c.done)
	if errors.Is(c.err, errLocked) {
		return false, nil
	}
	return c.ok, c.err
}

// compare runs bcrypt once addr's place in the queue and one of the
// relay-wide hash slots are free, unless addr used up key fk's failures
// while it waited (errLocked).
func (a *Authenticator) compare(ctx context.Context, hash []byte, secret, addr, fk string) (bool, error) {
	release, err := a.addrTurn(ctx, addr)
	if err != nil {
		return false, err
	}
	defer release()
	a.mu.Lock()
	locked := a.lockedLocked(fk)
	a.mu.Unlock()
	if locked {
		return false, errLocked
	}
	select {
	case a.hashSlots <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-a.hashSlots }()
	a.bcrypts.Add(1)
	n := a.hashing.Add(1)
	defer a.hashing.Add(-1)
	for p := a.hashPeak.Load(); n > p && !a.hashPeak.CompareAndSwap(p, n); p = a.hashPeak.Load() {
	}
	return bcrypt.CompareHashAndPassword(hash, []byte(secret)) == nil, nil
}

// addrTurn waits for one of addr's places in the hash queue; release gives
// it back.
func (a *Authenticator) addrTurn(ctx context.Context, addr string) (release func(), err error) {
	a.mu.Lock()
	s := a.addrSlots[addr]
	if s == nil {
		s = &addrSlot{ch: make(chan struct{}, MaxHashChecksPerAddress)}
		a.addrSlots[addr] = s
	}
	s.users++
	a.mu.Unlock()
	leave := func() {
		a.mu.Lock()
		if s.users--; s.users == 0 {
			delete(a.addrSlots, addr)
		}
		a.mu.Unlock()
	}
	select {
	case s.ch <- struct{}{}:
		return func() { <-s.ch; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}

// hashOfUnknown returns the hash keys naming an unknown id are compared
// with: of a random secret nobody knows, at the cost of real keys.
func (a *Authenticator) hashOfUnknown() []byte {
	a.unknownHashOnce.Do(func() {
		secret, err := RandomBase62(SecretLength)
		if err == nil {
			a.unknownHash, err = bcrypt.GenerateFromPassword([]byte(secret), Cost)
		}
		if err != nil { // no randomness: a hash no base62 secret can match
			a.unknownHash = []byte("$2a$10$" + strings.Repeat(".", 53))
		}
	})
	return a.unknownHash
}

// failureKey names the failures of key id from addr.
func failureKey(id, addr string) string { return id + "|" + addr }

// lockedLocked reports whether fk (failureKey) used up its failures in the
// current window. a.mu is held.
func (a *Authenticator) lockedLocked(fk string) bool {
	f, ok := a.failures[fk]
	return ok && f.n >= MaxFailures && a.now().Sub(f.window) < FailureWindow
}

// countFailureLocked counts one failed verification of fk (failureKey).
// a.mu is held.
func (a *Authenticator) countFailureLocked(fk string) {
	now := a.now()
	f, ok := a.failures[fk]
	if !ok || now.Sub(f.window) >= FailureWindow || now.Before(f.window) {
		if !ok {
			evictOne(a.failures, a.max)
		}
		f = failureCount{window: now}
	}
	f.n++
	a.failures[fk] = f
}

// evictOne makes room for one more entry in a map bounded at max entries,
// evicting one at random (map order is random).
func evictOne[K comparable, V any](m map[K]V, max int) {
	if len(m) < max {
		return
	}
	for victim := range m {
		delete(m, victim)
		return
	}
}

// BcryptRuns returns how many bcrypt comparisons the Authenticator ran.
func (a *Authenticator) BcryptRuns() int64 { return a.bcrypts.Load() }

// BcryptPeak returns the most bcrypt comparisons that ran at once.
func (a *Authenticator) BcryptPeak() int64 { return a.hashPeak.Load() }

// CacheLen returns the number of cached verifications (keys that matched).
func (a *Authenticator) CacheLen() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.verified)
}

func unauthorized() error {
	return cloud.Errorf(cloud.EUNAUTHORIZED, "missing or invalid API key")
}
