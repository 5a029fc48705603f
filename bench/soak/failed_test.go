package soak

import (
	"strings"
	"testing"
)

// TestFailedDiskFull: while the disk is full a write is stored (200) or
// refused with 503 service_unavailable; any other answer, or no write taken
// after space returns, fails the soak.
func TestFailedDiskFull(t *testing.T) {
	for _, tc := range []struct {
		name string
		df   DiskFull
		want string // "" passes
	}{
		{"stored and refused", DiskFull{Ran: true, API503: 3, APIOther: map[int]int{200: 5}, Resumed: true}, ""},
		{"all stored", DiskFull{Ran: true, APIOther: map[int]int{200: 110}, Resumed: true}, ""},
		{"a 500", DiskFull{Ran: true, API503: 3, APIOther: map[int]int{500: 1}, Resumed: true}, "answered 500"},
		{"no answer", DiskFull{Ran: true, APIOther: map[int]int{0: 2}, Resumed: true}, "answered 0"},
		{"never resumed", DiskFull{Ran: true, API503: 9, APIOther: map[int]int{}}, "took no write"},
		{"not run", DiskFull{How: "not run: no tmpfs"}, ""},
	} {
		why := strings.Join((&Report{DiskFull: tc.df}).Failed(0), "; ")
		if tc.want == "" && why != "" || tc.want != "" && !strings.Contains(why, tc.want) {
			t.Errorf("%s: Failed = %q, want %q", tc.name, why, tc.want)
		}
	}
}
