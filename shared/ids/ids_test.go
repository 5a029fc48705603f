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
