// Package ids makes and checks the opaque identifiers used for every
// resource: devices, events, alerts, rules, keys, deliveries, audit records
// and cursors. An id has the shape of a cuid2 (24 characters: a lowercase
// letter, then lowercase letters and digits), and ids made before this
// package stopped using the cuid2 library are ids still; its characters come
// from crypto/rand: 4.7 + 23 × 5.17 ≈ 123 random bits, as unguessable and
// collision-free as cuid2's hash, at a fraction of its cost (the library's
// SHA-3 and big-number base 36 took 22 µs an id, a share of every audited
// change and of every stored event).
package ids

import "crypto/rand"

// Length is the length of every id this package makes.
const Length = 24

const (
	letters  = "abcdefghijklmnopqrstuvwxyz"
	alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
)

// New returns a fresh identifier.
func New() string {
	var out [Length]byte
	var buf [2 * Length]byte
	n := 0
	for n < Length {
		if _, err := rand.Read(buf[:]); err != nil {
			panic("ids: crypto/rand: " + err.Error()) // never, since Go 1.24
		}
		for _, b := range buf {
			if n == Length {
				break
			}
			// Rejection sampling keeps every character uniform: the
			// first from 26 letters, the others from 36 characters.
			if n == 0 {
				if b < 26*9 {
					out[0] = letters[b%26]
					n++
				}
			} else if b < 36*7 {
				out[n] = alphabet[b%36]
				n++
			}
		}
	}
	return string(out[:])
}

// Valid reports whether s has the shape of an id made by New: lowercase
// letters and digits, starting with a letter, of a plausible length. It is a
// cheap syntactic check used to reject garbage before touching the store.
func Valid(s string) bool {
	if len(s) < 2 || len(s) > 32 {
		return false
	}
	if s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
