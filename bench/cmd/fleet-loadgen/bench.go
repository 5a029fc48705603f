package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/procfs"

	"github.com/fleet/fleet/bench/benchstore"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/relaygc"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// Targets (DESIGN.md, performance targets).
const (
	targetAgents = 20000
	targetRSS    = 2 << 30 // bytes for all agents
	targetHBRate = 20000   // heartbeats stored per second
	targetHBP99  = 100 * time.Millisecond
	targetDrain  = 30 * time.Second
	// targetHBCPU is the relay's CPU per heartbeat stored (issue 31).
	targetHBCPU     = 45 * time.Microsecond
	spooledPerAgent = 12 // one hour at the 5-minute default
)

type benchFlags struct {
	agents   int
	sources  int
	interval time.Duration
	rate     float64
	duration time.Duration
	dialConc int
	// connectTimeout bounds one agent's connection and handshake.
	connectTimeout time.Duration
	keep           bool
	probeEvery     int
	profile        string
	// connectOnly stops after connecting every agent and records only the
	// capacity figures (count and RSS): what the guest run measures.
	connectOnly bool
	idleBeats   int
	// codec is what the agents offer in their hello: CBOR as current agents
	// do, or JSON (nothing offered) as agents from before CBOR.
	codec protocol.Codec
	// points, when above 0, makes the run the point samples benchmark:
	// every agent sends a batch of that many samples each pointsInterval
	// (points.go).
	points         int
	pointsInterval time.Duration
	// window is the length of the windows the measured duration is cut
	// into, each with its own p99 and GC cycles (the target holds in
	// every one).
	window time.Duration
	// memoryLimit and gcPercent are the relay's garbage collector flags,
	// as fleet-relay serve's (cloud/relaygc).
	memoryLimit string
	gcPercent   int
}

func runBench(ctx context.Context, args []string) error {
	var f benchFlags
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.IntVar(&f.agents, "agents", targetAgents, "concurrent agents (capped by RLIMIT_NOFILE)")
	fs.IntVar(&f.sources, "sources", 8, "127.0.0.x source addresses to spread the agents over")
	fs.Float64Var(&f.rate, "rate", targetHBRate*1.01, "heartbeats offered per second in all (each agent's period is agents / rate); ignored with --heartbeat")
	fs.DurationVar(&f.interval, "heartbeat", 0, "heartbeat period of every agent (offered rate = agents / period); default: from --rate")
	fs.DurationVar(&f.duration, "duration", 30*time.Second, "steady-state measurement, cut into --window windows")
	fs.DurationVar(&f.window, "window", 30*time.Second, "each window of the measurement has its own heartbeat-to-stored p99 and GC cycles; the report's p99 is the worst window's")
	fs.StringVar(&f.memoryLimit, "memory-limit", relaygc.Auto, "the relay's soft memory limit, as fleet-relay serve --memory-limit")
	fs.IntVar(&f.gcPercent, "gc-percent", 0, "the relay's GOGC, as fleet-relay serve --gc-percent (0: its default)")
	fs.IntVar(&f.dialConc, "dial-concurrency", 512, "agents connecting at once")
	fs.DurationVar(&f.connectTimeout, "connect-timeout", 30*time.Second, "bound on one agent's connection and handshake (each agent tries five times)")
	fs.IntVar(&f.probeEvery, "probe-every", 100, "every Nth agent follows each heartbeat with a one-sample batch and times the ack (end-to-end probe)")
	fs.BoolVar(&f.keep, "keep", false, "keep the temporary directory")
	fs.StringVar(&f.profile, "profile", "", "write CPU profiles of the relay and of the load generator over the measured window to this directory (with --connect-only: the relay's heap profile, goroutine stacks and MemStats with every agent idle)")
	fs.IntVar(&f.idleBeats, "idle-beats", 0, "with --connect-only: every agent sends about this many heartbeats (at --rate) before the figures, which then show idle connections that have handled messages")
	fs.BoolVar(&f.connectOnly, "connect-only", false, "connect every agent, report the relay's connections and RSS, and stop (no heartbeat load, no storm)")
	codec := fs.String("codec", string(protocol.CBOR), "what the agents speak after the welcome: cbor (offered in the hello, as current agents) or json (nothing offered, as agents from before CBOR)")
	fs.IntVar(&f.points, "points", 0, "point samples each agent sends per --points-interval, in one record (0: the heartbeat benchmark; above 0: the point samples benchmark, heartbeats every 30s unless --heartbeat)")
	fs.DurationVar(&f.pointsInterval, "points-interval", time.Second, "each agent's sampling round with --points")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if f.window <= 0 {
		f.window = f.duration
	}
	if f.points < 0 || f.points > maxLoadPoints || f.pointsInterval <= 0 {
		return fmt.Errorf("--points must be 0..%d and --points-interval positive", maxLoadPoints)
	}
	if f.points > 0 {
		// The probe's metric sample would share the agent's sequence with
		// the point batches, sent from another goroutine: the batches' acks
		// time the points instead.
		f.probeEvery = 0
		if f.interval <= 0 {
			f.interval = 30 * time.Second // fleet-agent's default
		}
	}
	switch f.codec = protocol.Codec(*codec); f.codec {
	case protocol.CBOR, protocol.JSON:
	default:
		return fmt.Errorf("--codec %q: want cbor or json", *codec)
	}
	limit, err := raiseNoFile()
	if err != nil {
		return fmt.Errorf("raise RLIMIT_NOFILE: %w", err)
	}
	n := f.agents
	capped := false
	if uint64(n)+fdReserve > limit {
		n = int(limit) - fdReserve
		capped = true
		fmt.Printf("note: RLIMIT_NOFILE hard limit is %d here and cannot be raised without CAP_SYS_RESOURCE; the relay needs one descriptor per agent plus its own, so this run uses %d agents (target stays %d; fleet-loadgen guest measures the full count in a VM)\n", limit, n, f.agents)
	}
	if f.interval <= 0 {
		if f.rate <= 0 {
			return fmt.Errorf("--rate must be positive")
		}
		// The offered rate is the same whatever the number of agents the
		// machine allows: 1 % above the stored-rate target by default.
		f.interval = time.Duration(float64(n) / f.rate * float64(time.Second))
	}
	if f.points > 0 {
		fmt.Printf("offered: %.0f point samples/s (%d agents, each %d samples every %v, speaking %s), heartbeats every %v\n",
			float64(n*f.points)/f.pointsInterval.Seconds(), n, f.points, f.pointsInterval, f.codec, f.interval)
	} else if !f.connectOnly {
		fmt.Printf("offered: %.0f heartbeats/s (%d agents, each every %v, speaking %s)\n", float64(n)/f.interval.Seconds(), n, f.interval.Round(time.Millisecond), f.codec)
	}
	dir, err := os.MkdirTemp("", "fleet-loadgen-")
	if err != nil {
		return err
	}
	if !f.keep {
		defer os.RemoveAll(dir)
	} else {
		fmt.Println("temp dir:", dir)
	}
	dbPath := filepath.Join(dir, "fleet.db")
	t0 := time.Now()
	ten, err := createDevices(ctx, dbPath, n)
	if err != nil {
		return err
	}
	fmt.Printf("devices: %d created in the store in %s\n", n, time.Since(t0).Round(time.Millisecond))

	relay, err := startRelay(dbPath, filepath.Join(dir, "relay.log"), f.relayArgs()...)
	if err != nil {
		return err
	}
	defer relay.kill()
	time.Sleep(300 * time.Millisecond)
	baseRSS, _ := relay.rss()

	b := &bench{f: f, url: "ws://" + relay.addr + protocol.Path, relay: relay}
	b.agents = make([]*lagent, n)
	for i := range b.agents {
		b.agents[i] = &lagent{idx: i, token: ten.Tokens[i]}
	}
	b.clients = makeClients(f.sources)

	// Phase 1: connect every agent.
	t0 = time.Now()
	if err := b.connectAll(ctx, false); err != nil {
		return err
	}
	connectTime := time.Since(t0)
	if f.connectOnly && f.idleBeats > 0 {
		// Idle as a relay's agents are between heartbeats: each has sent
		// some, which the relay read and handled on the connection.
		hbCtx, hbStop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		b.startHeartbeats(hbCtx, &wg)
		time.Sleep(time.Duration(f.idleBeats) * f.interval)
		hbStop()
		wg.Wait()
		if err := b.drainBacklog(ctx, f.interval, n); err != nil {
			return err
		}
		// The relay's message workers (cloud/agentlink) exit after
		// agentlink.WorkerIdle without work: idle is after that.
		time.Sleep(agentlink.WorkerIdle + time.Second)
		fmt.Printf("idle beats: every agent sent about %d heartbeats (each every %v) before the figures\n", f.idleBeats, f.interval.Round(time.Millisecond))
	}
	time.Sleep(time.Second)
	st, err := relay.stats()
	if err != nil {
		return err
	}
	rss, _ := relay.rss()
	perConn := float64(rss-baseRSS) / float64(n)
	fmt.Printf("connected: %d agents in %s (relay reports %d connections)\n", n, connectTime.Round(time.Millisecond), st.Link.Connections)
	if st.Link.Connections != n {
		return fmt.Errorf("the relay reports %d connections, want %d", st.Link.Connections, n)
	}
	if f.connectOnly {
		fmt.Printf("  relay RSS, all agents        %8.0f MiB | < %d MiB%s  (%.1f KiB per connection over a %.0f MiB base)\n",
			float64(rss)/(1<<20), targetRSS>>20, okMark(rss < targetRSS), perConn/1024, float64(baseRSS)/(1<<20))
		fmt.Printf("  relay RSS per connection     %8.1f KiB | ≤ %d KiB%s  (%s)\n", perConn/1024, targetPerConn, okMark(perConn <= targetPerConn*1024), beforePerConn)
		if m, err := relay.idleMemory(); err == nil {
			per := func(v int64) float64 { return float64(v) / float64(n) / 1024 }
			fmt.Printf("  relay per connection: heap in use %.1f KiB, goroutine stacks %.1f KiB, other runtime %.1f KiB, %.2f goroutines\n",
				per(m.heapInuse), per(m.stackInuse), per(m.other), float64(m.goroutines)/float64(n))
		}
		if f.profile != "" {
			if err := saveIdleProfiles(f.profile, relay); err != nil {
				fmt.Fprintln(os.Stderr, "profile:", err)
			}
		}
		when := "measured right after every agent connected (hello and welcome)"
		if f.idleBeats > 0 {
			when = fmt.Sprintf("measured after every agent sent about %d heartbeats and the relay's workers went idle", f.idleBeats)
		}
		return recordCapacity(capacity{agents: n, rss: rss, baseRSS: baseRSS, connectTime: connectTime, when: when})
	}
	if f.points > 0 {
		return b.runPoints(ctx, dbPath, ten)
	}

	// Phase 2: steady heartbeats.
	hbCtx, hbStop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	b.startHeartbeats(hbCtx, &wg)
	// Warm up: every agent's first heartbeat writes all its channel rows
	// and a heartbeat event; measure the steady state after it.
	time.Sleep(max(2*time.Second, 2*f.interval+time.Second))
	if err := b.drainBacklog(ctx, f.interval, n); err != nil {
		hbStop()
		return err
	}
	s0, err := relay.stats()
	if err != nil {
		hbStop()
		return err
	}
	g0 := b.sendStats()
	load0 := loadAvg()
	wal0 := fileSize(dbPath + "-wal")
	b.resetProbes()
	stopProf, err := startProfiles(f.profile, relay, f.duration)
	if err != nil {
		hbStop()
		return err
	}
	cpu0, self0 := relay.cpuTime(), selfCPUTime()
	w0 := time.Now()
	marks := []windowMark{{at: w0, st: s0, send: g0, cpu: cpu0}}
	var s1 relayStats
	for k := 1; ; k++ {
		end := w0.Add(min(time.Duration(k)*f.window, f.duration))
		time.Sleep(time.Until(end))
		if s1, err = relay.stats(); err != nil {
			break
		}
		marks = append(marks, windowMark{at: time.Now(), st: s1, send: b.sendStats(), cpu: relay.cpuTime()})
		if !end.Before(w0.Add(f.duration)) {
			break
		}
	}
	if err := stopProf(); err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
	}
	last := marks[len(marks)-1]
	g1 := last.send
	window := last.at.Sub(w0)
	relayCPU, selfCPU := last.cpu-cpu0, selfCPUTime()-self0
	probes := b.probeQuantiles()
	hbStop()
	wg.Wait()
	if err != nil {
		return err
	}
	rssLoaded, _ := relay.rss()
	load1 := loadAvg()
	wal1 := fileSize(dbPath + "-wal")
	raisedThreads := relay.raisedThreads()
	hist := make([]int64, len(s1.Link.HeartbeatLatency))
	for i := range hist {
		hist[i] = s1.Link.HeartbeatLatency[i] - s0.Link.HeartbeatLatency[i]
	}
	stored := s1.Link.Heartbeats - s0.Link.Heartbeats
	rate := float64(stored) / window.Seconds()
	relayPerHB, genPerHB := perHeartbeat(relayCPU, stored), perHeartbeat(selfCPU, stored)
	readP50, readP99 := agentlink.Quantile(hist, 0.50), agentlink.Quantile(hist, 0.99)
	// The target figure: from the time each agent sent its heartbeat to
	// the commit, over every heartbeat sent in the window; heartbeats sent
	// but not stored by its end count as misses (beyond every bucket).
	sentHist := make([]int64, len(s1.Link.HeartbeatSentLatency))
	for i := range sentHist {
		sentHist[i] = s1.Link.HeartbeatSentLatency[i] - s0.Link.HeartbeatSentLatency[i]
	}
	sent := g1.sent - g0.sent
	unstored := max(0, sent-stored)
	sentHist[len(sentHist)-1] += unstored
	p50, p99 := agentlink.Quantile(sentHist, 0.50), agentlink.Quantile(sentHist, 0.99)
	lag := g1.lagHist()
	for i, v := range g0.lagHist() {
		lag[i] -= v
	}
	windows := measureWindows(marks)
	worst := slices.MaxFunc(windows, func(a, b windowFigures) int { return cmp.Compare(a.p99, b.p99) })
	rt0, rt1 := s0.Runtime, s1.Runtime
	// The windows are printed at once: the storm below may fail on a
	// machine too busy for the relay to drain in time.
	for i, w := range windows {
		fmt.Printf("window %d of %v: p99 %7.1f ms   (p50 %.1f ms; %d GC cycles, GC CPU %.2f s of which assists %.2f s; relay CPU %.1f µs per heartbeat, %d stored)\n",
			i+1, f.window, ms(w.p99), ms(w.p50), w.gcCycles, w.gcCPU, w.assistCPU, us(w.relayCPU), w.stored)
	}
	txs := s1.Store.Transactions - s0.Store.Transactions
	jobs := s1.Store.Jobs - s0.Store.Jobs
	busy := (s1.Store.Busy - s0.Store.Busy).Seconds() / window.Seconds()
	commit := (s1.Store.Commit - s0.Store.Commit).Seconds() / window.Seconds()

	// Phase 3: reconnect storm. The relay restarts (graceful shutdown, as
	// in a deploy) and every agent reconnects and flushes its spool.
	if err := relay.stop(); err != nil {
		return fmt.Errorf("stop relay: %w", err)
	}
	b.closeAll()
	relay2, err := startRelay(dbPath, filepath.Join(dir, "relay.log"), f.relayArgs()...)
	if err != nil {
		return err
	}
	defer relay2.kill()
	b.url = "ws://" + relay2.addr + protocol.Path
	b.relay = relay2
	t0 = time.Now()
	if err := b.connectAll(ctx, true); err != nil {
		return err
	}
	drain := time.Since(t0)
	relay2.stop()
	stored12, err := countSpooled(ctx, dbPath, ten)
	if err != nil {
		return err
	}

	fmt.Println()
	fmt.Printf("agent link benchmark, agents speaking %s (figure | target)\n", f.codec)
	countMark := okMark(n >= targetAgents)
	if capped {
		countMark = "  (RLIMIT_NOFILE caps this host: fleet-loadgen guest measures the full count)"
	}
	fmt.Printf("  concurrent agents            %8d | %d%s\n", n, targetAgents, countMark)
	fmt.Printf("  relay RSS, all agents        %8.0f MiB | < %d MiB%s  (idle %0.f MiB, under load %.0f MiB)\n",
		float64(rss)/(1<<20), targetRSS>>20, okMark(float64(rss)*float64(targetAgents)/float64(n) < targetRSS), float64(baseRSS)/(1<<20), float64(rssLoaded)/(1<<20))
	fmt.Printf("  relay RSS per connection     %8.1f KiB | ≤ %d KiB%s  (%s)\n", perConn/1024, targetPerConn, okMark(perConn <= targetPerConn*1024), beforePerConn)
	fmt.Printf("  heartbeats stored per second %8.0f /s | >= %d /s%s  (offered %.0f /s; %d transactions, %.0f heartbeats each)\n",
		rate, targetHBRate, okMark(rate >= targetHBRate), float64(n)/f.interval.Seconds(), txs, float64(jobs)/float64(max(txs, 1)))
	fmt.Printf("  heartbeat-to-stored p99      %8.1f ms | < %d ms%s  (the worst of %d windows of %v; over the whole %v: p99 %.1f ms, p50 %.1f ms; agent send to commit, over %d heartbeats sent, %d not stored by its end counted as misses)\n",
		ms(worst.p99), targetHBP99.Milliseconds(), okMark(worst.p99 < targetHBP99 && stored > 0), len(windows), f.window, f.duration, ms(p99), ms(p50), sent, unstored)
	for i, w := range windows {
		fmt.Printf("    window %d: p99 %7.1f ms   (p50 %.1f ms; %d GC cycles, GC CPU %.2f s of which assists %.2f s; relay CPU %.1f µs per heartbeat, %d stored)\n",
			i+1, ms(w.p99), ms(w.p50), w.gcCycles, w.gcCPU, w.assistCPU, us(w.relayCPU), w.stored)
	}
	fmt.Printf("    relay read to commit p99   %8.1f ms |            (p50 %.1f ms)\n", ms(readP99), ms(readP50))
	fmt.Printf("    sender lag p99             %8.1f ms |            (p50 %.1f ms: send time behind each agent's even schedule)\n",
		ms(agentlink.Quantile(lag, 0.99)), ms(agentlink.Quantile(lag, 0.50)))
	fmt.Printf("  relay CPU per heartbeat      %8.1f µs | ≤ %.0f µs%s  (relay process CPU over the window / heartbeats stored; load generator %.1f µs)\n",
		us(relayPerHB), us(targetHBCPU), okMark(relayPerHB <= targetHBCPU && stored > 0), us(genPerHB))
	allocPerHB := float64(rt1.Allocated-rt0.Allocated) / float64(max(stored, 1))
	gcCycles := rt1.GCCycles - rt0.GCCycles
	fmt.Printf("  relay allocation per heartbeat %6.0f B  |            (%d GC cycles in the %v: GC CPU %.2f s, assists %.2f s; live heap %.0f MiB, stacks %.0f MiB, goal %.0f MiB; %s)\n",
		allocPerHB, gcCycles, f.duration, rt1.GCCPU-rt0.GCCPU, rt1.AssistCPU-rt0.AssistCPU,
		float64(rt1.LiveHeap)/(1<<20), float64(rt1.StackBytes)/(1<<20), float64(rt1.HeapGoal)/(1<<20), rt1.Policy)
	fmt.Printf("  relay writer busy            %8.0f %%  |            (of which commit %.0f %%; %s)\n", 100*busy, 100*commit, raisedThreads)
	ck0, ck1 := s0.Checkpoints, s1.Checkpoints
	fmt.Printf("  relay WAL file               %8.1f MiB |            (at the window's end; %.1f MiB at its start; the checkpointer restarted it %d times in the window, holding the writer %.1f ms on average, %.1f ms at most since the relay started)\n",
		float64(wal1)/(1<<20), float64(wal0)/(1<<20), ck1.Restarts-ck0.Restarts, ms((ck1.WriterHeld-ck0.WriterHeld)/time.Duration(max(1, ck1.Restarts-ck0.Restarts))), ms(ck1.MaxWriterHeld))
	if psi, err := os.ReadFile("/proc/pressure/cpu"); err == nil {
		fmt.Printf("  box CPU pressure (PSI)       %s\n", strings.SplitN(string(psi), "\n", 2)[0])
	}
	fmt.Printf("  box load average             %s at the window's start, %s at its end (relay and load generator share the machine with whatever else runs)\n", load0, load1)
	if probes.n > 0 {
		fmt.Printf("  end-to-end probe p99         %8.1f ms |            (p50 %.1f ms, %d probes: heartbeat + one-sample batch sent, ack received)\n", ms(probes.p99), ms(probes.p50), probes.n)
	}
	fmt.Printf("  reconnect storm drained in   %8.1f s  | < %.0f s%s  (%d agents x %d spooled samples; relay restart to last ack)\n",
		drain.Seconds(), targetDrain.Seconds(), okMark(drain < targetDrain), n, spooledPerAgent)
	fmt.Printf("  spooled samples stored       %8d | %d (exactly once)%s\n", stored12, n*spooledPerAgent, okMark(stored12 == int64(n*spooledPerAgent)))
	if err := record(figures{agents: n, capped: capped, rss: rss, baseRSS: baseRSS, rssLoaded: rssLoaded, rate: rate, offered: float64(n) / f.interval.Seconds(), p50: p50, p99: p99,
		stored: stored, relayCPU: relayPerHB, genCPU: genPerHB, drain: drain, codec: f.codec, spooled: stored12, spooledWant: int64(n * spooledPerAgent), heartbeatEvery: f.interval, measuring: f.duration,
		windows: windows, window: f.window, alloc: allocPerHB, gcCycles: gcCycles, gcPolicy: rt1.Policy, load: load1}); err != nil {
		return err
	}
	if stored12 != int64(n*spooledPerAgent) {
		return fmt.Errorf("stored %d spooled samples, want %d", stored12, n*spooledPerAgent)
	}
	return nil
}

// relayArgs are the flags of the relay process that come from the
// benchmark's.
func (f *benchFlags) relayArgs() []string {
	return []string{"--memory-limit", f.memoryLimit, "--gc-percent", fmt.Sprint(f.gcPercent)}
}

// windowMark is what the benchmark reads at the edge of a window.
type windowMark struct {
	at   time.Time
	st   relayStats
	send sendSnapshot
	cpu  time.Duration // the relay's CPU time so far
}

// windowFigures are one window's figures.
type windowFigures struct {
	p50, p99         time.Duration // heartbeat sent to stored
	stored           int64
	gcCycles         uint64
	gcCPU, assistCPU float64 // seconds
	relayCPU         time.Duration
}

// measureWindows returns the figures of each window between consecutive
// marks: each heartbeat counts in the window that stored it (one sent
// late in a window and stored early in the next counts in the next, with
// its whole latency), and those sent but not stored by the end of the
// last window count as its misses, as over the whole measurement.
func measureWindows(marks []windowMark) []windowFigures {
	var out []windowFigures
	first, end := marks[0], marks[len(marks)-1]
	unstored := max(0, (end.send.sent-first.send.sent)-(end.st.Link.Heartbeats-first.st.Link.Heartbeats))
	for i := 1; i < len(marks); i++ {
		a, b := marks[i-1], marks[i]
		hist := make([]int64, len(b.st.Link.HeartbeatSentLatency))
		for k := range hist {
			hist[k] = b.st.Link.HeartbeatSentLatency[k] - a.st.Link.HeartbeatSentLatency[k]
		}
		stored := b.st.Link.Heartbeats - a.st.Link.Heartbeats
		if i == len(marks)-1 {
			hist[len(hist)-1] += unstored
		}
		out = append(out, windowFigures{
			p50: agentlink.Quantile(hist, 0.50), p99: agentlink.Quantile(hist, 0.99), stored: stored,
			gcCycles: b.st.Runtime.GCCycles - a.st.Runtime.GCCycles,
			gcCPU:    b.st.Runtime.GCCPU - a.st.Runtime.GCCPU, assistCPU: b.st.Runtime.AssistCPU - a.st.Runtime.AssistCPU,
			relayCPU: perHeartbeat(b.cpu-a.cpu, stored),
		})
	}
	return out
}

// loadAvg returns the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// raisedThreads says how many of the relay's threads run above the normal
// priority (the store writer asks for nice -10; see cloud/sqlite).
func (p *relayProc) raisedThreads() string {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", p.cmd.Process.Pid))
	if err != nil || len(tasks) == 0 {
		return "thread priorities unknown"
	}
	raised := 0
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		// Field 19 is the nice value; fields count from after the command
		// name, which may hold spaces.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 16 && strings.HasPrefix(f[16], "-") {
			raised++
		}
	}
	if raised == 0 {
		return "writer at normal priority: no CAP_SYS_NICE"
	}
	return fmt.Sprintf("%d relay thread(s) at raised priority: the store writer", raised)
}

func okMark(ok bool) string {
	if ok {
		return "  ok"
	}
	return "  MISSED"
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// perHeartbeat is cpu shared out over n heartbeats (0 when none).
func perHeartbeat(cpu time.Duration, n int64) time.Duration {
	if n <= 0 {
		return 0
	}
	return cpu / time.Duration(n)
}

// selfCPUTime is the user and system CPU time this process used so far.
func selfCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// createDevices registers an organization and n IG-500 devices through the
// store contract (cloud.Admin, as fleet-relay device add does).
func createDevices(ctx context.Context, path string, n int) (benchstore.Tenant, error) {
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		return benchstore.Tenant{}, err
	}
	defer st.Close()
	return benchstore.Provision(ctx, st, "Loadgen", n)
}

// countSpooled counts the samples of the storm (captured in the hour from
// spoolBase) the devices stored, through the public API's service.
func countSpooled(ctx context.Context, path string, ten benchstore.Tenant) (int64, error) {
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	counts, err := benchstore.CountMetrics(ctx, st.Devices(), ten.Org, ten.Devices, spoolBase(), spoolBase().Add(time.Hour-time.Millisecond))
	var n int64
	for _, c := range counts {
		n += c
	}
	return n, err
}

// spoolBase is the capture time of the first spooled sample: the storm's
// samples lie in the hour before the benchmark, the probes' after it.
var spoolStart = time.Now().Add(-2 * time.Hour).Truncate(time.Minute)

func spoolBase() time.Time { return spoolStart }

// relayProc is the relay process.
type relayProc struct {
	cmd  *exec.Cmd
	addr string
	done chan error
}

func startRelay(dbPath, logPath string, extra ...string) (*relayProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, append([]string{"relay", "--db", dbPath, "--listen", "127.0.0.1:0", "--log", logPath}, extra...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &relayProc{cmd: cmd, done: make(chan error, 1)}
	sc := bufio.NewScanner(out)
	lineC := make(chan string, 1)
	go func() {
		for sc.Scan() {
			select {
			case lineC <- sc.Text():
			default:
			}
		}
	}()
	go func() { p.done <- cmd.Wait() }()
	select {
	case line := <-lineC:
		addr, ok := strings.CutPrefix(line, "listening ")
		if !ok {
			cmd.Process.Kill()
			return nil, fmt.Errorf("relay said %q", line)
		}
		p.addr = addr
		return p, nil
	case err := <-p.done:
		return nil, fmt.Errorf("relay exited: %v", err)
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		return nil, errors.New("relay did not start within 30s")
	}
}

// procStat is the relay process's /proc/<pid>/stat.
func (p *relayProc) procStat() (procfs.ProcStat, error) {
	proc, err := procfs.NewProc(p.cmd.Process.Pid)
	if err != nil {
		return procfs.ProcStat{}, err
	}
	return proc.Stat()
}

func (p *relayProc) rss() (int64, error) {
	st, err := p.procStat()
	if err != nil {
		return 0, err
	}
	return int64(st.ResidentMemory()), nil
}

// memStats are the relay's allocation counters.
type memStats struct {
	totalAlloc uint64 // bytes allocated so far
	numGC      uint32 // GC cycles so far
}

// memStats reads the relay's runtime.MemStats from the end of its heap
// profile in text form (/debug/pprof/heap?debug=1).
func (p *relayProc) memStats() (memStats, error) {
	var m memStats
	err := p.read("/debug/pprof/heap?debug=1", func(body io.Reader) error {
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "# TotalAlloc = "); ok {
				fmt.Sscan(v, &m.totalAlloc)
			} else if v, ok := strings.CutPrefix(sc.Text(), "# NumGC = "); ok {
				fmt.Sscan(v, &m.numGC)
			}
		}
		return sc.Err()
	})
	return m, err
}

// cpuTime is the user and system CPU time the relay process used so far
// (0 when it cannot be read).
func (p *relayProc) cpuTime() time.Duration {
	st, err := p.procStat()
	if err != nil {
		return 0
	}
	return time.Duration(st.CPUTime() * float64(time.Second))
}

// read requests path from the relay (10 s timeout) and hands the body to
// decode.
func (p *relayProc) read(path string, decode func(body io.Reader) error) error {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + p.addr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decode(resp.Body)
}

func (p *relayProc) stats() (relayStats, error) {
	var s relayStats
	err := p.read("/stats", func(body io.Reader) error { return json.NewDecoder(body).Decode(&s) })
	return s, err
}

func (p *relayProc) stop() error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		return errors.New("relay did not stop within 30s")
	}
}

func (p *relayProc) kill() {
	if p.cmd.ProcessState == nil {
		p.cmd.Process.Kill()
	}
}

// makeClients returns one HTTP client per source address 127.0.0.2...
func makeClients(n int) []*http.Client {
	out := make([]*http.Client, n)
	for i := range out {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i))}, Timeout: 30 * time.Second}
		out[i] = &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: -1}}
	}
	return out
}

// lagent is one simulated agent.
type lagent struct {
	idx   int
	token string
	ws    *websocket.Conn
	seq   uint64
	beats int
	// probe: send time of the outstanding probe batch (unix nanos), 0: none
	probeAt atomic.Int64
	points  pointAgent
}

type bench struct {
	f       benchFlags
	url     string
	relay   *relayProc
	agents  []*lagent
	clients []*http.Client

	pointIDs []string // with --points
	points   pointCounters

	pmu    sync.Mutex
	probes []time.Duration

	send sendCounters
}

func (b *bench) connectAll(ctx context.Context, storm bool) error {
	return connectEach(len(b.agents), b.f.dialConc, func(i int) error { return b.connect(ctx, b.agents[i], storm) })
}

// connectEach calls connect(i) for each of n agents, conc at a time, each
// up to five times, and reports how many never succeeded.
func connectEach(n, conc int, connect func(i int) error) error {
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var err error
			for attempt := 0; attempt < 5; attempt++ {
				if err = connect(i); err == nil {
					return
				}
				time.Sleep(time.Duration(100*(attempt+1)) * time.Millisecond)
			}
			if failed.Add(1) == 1 {
				firstErr.Store(err)
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d agents failed to connect; first: %v", n, firstErr.Load())
	}
	return nil
}

var channelsTemplate = []protocol.ChannelState{
	{ID: "uart-1", Available: true}, {ID: "rs485-1", Available: true, Live: "120 34"}, {ID: "rs485-2", Available: true},
	{ID: "canfd-1", Available: true, Live: "0x123#DEADBEEF"}, {ID: "gpio-1", Available: true, Live: "0"},
	{ID: "gpio-2", Available: true, Live: "1"}, {ID: "gpio-3", Available: true, Live: "0"}, {ID: "gpio-4", Available: true, Live: "0"},
}

func (b *bench) connect(ctx context.Context, a *lagent, storm bool) error {
	dctx, cancel := context.WithTimeout(ctx, b.f.connectTimeout)
	defer cancel()
	ws, welcome, err := handshake(dctx, b.clients[a.idx%len(b.clients)], b.url, a.token, b.f.codec, a.idx, b.helloInterval())
	if err != nil {
		return err
	}
	if a.seq < welcome.LastSeq {
		a.seq = welcome.LastSeq
	}
	if storm {
		items := make([]protocol.Record, spooledPerAgent)
		for k := range items {
			a.seq++
			items[k] = protocol.Record{Seq: a.seq, Metric: &resource.MetricSample{CapturedAt: resource.T(spoolBase().Add(time.Duration(k) * 5 * time.Minute)),
				CPUPct: float64(k), MemPct: 40, DiskUsedPct: 60, TempCPU: 50, LoadAvg1: 0.3}}
		}
		if err := writeMsg(dctx, ws, b.f.codec, protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: items}}); err != nil {
			ws.CloseNow()
			return err
		}
		for {
			m, err := readMsg(dctx, ws)
			if err != nil {
				ws.CloseNow()
				return fmt.Errorf("no ack: %w", err)
			}
			if m.Type == protocol.TypeAck && m.Ack.Seq >= a.seq {
				break
			}
		}
		ws.CloseNow()
		return nil
	}
	a.ws = ws
	go b.read(a, ws)
	return nil
}

// helloHeartbeat is the heartbeat interval the load generator's agents
// announce in their hello.
const helloHeartbeat = 2 * time.Minute

// helloInterval is the heartbeat interval b's agents announce. With
// --connect-only, the longest the relay honours: the agents send no
// heartbeats (or only --idle-beats), and connecting 50,000 of them in the
// qemu guest under TCG takes longer than three missed heartbeats of
// helloHeartbeat, after which the relay would take the first ones OFFLINE
// and close them.
func (b *bench) helloInterval() time.Duration {
	if b.f.connectOnly {
		return agentlink.MaxHeartbeat
	}
	return helloHeartbeat
}

// handshake opens an agent's websocket to url with token, says hello as
// agent number idx offering codec and announcing heartbeats every
// interval, and returns the connection with the relay's welcome.
func handshake(ctx context.Context, client *http.Client, url, token string, codec protocol.Codec, idx int, interval time.Duration) (*websocket.Conn, protocol.Welcome, error) {
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{
		HTTPClient:   client,
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + token}},
		Subprotocols: []string{protocol.Subprotocol},
	})
	if err != nil {
		return nil, protocol.Welcome{}, err
	}
	ws.SetReadLimit(protocol.MaxMessageBytes)
	hello := protocol.Hello{AgentVersion: "loadgen", FirmwareVersion: "fw-1", Model: "IG-500", DeviceName: fmt.Sprintf("gw-%05d", idx),
		Timezone: "UTC", HeartbeatInterval: protocol.Duration{Duration: interval}, MetricsInterval: protocol.Duration{Duration: 5 * time.Minute}}
	if codec != protocol.JSON {
		hello.Codecs = []protocol.Codec{codec}
	}
	if err := writeMsg(ctx, ws, protocol.JSON, protocol.Message{Type: protocol.TypeHello, Hello: &hello}); err != nil {
		ws.CloseNow()
		return nil, protocol.Welcome{}, err
	}
	m, err := readMsg(ctx, ws)
	if err != nil || m.Type != protocol.TypeWelcome {
		ws.CloseNow()
		return nil, protocol.Welcome{}, fmt.Errorf("no welcome: %v %v", m.Type, err)
	}
	if m.Welcome.Codec.String() != string(codec) {
		ws.CloseNow()
		return nil, protocol.Welcome{}, fmt.Errorf("the relay chose codec %s, not %s", m.Welcome.Codec, codec)
	}
	return ws, *m.Welcome, nil
}

// read consumes what the relay sends: acks time the probes.
func (b *bench) read(a *lagent, ws *websocket.Conn) {
	for {
		m, err := readMsg(context.Background(), ws)
		if err != nil {
			return
		}
		if m.Type == protocol.TypeAck && b.f.points > 0 {
			b.pointsAcked(a, m.Ack.Seq)
		} else if m.Type == protocol.TypeAck {
			if at := a.probeAt.Swap(0); at != 0 {
				d := time.Duration(time.Now().UnixNano() - at)
				b.pmu.Lock()
				b.probes = append(b.probes, d)
				b.pmu.Unlock()
			}
		}
	}
}

func (b *bench) closeAll() {
	for _, a := range b.agents {
		if a.ws != nil {
			a.ws.CloseNow()
			a.ws = nil
		}
	}
}

// startHeartbeats spreads every agent's heartbeats evenly over the period,
// from a few sender goroutines.
func (b *bench) startHeartbeats(ctx context.Context, wg *sync.WaitGroup) {
	spreadBeats(ctx, wg, len(b.agents), b.f.interval, func(i int, due time.Time) { b.beat(ctx, b.agents[i], due) })
}

// spreadBeats calls beat(i, due) for each of n agents once per interval
// until ctx ends, the calls spread evenly over the interval from a few
// sender goroutines (each holding a slice of the agents); due is when the
// call was scheduled.
func spreadBeats(ctx context.Context, wg *sync.WaitGroup, n int, interval time.Duration, beat func(i int, due time.Time)) {
	senders := 4 * runtime.GOMAXPROCS(0)
	per := (n + senders - 1) / senders
	for s := 0; s < senders; s++ {
		lo, hi := s*per, min((s+1)*per, n)
		if lo >= hi {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			gap := interval / time.Duration(hi-lo)
			next := time.Now().Add(time.Duration(lo%(hi-lo)) * gap / time.Duration(senders))
			for {
				for i := lo; i < hi; i++ {
					if d := time.Until(next); d > 0 {
						select {
						case <-ctx.Done():
							return
						case <-time.After(d):
						}
					}
					due := next
					next = next.Add(gap)
					if ctx.Err() != nil {
						return
					}
					beat(i, due)
				}
			}
		}()
	}
}

// hbTemplate is a heartbeat encoded in a codec, cut around its "at" value:
// prefix, at, then parts[0] or parts[1] (gpio-1 at "0" or "1").
type hbTemplate struct {
	prefix string
	parts  [2]string
}

// hbTemplates holds the heartbeat of each codec.
var hbTemplates = map[protocol.Codec]hbTemplate{protocol.JSON: newHBTemplate(protocol.JSON), protocol.CBOR: newHBTemplate(protocol.CBOR)}

func newHBTemplate(codec protocol.Codec) hbTemplate {
	at := resource.T(time.Unix(1, 234e6)) // a float in CBOR, as the beats' times
	atBytes := appendAt(nil, codec, at.Time)
	var t hbTemplate
	for v := range 2 {
		chans := make([]protocol.ChannelState, len(channelsTemplate))
		copy(chans, channelsTemplate)
		chans[4].Live = fmt.Sprint(v)
		hb := protocol.Heartbeat{At: at, Status: resource.StatusOnline, IPAddress: "10.0.0.1", Channels: chans,
			VPN: &protocol.VPN{Up: true, InterfaceName: "wg0", Endpoint: "vpn.example:51820", PeerCount: 1}}
		b, err := codec.Marshal(&protocol.Message{Type: protocol.TypeHeartbeat, Heartbeat: &hb})
		if err != nil {
			panic(err)
		}
		i := bytes.Index(b, atBytes)
		if i < 0 || bytes.Count(b, atBytes) != 1 {
			panic("loadgen: the heartbeat's time is not where the template expects it")
		}
		t.prefix, t.parts[v] = string(b[:i]), string(b[i+len(atBytes):])
	}
	return t
}

// heartbeatMsg returns an agent's n-th heartbeat in codec, sent now. It is
// spliced from pre-encoded parts (the generator must stay cheap: it shares
// the CPU with the relay); gpio-1 toggles, so every heartbeat changes one
// channel.
func heartbeatMsg(codec protocol.Codec, n int) []byte {
	tmpl := hbTemplates[codec]
	msg := make([]byte, 0, len(tmpl.prefix)+len(resource.TimeLayout)+2+len(tmpl.parts[1]))
	msg = append(msg, tmpl.prefix...)
	msg = appendAt(msg, codec, time.Now())
	return append(msg, tmpl.parts[n%2]...)
}

// appendAt appends the encoding of a heartbeat's "at" in codec.
func appendAt(b []byte, codec protocol.Codec, at time.Time) []byte {
	if codec == protocol.CBOR {
		enc, err := resource.T(at).MarshalCBOR()
		if err != nil {
			panic(err)
		}
		return append(b, enc...)
	}
	b = append(b, '"')
	b = at.UTC().AppendFormat(b, resource.TimeLayout)
	return append(b, '"')
}

// drainBacklog waits (up to a minute) until the relay has stored about
// every heartbeat sent so far, so that the measured window is the steady
// state and not the backlog of the first heartbeats (each writes every
// channel and a heartbeat event). It says how long it waited.
func (b *bench) drainBacklog(ctx context.Context, interval time.Duration, agents int) error {
	slack := int64(float64(agents) * (100 * time.Millisecond).Seconds() / interval.Seconds())
	t0 := time.Now()
	for {
		st, err := b.relay.stats()
		if err != nil {
			return err
		}
		backlog := b.send.sent.Load() - st.Link.Heartbeats
		if backlog <= slack {
			fmt.Printf("warm-up: relay caught up with the first heartbeats %s after the minimum warm-up (backlog %d)\n", time.Since(t0).Round(100*time.Millisecond), max(backlog, 0))
			return nil
		}
		if time.Since(t0) > time.Minute {
			fmt.Printf("warm-up: relay still %d heartbeats behind after a minute; measuring anyway\n", backlog)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// sendCounters count the heartbeats written and how late each was against
// its agent's schedule.
type sendCounters struct {
	sent atomic.Int64
	lag  [64]atomic.Int64 // agentlink latency buckets
}

// sendSnapshot is a copy of the sendCounters.
type sendSnapshot struct {
	sent int64
	lag  [64]int64
}

func (s sendSnapshot) lagHist() []int64 { return append([]int64(nil), s.lag[:]...) }

func (b *bench) sendStats() sendSnapshot {
	var out sendSnapshot
	out.sent = b.send.sent.Load()
	for i := range out.lag {
		out.lag[i] = b.send.lag[i].Load()
	}
	return out
}

func (b *bench) beat(ctx context.Context, a *lagent, due time.Time) {
	ws := a.ws
	if ws == nil {
		return
	}
	a.beats++
	msg := heartbeatMsg(b.f.codec, a.beats)
	// No deadline: a context per write costs a timer, and one derived from
	// a shared parent makes every writer contend for its lock.
	wctx := context.Background()
	sent := time.Now()
	if err := ws.Write(wctx, frameType(b.f.codec), msg); err != nil {
		return
	}
	b.send.sent.Add(1)
	b.send.lag[agentlink.LatencyBucketOf(max(0, sent.Sub(due)))].Add(1)
	if b.f.probeEvery > 0 && a.idx%b.f.probeEvery == 0 && a.probeAt.Load() == 0 {
		a.seq++
		rec := protocol.Record{Seq: a.seq, Metric: &resource.MetricSample{CapturedAt: resource.T(time.Now()), CPUPct: 5, MemPct: 40, DiskUsedPct: 60, TempCPU: 50, LoadAvg1: 0.3}}
		a.probeAt.Store(sent.UnixNano())
		if err := writeMsg(wctx, ws, b.f.codec, protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: []protocol.Record{rec}}}); err != nil {
			a.probeAt.Store(0)
		}
	}
}

func (b *bench) resetProbes() {
	b.pmu.Lock()
	b.probes = b.probes[:0]
	b.pmu.Unlock()
}

type probeResult struct {
	n        int
	p50, p99 time.Duration
}

func (b *bench) probeQuantiles() probeResult {
	b.pmu.Lock()
	ds := append([]time.Duration(nil), b.probes...)
	b.pmu.Unlock()
	if len(ds) == 0 {
		return probeResult{}
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return probeResult{n: len(ds), p50: q(0.5), p99: q(0.99)}
}

// writeMsg sends m in codec.
func writeMsg(ctx context.Context, ws *websocket.Conn, codec protocol.Codec, m protocol.Message) error {
	b, err := codec.Marshal(&m)
	if err != nil {
		return err
	}
	return ws.Write(ctx, frameType(codec), b)
}

func frameType(codec protocol.Codec) websocket.MessageType {
	if codec.Binary() {
		return websocket.MessageBinary
	}
	return websocket.MessageText
}

// readMsg reads one message: JSON in a text frame, CBOR in a binary one.
func readMsg(ctx context.Context, ws *websocket.Conn) (protocol.Message, error) {
	var m protocol.Message
	typ, r, err := ws.Reader(ctx)
	if err != nil {
		return m, err
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return m, err
	}
	codec := protocol.JSON
	if typ == websocket.MessageBinary {
		codec = protocol.CBOR
	}
	return m, codec.Unmarshal(b, &m)
}

// fileSize is the size of the file at path (0 when it is missing).
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
