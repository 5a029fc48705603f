// Package apikey makes, parses and verifies the relay's API keys
// (svc_sk_<id>_<secret>) and device tokens. Only bcrypt hashes of keys and
// SHA-256 sums of device tokens are stored. Its Authenticator turns a bearer
// string into the key it names, paying bcrypt once per key (a bounded cache
// of verified keys) while still checking revocation and expiry on every
// request: the key's row is read again whenever the store's data version
// (cloud.Versioner) says anything was committed since it was read.
package apikey

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/ids"
)

// Prefix starts every API key.
const Prefix = "svc_sk_"

// DeviceTokenPrefix starts every device token.
const DeviceTokenPrefix = "fleet_dt_"

// SecretLength is the length in base62 characters of a key's secret: 43
// characters carry 256 bits, so at least 32 random bytes.
const SecretLength = 43

// MaxKeyLength bounds what Parse accepts.
const MaxKeyLength = 256

// Expiry bounds, in days.
const (
	MinExpiryDays     = 1
	MaxExpiryDays     = 365
	DefaultExpiryDays = 90
)

// Cost is the bcrypt cost of new keys.
const Cost = bcrypt.DefaultCost

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// RandomBase62 returns n characters drawn uniformly from [0-9A-Za-z] with
// crypto/rand.
func RandomBase62(n int) (string, error) {
	b := make([]byte, n)
	max := big.NewInt(int64(len(base62)))
	for i := range b {
		v, err := rand.Int(rand.Reader, max)
		if err != nil {
			return "", fmt.Errorf("apikey: random: %w", err)
		}
		b[i] = base62[v.Int64()]
	}
	return string(b), nil
}

// Generated is a freshly made key: the full key to show once, and what the
// store keeps.
type Generated struct {
	ID   string
	Key  string // svc_sk_<id>_<secret>; shown once, never stored
	Hash []byte // bcrypt hash of the secret
}

// Generate makes a new key with a fresh id and secret.
func Generate() (Generated, error) {
	return generate(Cost)
}

func generate(cost int) (Generated, error) {
	id := ids.New()
	secret, err := RandomBase62(SecretLength)
	if err != nil {
		return Generated{}, err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(secret), cost)
	if err != nil {
		return Generated{}, fmt.Errorf("apikey: hash: %w", err)
	}
	return Generated{ID: id, Key: Prefix + id + "_" + secret, Hash: hash}, nil
}

// Parse splits a key into its id and secret. It checks only the shape.
func Parse(key string) (id, secret string, ok bool) {
	if len(key) > MaxKeyLength || !strings.HasPrefix(key, Prefix) {
		return "", "", false
	}
	rest := key[len(Prefix):]
	i := strings.IndexByte(rest, '_')
	if i < 0 {
		return "", "", false
	}
	id, secret = rest[:i], rest[i+1:]
	if !ids.Valid(id) || secret == "" {
		return "", "", false
	}
	for j := 0; j < len(secret); j++ {
		if c := secret[j]; !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') { // base62
			return "", "", false
		}
	}
	return id, secret, true
}

// ParseExpiry parses an expiry choice: "never", "<n>d" with n in 1..365, or
// a Go duration that is a whole number of days in that range ("720h"). It
// returns 0 for never.
func ParseExpiry(s string) (time.Duration, error) {
	if s == "" {
		return DefaultExpiryDays * 24 * time.Hour, nil
	}
	if s == "never" {
		return 0, nil
	}
	var days int
	if n, ok := strings.CutSuffix(s, "d"); ok {
		v, err := strconv.Atoi(n)
		if err != nil {
			return 0, fmt.Errorf("expiry %q: want 1d..365d or never", s)
		}
		days = v
	} else {
		d, err := time.ParseDuration(s)
		if err != nil || d%(24*time.Hour) != 0 {
			return 0, fmt.Errorf("expiry %q: want 1d..365d or never", s)
		}
		days = int(d / (24 * time.Hour))
	}
	if days < MinExpiryDays || days > MaxExpiryDays {
		return 0, fmt.Errorf("expiry %q: want 1d..365d or never", s)
	}
	return time.Duration(days) * 24 * time.Hour, nil
}

// NewDeviceToken returns a fresh device token (fleet_dt_ and 43 base62
// characters) and the SHA-256 sum the store keeps.
func NewDeviceToken() (token string, sum []byte, err error) {
	s, err := RandomBase62(SecretLength)
	if err != nil {
		return "", nil, err
	}
	token = DeviceTokenPrefix + s
	return token, HashDeviceToken(token), nil
}

// HashDeviceToken returns the SHA-256 sum of a device token, the form the
// store keeps and looks tokens up by.
func HashDeviceToken(token string) []byte {
	s := sha256.Sum256([]byte(token))
	return s[:]
}

// ValidScopes checks that every scope is known and returns them
// de-duplicated in the canonical order of cloud.AllScopes.
func ValidScopes(scopes []string) ([]string, error) {
	if len(scopes) == 0 {
		return nil, fmt.Errorf("at least one scope is required (one of %s)", strings.Join(cloud.AllScopes, ", "))
	}
	want := map[string]bool{}
	for _, s := range scopes {
		s = strings.TrimSpace(s)
		known := false
		for _, a := range cloud.AllScopes {
			if s == a {
				known = true
			}
		}
		if !known {
			return nil, fmt.Errorf("unknown scope %q (known: %s)", s, strings.Join(cloud.AllScopes, ", "))
		}
		want[s] = true
	}
	var out []string
	for _, a := range cloud.AllScopes {
		if want[a] {
			out = append(out, a)
		}
	}
	return out, nil
}

// New checks a key to create (name, scopes, expiresIn: 0 never expires)
// and makes it for organization orgID at now: what a store keeps (the
// bcrypt hash, never the secret) and the full key, to show once.
func New(orgID, name string, scopes []string, expiresIn time.Duration, now time.Time) (*cloud.APIKey, string, error) {
	name, err := cloud.ValidName("name", name)
	if err != nil {
		return nil, "", err
	}
	scopes, err = ValidScopes(scopes)
	if err != nil {
		return nil, "", cloud.Errorf(cloud.EINVALID, "scopes: %v", err)
	}
	if expiresIn < 0 {
		return nil, "", cloud.Errorf(cloud.EINVALID, "expiry must not be negative")
	}
	g, err := Generate()
	if err != nil {
		return nil, "", err
	}
	now = now.UTC().Truncate(time.Millisecond)
	k := &cloud.APIKey{ID: g.ID, OrgID: orgID, Name: name, Hash: g.Hash, Scopes: scopes, CreatedAt: now}
	if expiresIn > 0 {
		k.ExpiresAt = now.Add(expiresIn)
	}
	return k, g.Key, nil
}
