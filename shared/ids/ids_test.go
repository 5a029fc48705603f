package ids_test

import (
	"testing"

	"github.com/fleet/fleet/shared/ids"
)

func TestNewIsValidAndUnique(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 10000; i++ {
		id := ids.New()
		if len(id) != ids.Length || !ids.Valid(id) {
			t.Fatalf("bad id %q", id)
		}
		if seen[id] {
			t.Fatalf("duplicate id %q", id)
		}
		seen[id] = true
	}
}

func TestValidRejectsGarbage(t *testing.T) {
	for _, s := range []string{"", "a", "1abc", "ABCdef", "abc-def", "abc def", "abc'; DROP TABLE devices;--", "a0123456789012345678901234567890123"} {
		if ids.Valid(s) {
			t.Errorf("Valid(%q) = true", s)
		}
	}
}

// TestNewIsUniform: every character of an id is drawn evenly, the first
// from the 26 letters and the others from the 36 letters and digits, so no
// position carries less randomness than its alphabet allows.
func TestNewIsUniform(t *testing.T) {
	const n = 36000
	first := map[byte]int{}
	rest := map[byte]int{}
	for range n {
		id := ids.New()
		first[id[0]]++
		for i := 1; i < len(id); i++ {
			rest[id[i]]++
		}
	}
	if len(first) != 26 || len(rest) != 36 {
		t.Fatalf("%d distinct first characters (want 26), %d others (want 36)", len(first), len(rest))
	}
	check := func(what string, counts map[byte]int, want float64) {
		for c, k := range counts {
			if d := float64(k)/want - 1; d > 0.1 || d < -0.1 {
				t.Errorf("%s %q drawn %d times, want about %.0f", what, c, k, want)
			}
		}
	}
	check("first character", first, n/26.0)
	check("character", rest, n*(ids.Length-1)/36.0)
}
