package relaymetrics_test

import (
	"math"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/relaymetrics"
)

// linkStats is an AgentLinkSource with fixed counters.
type linkStats struct {
	st agentlink.Stats
	cs agentlink.ConnStats
}

func (l linkStats) Stats() agentlink.Stats         { return l.st }
func (l linkStats) ConnStats() agentlink.ConnStats { return l.cs }

// TestAgentLinkHistogram checks that the endpoint's 64-bucket histogram
// becomes a Prometheus histogram with exact cumulative counts at every
// third bound, the overflow bucket only in +Inf, and the latency sum.
func TestAgentLinkHistogram(t *testing.T) {
	h := make([]int64, 64)
	h[0] = 5  // <= 50µs
	h[1] = 7  // (50µs, 62.5µs]: counted from the bound of bucket 3 on
	h[3] = 1  // up to ~98µs
	h[30] = 2 // ~40 ms
	h[63] = 4 // overflow
	src := linkStats{
		st: agentlink.Stats{Connections: 3, Heartbeats: 19, Records: 40, Batches: 2, HeartbeatLatency: h},
		cs: agentlink.ConnStats{Accepted: 5, Closed: map[string]int64{agentlink.ClosedReplaced: 2}, HeartbeatLatencySum: 1500 * time.Millisecond},
	}
	m := relaymetrics.New()
	if err := m.WatchAgentLink(src); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, f := range gather(t, m.Registry()) {
		if f.GetName() != "fleet_relay_heartbeat_store_latency_seconds" {
			continue
		}
		found = true
		hist := f.Metric[0].Histogram
		if hist.GetSampleCount() != 19 || hist.GetSampleSum() != 1.5 {
			t.Errorf("count %d sum %v, want 19 and 1.5", hist.GetSampleCount(), hist.GetSampleSum())
		}
		if n := len(hist.Bucket); n != 21 {
			t.Errorf("%d buckets, want 21", n)
		}
		want := map[int]uint64{0: 5, 3: 13, 27: 13, 30: 15, 60: 15}
		for _, b := range hist.Bucket {
			for i, c := range want {
				if math.Abs(b.GetUpperBound()-agentlink.LatencyBucket(i).Seconds()) < 1e-12 && b.GetCumulativeCount() != c {
					t.Errorf("le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), c)
				}
			}
		}
	}
	if !found {
		t.Fatal("no heartbeat latency histogram")
	}
	fams := gather(t, m.Registry())
	for _, c := range []struct {
		name string
		want float64
	}{{"fleet_relay_agents_connected", 3}, {"fleet_relay_heartbeats_stored_total", 19}, {"fleet_relay_records_stored_total", 40},
		{"fleet_relay_record_batches_total", 2}, {"fleet_relay_agent_connections_total", 5}} {
		f := fams[c.name]
		if f == nil || len(f.Metric) != 1 {
			t.Errorf("%s: %v", c.name, f)
			continue
		}
		v := f.Metric[0].GetCounter().GetValue() + f.Metric[0].GetGauge().GetValue()
		if v != c.want || f.GetHelp() == "" {
			t.Errorf("%s = %v, want %v (help %q)", c.name, v, c.want, f.GetHelp())
		}
	}
	closed := fams["fleet_relay_agent_disconnections_total"]
	if len(closed.Metric) != len(agentlink.CloseReasons) {
		t.Errorf("%d disconnection series, want one per reason (%d)", len(closed.Metric), len(agentlink.CloseReasons))
	}
	for _, s := range closed.Metric {
		want := 0.0
		if labels(s) == "reason="+agentlink.ClosedReplaced {
			want = 2
		}
		if s.GetCounter().GetValue() != want {
			t.Errorf("disconnections{%s} = %v, want %v", labels(s), s.GetCounter().GetValue(), want)
		}
	}
}
