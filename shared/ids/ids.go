// Package ids makes and checks the opaque identifiers (cuid2) used for every
// resource: devices, events, alerts, rules, keys, deliveries and cursors.
package ids

import (
	"github.com/nrednav/cuid2"
)

// Length is the length of every id this package makes.
const Length = 24

var generate func() string

func init() {
	g, err := cuid2.Init(cuid2.WithLength(Length))
	if err != nil {
		panic(err)
	}
	generate = g
}

// New returns a fresh cuid2 identifier.
func New() string { return generate() }

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
