package panel

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/resource"
)

func TestPointValue(t *testing.T) {
	for _, tc := range []struct {
		v    any
		typ  string
		want string
	}{
		{nil, "f32", "—"},
		{21.299999237060547, "f32", "21.3"},
		{float64(4294967295), "u32", "4294967295"},
		{-0.000123456789, "f64", "-0.0001234568"},
		{true, "bool", "on"},
		{false, "bool", "off"},
		{1.0, "bool", "on"},
		{0.0, "bool", "off"},
		{json.Number("12.5"), "f64", "12.5"},
	} {
		if got := pointValue(tc.v, tc.typ); got != tc.want {
			t.Errorf("pointValue(%v, %s) = %q, want %q", tc.v, tc.typ, got, tc.want)
		}
	}
}

// TestAgo: how long ago, to the second under a minute (a device last seen
// 40 s ago was not seen "just now"), rounded down.
func TestAgo(t *testing.T) {
	now := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{0: "now", -time.Second: "now", 3 * time.Second: "3 s ago", 40 * time.Second: "40 s ago",
		59 * time.Second: "59 s ago", 5 * time.Minute: "5 min ago", 10*time.Minute + 59*time.Second: "10 min ago", 3 * time.Hour: "3 h ago", 72 * time.Hour: "3 days ago"} {
		if got := ago(now, now.Add(-d)); got != want {
			t.Errorf("ago of %v = %q, want %q", d, got, want)
		}
	}
	if got := ago(now, time.Time{}); got != "never" {
		t.Errorf("ago of zero = %q", got)
	}
}

// TestPointChartJSON: buckets become uPlot's columns, with a null where
// buckets are missing so that the lines break there.
func TestPointChartJSON(t *testing.T) {
	at := func(s int) resource.Time { return resource.T(time.Unix(int64(s), 0)) }
	got := pointChartJSON([]resource.PointBucket{
		{At: at(100), Min: 1, Max: 3, Avg: 2},
		{At: at(110), Min: 1.5, Max: 2.5, Avg: 2},
		{At: at(140), Min: 0, Max: 1e6, Avg: 5e5},
	}, 10*time.Second)
	want := `{"t":[100,110,120,140],"min":[1,1.5,null,0],"max":[3,2.5,null,1e+06],"avg":[2,2,null,500000]}`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	var v map[string][]*float64
	if err := json.Unmarshal([]byte(got), &v); err != nil {
		t.Errorf("not JSON: %v", err)
	}
	if got := pointChartJSON(nil, time.Second); got != `{"t":[],"min":[],"max":[],"avg":[]}` {
		t.Errorf("no buckets: %s", got)
	}
}
