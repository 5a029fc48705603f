package relaymetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleet/fleet/cloud/agentlink"
)

// AgentLinkSource is what the agent endpoint's metrics read at scrape time;
// *agentlink.Server satisfies it.
type AgentLinkSource interface {
	Stats() agentlink.Stats
	ConnStats() agentlink.ConnStats
}

// WatchAgentLink registers the agent endpoint's metrics. They are read from
// the endpoint's own counters at scrape time: nothing is added to the
// heartbeat path.
func (m *Metrics) WatchAgentLink(s AgentLinkSource) error {
	return m.reg.Register(newAgentLinkCollector(s))
}

// latencyEvery picks every third bucket bound of the endpoint's 64-bucket
// latency histogram (each a quarter above the last): 21 bounds from 50µs
// to about 33 s, each about twice the one before. Cumulative counts at
// these bounds are exact. The last bucket, which also holds everything
// above its bound, is left to +Inf.
const latencyEvery = 3

type agentLinkCollector struct {
	src AgentLinkSource

	connected, accepted, closed, heartbeats, records, batches, latency *prometheus.Desc
	bounds                                                             []float64
}

func newAgentLinkCollector(s AgentLinkSource) *agentLinkCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
	}
	c := &agentLinkCollector{
		src:        s,
		connected:  d("agents_connected", "Agent websocket connections open now."),
		accepted:   d("agent_connections_total", "Agent websocket sessions accepted (token valid, upgrade done)."),
		closed:     d("agent_disconnections_total", "Agent websocket sessions ended, by reason ("+reasonList()+").", "reason"),
		heartbeats: d("heartbeats_stored_total", "Agent heartbeats committed to the store."),
		records:    d("records_stored_total", "Spooled agent records (metric samples and events) in acknowledged batches."),
		batches:    d("record_batches_total", "Acknowledged record batches."),
		latency: d("heartbeat_store_latency_seconds",
			"Time from reading a heartbeat off the websocket to its commit in the store."),
	}
	for i := 0; i < len(s.Stats().HeartbeatLatency)-1; i += latencyEvery {
		c.bounds = append(c.bounds, agentlink.LatencyBucket(i).Seconds())
	}
	return c
}

func reasonList() string {
	s := ""
	for i, r := range agentlink.CloseReasons {
		if i > 0 {
			s += ", "
		}
		s += r
	}
	return s
}

func (c *agentLinkCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.connected, c.accepted, c.closed, c.heartbeats, c.records, c.batches, c.latency} {
		ch <- d
	}
}

func (c *agentLinkCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Stats()
	cs := c.src.ConnStats()
	ch <- prometheus.MustNewConstMetric(c.connected, prometheus.GaugeValue, float64(st.Connections))
	ch <- prometheus.MustNewConstMetric(c.accepted, prometheus.CounterValue, float64(cs.Accepted))
	for _, r := range agentlink.CloseReasons {
		ch <- prometheus.MustNewConstMetric(c.closed, prometheus.CounterValue, float64(cs.Closed[r]), r)
	}
	ch <- prometheus.MustNewConstMetric(c.heartbeats, prometheus.CounterValue, float64(st.Heartbeats))
	ch <- prometheus.MustNewConstMetric(c.records, prometheus.CounterValue, float64(st.Records))
	ch <- prometheus.MustNewConstMetric(c.batches, prometheus.CounterValue, float64(st.Batches))

	// Bucket i of the endpoint's histogram holds [bound(i-1), bound(i)):
	// the cumulative count up to bound(i) is the sum of buckets 0..i.
	buckets := make(map[float64]uint64, len(c.bounds))
	var acc, total uint64
	for i, n := range st.HeartbeatLatency {
		acc += uint64(n)
		if i%latencyEvery == 0 && i/latencyEvery < len(c.bounds) {
			buckets[c.bounds[i/latencyEvery]] = acc
		}
	}
	total = acc
	ch <- prometheus.MustNewConstHistogram(c.latency, total, cs.HeartbeatLatencySum.Seconds(), buckets)
}
