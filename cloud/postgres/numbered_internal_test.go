package postgres

import "testing"

func TestNumbered(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`SELECT id FROM devices WHERE org_id = ? AND id = ?`, `SELECT id FROM devices WHERE org_id = $1 AND id = $2`},
		{`SELECT 1`, `SELECT 1`},
		{`UPDATE t SET a = $1 WHERE b = $2`, `UPDATE t SET a = $1 WHERE b = $2`},
	} {
		// Twice: the second answer comes from the kept rewrite.
		for range 2 {
			if got := numbered(c.in); got != c.want {
				t.Errorf("numbered(%q) = %q, want %q", c.in, got, c.want)
			}
		}
	}
}
