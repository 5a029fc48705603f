// Package soak runs Fleet under faults for a set time and checks that
// nothing is lost: a real relay process (bin/fleet-relay) on a SQLite file
// in a size-limited tmpfs, simulated agents that speak the real protocol
// through the real agent link (agent/link) with real on-disk spools
// (agent/spool), a userspace proxy between them injecting faults
// (github.com/Shopify/toxiproxy/v2 as a library: latency, bandwidth limits,
// resets, half-open connections, slow close, sliced writes), the relay
// kill -9'ed and restarted every few minutes, its disk filled up for a
// while, and an HTTPS webhook receiver that flaps. It reports the metric
// samples the agents offered against those stored (exactly once), the
// webhook deliveries the relay recorded against those the receiver got,
// and the relay's RSS and goroutines over time (no growth once steady).
//
// The agents are in-process (2,000 agent processes do not fit on two
// cores): each is an agent/link.Link with its own spool directory, so the
// protocol, batching, acknowledgement and spool code are the agent's own;
// only the hardware, the metric sampler and the channel manager are left
// out.
package soak

import (
	"fmt"
	"net/http"
	"time"
)

// Config sets the soak's size, length and faults.
type Config struct {
	// Relay is the fleet-relay binary.
	Relay string
	// Dir holds everything; a temporary directory when empty.
	Dir string
	// Agents is the number of simulated agents; Forwarding of them have
	// signal forwarding to the webhook receiver on.
	Agents, Forwarding int
	// Duration is the length of the faulty phase (then a drain).
	Duration time.Duration
	// Heartbeat and MetricsEvery are each agent's heartbeat interval and
	// metric sample period.
	Heartbeat, MetricsEvery time.Duration
	// FaultEvery starts a fault that lasts FaultFor.
	FaultEvery, FaultFor time.Duration
	// KillEvery kill -9's the relay (restarted at once). Kills, faults and
	// the receiver's flapping happen during the first FaultPhase of
	// Duration (a fraction); the rest is the steady window.
	KillEvery  time.Duration
	FaultPhase float64
	// DiskFullAt fills the database's filesystem DiskFullAt into the run
	// for DiskFullFor (0: never). DBSize is the tmpfs size in bytes.
	DiskFullAt, DiskFullFor time.Duration
	DBSize                  int64
	// FlapEvery toggles the webhook receiver between answering 204 and
	// failing (503, or dropping the connection) for FlapDown.
	FlapEvery, FlapDown time.Duration
	// SampleEvery is the period of the RSS and goroutine samples; WarmUp
	// is skipped at the start of the steady window.
	SampleEvery, WarmUp time.Duration
	// MaxRSSGrowth fails the soak when the relay's RSS grows more than this
	// fraction over the steady window (0: report only).
	MaxRSSGrowth float64
	// Log receives progress lines.
	Log func(format string, args ...any)
}

// Short is the soak `make test` runs: small and quick, every fault once.
func Short(relay string) Config {
	return Config{
		Relay: relay, Agents: 100, Forwarding: 10, Duration: 75 * time.Second,
		Heartbeat: 2 * time.Second, MetricsEvery: 2 * time.Second,
		FaultEvery: 8 * time.Second, FaultFor: 5 * time.Second,
		KillEvery: 25 * time.Second, FaultPhase: 0.7,
		DiskFullAt: 30 * time.Second, DiskFullFor: 8 * time.Second, DBSize: 64 << 20,
		FlapEvery: 7 * time.Second, FlapDown: 2 * time.Second,
		SampleEvery: 2 * time.Second, WarmUp: 5 * time.Second,
	}
}

// Long is `make soak`: 2,000 agents for duration.
func Long(relay string, duration time.Duration) Config {
	return Config{
		Relay: relay, Agents: 2000, Forwarding: 50, Duration: duration,
		Heartbeat: 10 * time.Second, MetricsEvery: 10 * time.Second,
		FaultEvery: 30 * time.Second, FaultFor: 15 * time.Second,
		KillEvery: 2 * time.Minute, FaultPhase: 0.6,
		DiskFullAt: duration / 4, DiskFullFor: 30 * time.Second, DBSize: 512 << 20,
		FlapEvery: 20 * time.Second, FlapDown: 4 * time.Second,
		SampleEvery: 5 * time.Second, WarmUp: 60 * time.Second, MaxRSSGrowth: 0.05,
	}
}

// Report is what a soak found.
type Report struct {
	Agents                          int
	Duration                        time.Duration
	SamplesOffered, SamplesStored   int64
	SamplesLost, SamplesDuplicated  int64
	DeliveriesExpected              int
	DeliveriesReceived              int
	DeliveriesLost                  int
	DeliveriesByState               map[string]int
	Kills, Restarts, UnexpectedExit int
	Faults                          []string
	DiskFull                        DiskFull
	Samples                         []Sample
	// RSSGrowth and GoroutineGrowth are over the steady window, as a
	// fraction of its start (0.03 = 3 %).
	RSSGrowth, GoroutineGrowth float64
	SteadyFrom                 time.Duration
	Notes                      []string
}

// DiskFull is what the disk-full phase saw.
type DiskFull struct {
	Ran bool
	// How is "tmpfs" (a size-limited tmpfs mounted for the database) or
	// why the phase did not run.
	How string
	// API503 is the number of API writes answered 503 service_unavailable
	// in the error envelope while the disk was full; APIOther counts other
	// answers (status: count; 0: no answer). A write may also succeed (200):
	// SQLite reuses the space its write-ahead log already holds, so a full
	// filesystem refuses only the writes that need more.
	API503   int
	APIOther map[int]int
	// Resumed: the API accepted a write within a minute of space returning,
	// ResumedAfter after it.
	Resumed      bool
	ResumedAfter time.Duration
}

// Sample is one reading of the relay process.
type Sample struct {
	At         time.Duration // since the start
	Generation int           // which relay process (0, 1, ... after each kill)
	RSS        int64         // bytes
	Goroutines int
}

// Failed reports whether the soak lost anything (or the RSS grew past
// limit, when limit > 0).
func (r *Report) Failed(limit float64) []string {
	var why []string
	if r.SamplesLost > 0 {
		why = append(why, "samples lost")
	}
	if r.SamplesDuplicated > 0 {
		why = append(why, "samples stored twice")
	}
	if r.DeliveriesLost > 0 {
		why = append(why, "webhook deliveries lost")
	}
	if r.DiskFull.Ran {
		// Stored (200) or refused in the error envelope (503
		// service_unavailable): nothing else while the disk is full.
		for status, n := range r.DiskFull.APIOther {
			if status != http.StatusOK {
				why = append(why, fmt.Sprintf("%d API writes answered %d, not 503 service_unavailable, while the disk was full", n, status))
			}
		}
		if !r.DiskFull.Resumed {
			why = append(why, "the API took no write within a minute of disk space returning")
		}
	}
	if limit > 0 && r.RSSGrowth > limit {
		why = append(why, "relay RSS grew once steady")
	}
	return why
}
