// Package password hashes and checks panel users' passwords with argon2id
// (golang.org/x/crypto/argon2), stored in the PHC string format
// ($argon2id$v=19$m=...,t=...,p=...$salt$hash) so that parameters can change
// without invalidating older hashes. Hashing is bounded: at most a few run
// at once, since each takes Params.MemoryKiB of memory.
package password

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"
)

// Params are argon2id's cost parameters.
type Params struct {
	MemoryKiB uint32
	Time      uint32
	Threads   uint8
}

// Default is OWASP's recommended minimum for argon2id (19 MiB, 2 passes,
// 1 lane): about 20-40 ms on one core here.
var Default = Params{MemoryKiB: 19 * 1024, Time: 2, Threads: 1}

// Bounds of a password, in characters and bytes.
const (
	MinLength = 12
	MaxBytes  = 1024
)

const (
	saltLen = 16
	keyLen  = 32
)

// ErrMismatch is returned by Check for a wrong password.
var ErrMismatch = errors.New("password: mismatch")

// Hasher hashes and checks passwords under its Params, running at most
// its concurrency of argon2id at once (each holds MemoryKiB).
type Hasher struct {
	params  Params
	sem     chan struct{}
	derived atomic.Int64
}

// Derived returns how many argon2id keys h has derived (Hash, Check and
// CheckNothing each derive one): the panel's tests check with it that a
// sign-in's work does not depend on the accounts an email has.
func (h *Hasher) Derived() int64 { return h.derived.Load() }

// NewHasher returns a Hasher; concurrency < 1 means 4.
func NewHasher(p Params, concurrency int) *Hasher {
	if concurrency < 1 {
		concurrency = 4
	}
	return &Hasher{params: p, sem: make(chan struct{}, concurrency)}
}

// Validate reports why pw is not acceptable as a new password, or nil.
func Validate(pw string) error {
	if !utf8.ValidString(pw) {
		return errors.New("password must be UTF-8 text")
	}
	if utf8.RuneCountInString(pw) < MinLength {
		return fmt.Errorf("password must be at least %d characters", MinLength)
	}
	if len(pw) > MaxBytes {
		return fmt.Errorf("password must be at most %d bytes", MaxBytes)
	}
	return nil
}

// Hash returns the PHC string of pw with a fresh random salt.
func (h *Hasher) Hash(ctx context.Context, pw string) (string, error) {
	p := h.params
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("password: salt: %w", err)
	}
	key, err := h.derive(ctx, pw, salt, p, keyLen)
	if err != nil {
		return "", err
	}
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.MemoryKiB, p.Time, p.Threads,
		b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

// Check compares pw with a PHC string made by Hash: nil when it matches,
// ErrMismatch when not, another error for a malformed hash or a cancelled
// context.
func (h *Hasher) Check(ctx context.Context, pw, phc string) error {
	p, salt, want, err := parse(phc)
	if err != nil {
		return err
	}
	got, err := h.derive(ctx, pw, salt, p, uint32(len(want)))
	if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare(got, want) != 1 {
		return ErrMismatch
	}
	return nil
}

// CheckNothing costs what Check costs and always fails: sign-in runs it for
// an unknown email, so that the answer's timing does not tell whether the
// account exists.
func (h *Hasher) CheckNothing(ctx context.Context, pw string) error {
	salt := make([]byte, saltLen)
	if _, err := h.derive(ctx, pw, salt, h.params, keyLen); err != nil {
		return err
	}
	return ErrMismatch
}

func (h *Hasher) derive(ctx context.Context, pw string, salt []byte, p Params, n uint32) ([]byte, error) {
	if len(pw) > MaxBytes {
		return nil, ErrMismatch
	}
	select {
	case h.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-h.sem }()
	h.derived.Add(1)
	return argon2.IDKey([]byte(pw), salt, p.Time, p.MemoryKiB, p.Threads, n), nil
}

// parse splits a PHC string, refusing parameters outside sane bounds so a
// tampered row cannot make the relay allocate without limit.
func parse(phc string) (Params, []byte, []byte, error) {
	bad := errors.New("password: malformed hash")
	parts := strings.Split(phc, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return Params{}, nil, nil, bad
	}
	var v int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &v); err != nil || v != argon2.Version {
		return Params{}, nil, nil, bad
	}
	var p Params
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.MemoryKiB, &p.Time, &p.Threads); err != nil {
		return Params{}, nil, nil, bad
	}
	if p.MemoryKiB < 8 || p.MemoryKiB > 1<<20 || p.Time < 1 || p.Time > 16 || p.Threads < 1 {
		return Params{}, nil, nil, bad
	}
	b64 := base64.RawStdEncoding
	salt, err := b64.DecodeString(parts[4])
	if err != nil || len(salt) < 8 {
		return Params{}, nil, nil, bad
	}
	key, err := b64.DecodeString(parts[5])
	if err != nil || len(key) < 16 || len(key) > 64 {
		return Params{}, nil, nil, bad
	}
	return p, salt, key, nil
}
