package postgres

import "testing"

// TestFinishedCount: the data version is the snapshot's xmax less the
// transactions it lists as running, and a malformed snapshot is an error.
func TestFinishedCount(t *testing.T) {
	for _, tc := range []struct {
		snap string
		want uint64
	}{
		{"10:10:", 10},
		{"8:12:8", 11},
		{"8:12:8,10", 10},
		{"748:753:748,750,752", 750},
	} {
		got, err := finishedCount(tc.snap)
		if err != nil || got != tc.want {
			t.Errorf("finishedCount(%q) = %d, %v; want %d", tc.snap, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "10:10", "x:y:", "1:2:3:4", "3:2:1,2,3"} {
		if got, err := finishedCount(bad); err == nil {
			t.Errorf("finishedCount(%q) = %d, want an error", bad, got)
		}
	}
}
