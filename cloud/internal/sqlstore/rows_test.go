package sqlstore

import (
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// TestMetricsResponse: the newest limit samples come back ascending, and
// the window's From moves to the first of them only when more fell in it.
func TestMetricsResponse(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	q := cloud.MetricsQuery{From: t0, To: t0.Add(time.Hour)}
	sample := func(min int) resource.MetricSample {
		return resource.MetricSample{CapturedAt: resource.T(t0.Add(time.Duration(min) * time.Minute))}
	}
	newestFirst := []resource.MetricSample{sample(30), sample(20), sample(10)}
	for _, tc := range []struct {
		name  string
		limit int
		mins  []int
		from  time.Time
	}{
		{"all fit", 3, []int{10, 20, 30}, t0},
		{"one more than the limit", 2, []int{20, 30}, t0.Add(20 * time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := MetricsResponse(q, tc.limit, append([]resource.MetricSample(nil), newestFirst...))
			if len(out.Data) != len(tc.mins) {
				t.Fatalf("%d samples, want %d", len(out.Data), len(tc.mins))
			}
			for i, m := range tc.mins {
				if got := out.Data[i].CapturedAt.Time; !got.Equal(t0.Add(time.Duration(m) * time.Minute)) {
					t.Errorf("sample %d at %v, want minute %d", i, got, m)
				}
			}
			if !out.Window.From.Time.Equal(tc.from) || !out.Window.To.Time.Equal(q.To) {
				t.Errorf("window %v..%v, want %v..%v", out.Window.From, out.Window.To, tc.from, q.To)
			}
		})
	}
	if out := MetricsResponse(q, 5, nil); out.Data == nil || len(out.Data) != 0 {
		t.Errorf("no samples: data %#v, want an empty list", out.Data)
	}
}

// TestMsTime: NULL and 0 are no time; others are UTC.
func TestMsTime(t *testing.T) {
	zero, ms := int64(0), int64(1700000000123)
	if !MsTime(nil).IsZero() || !MsTime(&zero).IsZero() {
		t.Error("NULL or 0 should be the zero time")
	}
	if got := MsTime(&ms); got.Location() != time.UTC || got.UnixMilli() != ms {
		t.Errorf("MsTime(%d) = %v", ms, got)
	}
}
