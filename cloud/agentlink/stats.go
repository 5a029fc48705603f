package agentlink

import (
	"math"
	"sync/atomic"
	"time"
)

// Stats are the endpoint's counters since start, for benchmarks and
// operators.
type Stats struct {
	Connections int   `json:"connections"`
	Heartbeats  int64 `json:"heartbeats"` // stored
	Records     int64 `json:"records"`    // in acknowledged batches
	Batches     int64 `json:"batches"`    // acknowledged Records messages
	// Throttled counts the Records messages held by a device's ingest
	// quota (Quota).
	Throttled int64 `json:"throttled"`
	// HeartbeatLatency counts stored heartbeats by the time from reading the
	// message to its commit: bucket i holds latencies in
	// [LatencyBucket(i-1), LatencyBucket(i)).
	HeartbeatLatency []int64 `json:"heartbeatLatency"`
	// HeartbeatSentLatency is the same histogram measured from the "at"
	// time the agent wrote into the heartbeat (its send time, on the
	// agent's clock; negative differences count as 0) to the commit: it
	// adds the time the message spent in buffers and queues before the
	// relay read it. Meaningful where agent and relay share a clock (the
	// load generator).
	HeartbeatSentLatency []int64 `json:"heartbeatSentLatency"`
}

const latencyBuckets = 64

// LatencyBucket returns the upper bound of histogram bucket i: 50µs growing
// by a quarter per bucket (about 12 s at the last).
func LatencyBucket(i int) time.Duration {
	return time.Duration(50e3 * math.Pow(1.25, float64(i)))
}

// LatencyBucketOf returns the histogram bucket that holds d.
func LatencyBucketOf(d time.Duration) int { return bucketOf(d) }

func bucketOf(d time.Duration) int {
	if d <= 50*time.Microsecond {
		return 0
	}
	i := int(math.Ceil(math.Log(float64(d)/50e3) / math.Log(1.25)))
	return min(i, latencyBuckets-1)
}

// Quantile returns the q-quantile (0..1) of a latency histogram as the upper
// bound of the bucket that holds it.
func Quantile(h []int64, q float64) time.Duration {
	var total int64
	for _, n := range h {
		total += n
	}
	if total == 0 {
		return 0
	}
	want := int64(math.Ceil(q * float64(total)))
	var acc int64
	for i, n := range h {
		acc += n
		if acc >= want {
			return LatencyBucket(i)
		}
	}
	return LatencyBucket(len(h) - 1)
}

type counters struct {
	heartbeats, records, batches atomic.Int64
	throttled                    atomic.Int64
	hbLatency                    [latencyBuckets]atomic.Int64
	hbSentLatency                [latencyBuckets]atomic.Int64
	conns                        connCounters // metrics.go
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	st := Stats{
		Connections:          s.Connections(),
		Heartbeats:           s.stats.heartbeats.Load(),
		Records:              s.stats.records.Load(),
		Batches:              s.stats.batches.Load(),
		Throttled:            s.stats.throttled.Load(),
		HeartbeatLatency:     make([]int64, latencyBuckets),
		HeartbeatSentLatency: make([]int64, latencyBuckets),
	}
	for i := range st.HeartbeatLatency {
		st.HeartbeatLatency[i] = s.stats.hbLatency[i].Load()
		st.HeartbeatSentLatency[i] = s.stats.hbSentLatency[i].Load()
	}
	return st
}
