package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/fleet/fleet/bench/benchreport"
	"github.com/fleet/fleet/shared/protocol"
)

// fdReserve is the descriptors each process (load generator and relay)
// keeps for itself beyond one per agent.
const fdReserve = 64

// Figure names of the capacity rows: the guest run records them with the
// target when this host's RLIMIT_NOFILE cannot hold every agent.
const (
	figAgents  = "concurrent agent websockets on one relay"
	figRSS     = "relay RSS, all agents (scaled to 20,000 from those connected)"
	figPerConn = "relay RSS per idle agent connection"
	// figRSSGuest is issue 31's capacity figure: a relay holding
	// guestAgents idle agents within 1 GiB (the guest run).
	figRSSGuest = "relay RSS, 50,000 idle agents"
	guestAgents = 50000
)

// targetPerConn is issue 31's bound on the relay's RSS per idle agent
// connection, in KiB; beforePerConn what it measured before (the notes
// print it beside the figure).
const (
	targetPerConn = 20
	beforePerConn = "41.1–45.3 KiB before issue 31"
)

// perConnRow is the row of the relay's RSS per idle connection: its RSS
// holding agents idle agents over its RSS before any.
func perConnRow(rss, baseRSS int64, agents int, notes string) benchreport.Row {
	return benchreport.Row{Area: "agent link", Figure: figPerConn, Unit: "KiB", Measured: float64(rss-baseRSS) / float64(max(agents, 1)) / 1024,
		Target: &benchreport.Target{Op: benchreport.AtMost, Value: targetPerConn},
		Notes:  fmt.Sprintf("%s; %s idle agents, %s over a %s base; %s", beforePerConn, num(float64(agents), ""), num(float64(rss)/(1<<20), "MiB"), num(float64(baseRSS)/(1<<20), "MiB"), notes)}
}

// figures are what runBench prints, for the `make bench` report.
type figures struct {
	agents                    int
	capped                    bool  // RLIMIT_NOFILE held agents below the target
	rss, baseRSS, rssLoaded   int64 // relay RSS in bytes: all agents idle, before any, under load
	rate, offered             float64
	p50, p99                  time.Duration
	stored                    int64         // heartbeats stored in the window
	relayCPU, genCPU          time.Duration // CPU per heartbeat stored in the window: relay process, load generator
	drain                     time.Duration
	spooled, spooledWant      int64
	heartbeatEvery, measuring time.Duration
	codec                     protocol.Codec // what the agents spoke
	windows                   []windowFigures
	window                    time.Duration
	alloc                     float64 // relay bytes allocated per heartbeat stored
	gcCycles                  uint64  // relay collections in the measurement
	gcPolicy                  string
	load                      string // the load average at the end
}

// record writes the figures as report rows beside the targets runBench
// prints (the relay's RSS scaled to targetAgents, as its verdict is).
func record(f figures) error {
	scaled := float64(f.rss) * targetAgents / float64(max(f.agents, 1))
	rows := []benchreport.Row{
		{Area: "agent link", Figure: figAgents, Unit: "agents", Measured: float64(f.agents),
			Target: &benchreport.Target{Op: benchreport.AtLeast, Value: targetAgents},
			Notes:  "over loopback from several 127.x addresses; fewer when RLIMIT_NOFILE caps them (the run says so)"},
		{Area: "agent link", Figure: figRSS, Unit: "MiB", Measured: scaled / (1 << 20),
			Target: &benchreport.Target{Op: benchreport.Below, Value: targetRSS / (1 << 30), Unit: "GiB"},
			Notes: fmt.Sprintf("%s measured with %s idle agents (%s per connection over a %s base), %s under load",
				num(float64(f.rss)/(1<<20), "MiB"), num(float64(f.agents), ""), num(float64(f.rss-f.baseRSS)/float64(max(f.agents, 1))/1024, "KiB"),
				num(float64(f.baseRSS)/(1<<20), "MiB"), num(float64(f.rssLoaded)/(1<<20), "MiB"))},
		{Area: "agent link", Figure: "heartbeats stored per second", Unit: "heartbeats/s", Measured: f.rate,
			Target: &benchreport.Target{Op: benchreport.AtLeast, Value: targetHBRate},
			Notes:  fmt.Sprintf("offered %s (every agent each %v), %v measured; relay and load generator share the machine", num(f.offered, "/s"), f.heartbeatEvery.Round(time.Millisecond), f.measuring)},
		{Area: "agent link", Figure: "heartbeat-to-stored p99", Unit: "ms", Measured: ms(worstP99(f)),
			Target: &benchreport.Target{Op: benchreport.Below, Value: ms(targetHBP99)},
			Notes:  windowNotes(f)},
		{Area: "agent link", Figure: "relay CPU per heartbeat stored", Unit: "µs", Measured: us(f.relayCPU),
			Target: &benchreport.Target{Op: benchreport.AtMost, Value: us(targetHBCPU)},
			Notes:  fmt.Sprintf("relay process CPU (user + system) over the measured window / heartbeats stored in it; load generator %s", num(us(f.genCPU), "µs"))},
		{Area: "agent link", Figure: "relay allocation per heartbeat stored", Unit: "B", Measured: f.alloc,
			Notes: fmt.Sprintf("for information: the relay's heap allocation over the measured %v / heartbeats stored; %d GC cycles in it (%s); load average %s at its end", f.measuring, f.gcCycles, f.gcPolicy, f.load)},
		{Area: "agent link", Figure: "reconnect storm drained (every agent flushing an hour of metrics)", Unit: "s", Measured: f.drain.Seconds(),
			Target: &benchreport.Target{Op: benchreport.Below, Value: targetDrain.Seconds()},
			Notes:  fmt.Sprintf("relay restart to last ack; %s of %s spooled samples stored exactly once", num(float64(f.spooled), ""), num(float64(f.spooledWant), ""))},
	}
	rows = append(rows, perConnRow(f.rss, f.baseRSS, f.agents, "measured right after every agent connected (hello and welcome)"))
	if f.capped {
		// The figures with a target come from fleet-loadgen guest, which
		// runs this same load generator where the limit can be raised;
		// this host's own run stays in the report for information.
		rows[0].Figure, rows[0].Target = figAgents+", this host", nil
		rows[0].Notes = fmt.Sprintf("for information: RLIMIT_NOFILE's hard limit here leaves room for %s agents (the relay needs one descriptor each plus %d); the row with the target is the guest run's", num(float64(f.agents), ""), fdReserve)
		rows[1].Figure, rows[1].Target = "relay RSS, this host's agents (scaled to 20,000)", nil
		rows[1].Notes = "for information: " + rows[1].Notes
	}
	if f.codec == protocol.CBOR {
		// The rows above have measured agents speaking JSON since the
		// benchmark began; those of current agents stand beside them.
		for i := range rows {
			rows[i].Figure += cborSuffix
		}
	}
	if f.stored == 0 {
		rows[3].Error = "no heartbeat stored in the measured window"
	}
	if f.spooled != f.spooledWant {
		rows[6].Error = fmt.Sprintf("stored %d spooled samples, want %d", f.spooled, f.spooledWant)
	}
	return benchreport.Record(rows...)
}

// worstP99 is the highest p99 of the windows (the target holds in every
// one), the whole measurement's when there are none.
func worstP99(f figures) time.Duration {
	worst := time.Duration(0)
	for _, w := range f.windows {
		worst = max(worst, w.p99)
	}
	if len(f.windows) == 0 {
		return f.p99
	}
	return worst
}

// windowNotes lists each window's p99 with the GC cycles in it.
func windowNotes(f figures) string {
	var b strings.Builder
	fmt.Fprintf(&b, "the worst of %d windows of %v: ", len(f.windows), f.window)
	for i, w := range f.windows {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%d GC)", num(ms(w.p99), "ms"), w.gcCycles)
	}
	fmt.Fprintf(&b, "; over the whole %v p99 %s, p50 %s; load average %s at its end", f.measuring, num(ms(f.p99), "ms"), num(ms(f.p50), "ms"), f.load)
	return b.String()
}

// cborSuffix marks the figures of a run whose agents speak CBOR.
const cborSuffix = " (CBOR agents)"

// num is a figure as the report prints it ("1,364 MiB").
func num(v float64, unit string) string { return benchreport.FormatValue(v, unit) }

// capacity is what a --connect-only run measures.
type capacity struct {
	agents       int
	rss, baseRSS int64
	connectTime  time.Duration
	when         string // when the figures were taken
}

// recordCapacity writes the capacity rows with their targets: the agents
// connected at once and the relay's RSS holding them (not scaled: every
// agent is connected).
func recordCapacity(c capacity) error {
	rows := []benchreport.Row{
		benchreport.Row{Area: "agent link", Figure: figAgents, Unit: "agents", Measured: float64(c.agents),
			Target: &benchreport.Target{Op: benchreport.AtLeast, Value: targetAgents},
			Notes:  fmt.Sprintf("over loopback from several 127.x addresses, all connected in %s and counted by the relay", c.connectTime.Round(100*time.Millisecond))},
		benchreport.Row{Area: "agent link", Figure: figRSS, Unit: "MiB", Measured: float64(c.rss) * targetAgents / float64(max(c.agents, 1)) / (1 << 20),
			Target: &benchreport.Target{Op: benchreport.Below, Value: targetRSS / (1 << 30), Unit: "GiB"},
			Notes: fmt.Sprintf("%s measured with %s idle agents (%s per connection over a %s base)",
				num(float64(c.rss)/(1<<20), "MiB"), num(float64(c.agents), ""),
				num(float64(c.rss-c.baseRSS)/float64(max(c.agents, 1))/1024, "KiB"), num(float64(c.baseRSS)/(1<<20), "MiB"))},
		perConnRow(c.rss, c.baseRSS, c.agents, c.when),
	}
	if c.agents >= guestAgents {
		rows = append(rows, benchreport.Row{Area: "agent link", Figure: figRSSGuest, Unit: "MiB", Measured: float64(c.rss) / (1 << 20),
			Target: &benchreport.Target{Op: benchreport.AtMost, Value: 1, Unit: "GiB"},
			Notes:  fmt.Sprintf("the whole relay holding %s idle agents, all connected in %s", num(float64(c.agents), ""), c.connectTime.Round(100*time.Millisecond))})
	}
	return benchreport.Record(rows...)
}
