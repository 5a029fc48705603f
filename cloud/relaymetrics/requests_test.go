package relaymetrics_test

import (
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/relaymetrics"
)

// TestRequests checks the labels of the API request metrics: "" becomes
// "unmatched", unknown methods become OTHER, and a repeated combination is
// one series.
func TestRequests(t *testing.T) {
	m := relaymetrics.New()
	r := m.Requests()
	r.ObserveRequest("/api/v1/public/devices/{id}", "GET", 200, time.Millisecond)
	r.ObserveRequest("/api/v1/public/devices/{id}", "GET", 200, 3*time.Millisecond)
	r.ObserveRequest("/api/v1/public/devices/{id}", "GET", 404, time.Millisecond)
	r.ObserveRequest("", "BREW", 404, time.Millisecond)
	fams := gather(t, m.Registry())
	got := map[string]float64{}
	for _, s := range fams["fleet_relay_http_requests_total"].Metric {
		got[labels(s)] = s.GetCounter().GetValue()
	}
	want := map[string]float64{
		"code=200,method=GET,route=/api/v1/public/devices/{id}": 2,
		"code=404,method=GET,route=/api/v1/public/devices/{id}": 1,
		"code=404,method=OTHER,route=unmatched":                 1,
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("requests{%s} = %v, want %v", k, got[k], v)
		}
	}
	lat := map[string]uint64{}
	for _, s := range fams["fleet_relay_http_request_duration_seconds"].Metric {
		lat[labels(s)] = s.GetHistogram().GetSampleCount()
	}
	if len(lat) != 2 || lat["method=GET,route=/api/v1/public/devices/{id}"] != 3 || lat["method=OTHER,route=unmatched"] != 1 {
		t.Errorf("latency counts %v", lat)
	}
}

// BenchmarkObserveRequest is the metrics cost of one API request (a cached
// label child: read lock, map lookup, counter, histogram), from all CPUs.
func BenchmarkObserveRequest(b *testing.B) {
	r := relaymetrics.New().Requests()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.ObserveRequest("/api/v1/public/devices/{id}", "GET", 200, 700*time.Microsecond)
		}
	})
}
