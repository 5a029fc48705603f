package main

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleet/fleet/bench/benchreport"
	"github.com/fleet/fleet/bench/benchstore"
	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// Point samples (DESIGN.md "Points", performance targets): each simulated
// agent sends one Records message a sampling round holding one record with
// a PointBatch of --points samples, as fleet-agent's spool sends a round of
// readings; the relay acknowledges it once committed. The figure is the
// samples acknowledged per second.

// targetPointRate is the point samples stored per second on one relay on
// SQLite (2,000 agents × 50 points every second).
const targetPointRate = 100000

// pointChannels are the channels the simulated points are spread over,
// serialcfg.MaxPoints on each: --points is at most their total.
var pointChannels = []string{"rs485-1", "rs485-2", "canfd-1"}

// maxLoadPoints is the most points one simulated agent can have.
var maxLoadPoints = min(len(pointChannels)*serialcfg.MaxPoints, protocol.MaxPointSamples)

// pointIDs returns the ids of n simulated points: rs485-1.p00,
// rs485-1.p01, ..., then the next channel's.
func pointIDs(n int) []string {
	ids := make([]string, n)
	for j := range ids {
		ch := pointChannels[j/serialcfg.MaxPoints]
		ids[j] = serialcfg.PointID(ch, fmt.Sprintf("p%02d", j%serialcfg.MaxPoints))
	}
	return ids
}

// pointValue is point j's reading in round k of agent idx: a slowly moving
// value (a sine of a period of about ten minutes, two decimals, as a
// sensor's), around a level of its own.
func pointValue(idx, j, k int) float64 {
	v := float64(10*(j+1)) + 2*math.Sin(float64(k)/100+float64(idx+j))
	return math.Round(v*100) / 100
}

// crossHigh is the value of a crossing point (--cross-every) while it is
// high: above every level pointValue makes, so a rule "> 500" on it
// (bench/cmd/fleet-alertbench) breaches exactly while it is high.
const crossHigh = 1000

// crossingValue is the first point's reading in round k of agent idx with
// --cross-every n: high for n rounds, then at its own level for n, each
// agent at a phase of its own ((k + idx) / n), so that over 2n rounds
// every agent crosses up once and down once and the crossings of the
// agents are spread evenly over the rounds, not all in one.
func crossingValue(idx, k, n int) float64 {
	if (k+idx)/n%2 == 1 {
		return crossHigh
	}
	return pointValue(idx, 0, k)
}

// pointBatch returns the record of agent idx's sampling round k taken at,
// numbered seq.
func pointBatch(ids []string, idx, k int, seq uint64, at time.Time) protocol.Record {
	samples := make([]protocol.PointSample, len(ids))
	t := resource.T(at)
	for j, id := range ids {
		samples[j] = protocol.PointSample{Point: id, At: t, Value: pointValue(idx, j, k)}
	}
	return protocol.Record{Seq: seq, Points: &protocol.PointBatch{Samples: samples}}
}

// sentBatch is a point batch waiting for its ack.
type sentBatch struct {
	seq     uint64
	samples int
	at      time.Time
}

// pointAgent is an agent's point state: the batches in flight, in seq order.
type pointAgent struct {
	mu      sync.Mutex
	pending []sentBatch
	stored  int // batches acknowledged
	rounds  int
	lastAt  time.Time
	// cross, when above 0, makes the first point cross between its level
	// and crossHigh every cross rounds (crossingValue).
	cross int
}

// pointCounters count the samples sent and acknowledged, and the ack
// latency of each batch (agentlink's latency buckets).
type pointCounters struct {
	sent, acked, batches atomic.Int64
	lat                  [64]atomic.Int64
	lag                  [64]atomic.Int64 // sender behind its schedule
}

// pointSnapshot is a copy of the pointCounters.
type pointSnapshot struct {
	sent, acked, batches int64
	lat, lag             []int64
}

func (c *pointCounters) snapshot() pointSnapshot {
	s := pointSnapshot{sent: c.sent.Load(), acked: c.acked.Load(), batches: c.batches.Load(), lat: make([]int64, len(c.lat)), lag: make([]int64, len(c.lag))}
	for i := range c.lat {
		s.lat[i], s.lag[i] = c.lat[i].Load(), c.lag[i].Load()
	}
	return s
}

// since is the counts between an earlier snapshot and s.
func (s pointSnapshot) since(before pointSnapshot) pointSnapshot {
	d := pointSnapshot{sent: s.sent - before.sent, acked: s.acked - before.acked, batches: s.batches - before.batches,
		lat: make([]int64, len(s.lat)), lag: make([]int64, len(s.lag))}
	for i := range s.lat {
		d.lat[i], d.lag[i] = s.lat[i]-before.lat[i], s.lag[i]-before.lag[i]
	}
	return d
}

// sendPoints sends agent a's next sampling round.
func (b *bench) sendPoints(a *lagent, due time.Time) {
	ws := a.ws
	if ws == nil {
		return
	}
	a.seq++
	rec := a.points.next(b.pointIDs, a.idx, a.seq, due, time.Now(), &b.points)
	writeMsg(context.Background(), ws, b.f.codec, protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: []protocol.Record{rec}}})
}

// pointsAcked counts the batches of a up to seq as stored.
func (b *bench) pointsAcked(a *lagent, seq uint64) { a.points.acked(seq, &b.points) }

// acked counts the batches up to seq as stored in c.
func (p *pointAgent) acked(seq uint64, c *pointCounters) {
	now := time.Now()
	p.mu.Lock()
	i := 0
	for ; i < len(p.pending) && p.pending[i].seq <= seq; i++ {
		sb := p.pending[i]
		c.acked.Add(int64(sb.samples))
		c.batches.Add(1)
		c.lat[agentlink.LatencyBucketOf(now.Sub(sb.at))].Add(1)
	}
	p.pending = p.pending[i:]
	p.stored += i
	p.mu.Unlock()
}

// next returns the record of the agent's next sampling round, numbered
// seq, and counts it as sent at sent (due: when it was scheduled) in c.
func (p *pointAgent) next(ids []string, idx int, seq uint64, due, sent time.Time, c *pointCounters) protocol.Record {
	// The agent's time of the read, a millisecond apart at least from the
	// round before (each point keeps one sample per time).
	at := sent.Truncate(time.Millisecond)
	if !at.After(p.lastAt) {
		at = p.lastAt.Add(time.Millisecond)
	}
	p.lastAt = at
	rec := pointBatch(ids, idx, p.rounds, seq, at)
	if p.cross > 0 {
		rec.Points.Samples[0].Value = crossingValue(idx, p.rounds, p.cross)
	}
	p.rounds++
	p.mu.Lock()
	p.pending = append(p.pending, sentBatch{seq: seq, samples: len(ids), at: sent})
	p.mu.Unlock()
	c.sent.Add(int64(len(ids)))
	c.lag[agentlink.LatencyBucketOf(max(0, sent.Sub(due)))].Add(1)
	return rec
}

// runPoints is the point samples benchmark, once every agent is connected:
// heartbeats at the agents' period and each agent's sampling round every
// --points-interval, both spread evenly over their period; after a warm-up,
// the samples acknowledged per second over the window and each batch's
// send-to-ack latency; then every batch sent acknowledged (the drain).
func (b *bench) runPoints(ctx context.Context, dbPath string, ten benchstore.Tenant) error {
	f, relay := b.f, b.relay
	n := len(b.agents)
	b.pointIDs = pointIDs(f.points)
	offered := float64(n*f.points) / f.pointsInterval.Seconds()
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup
	b.startHeartbeats(loadCtx, &wg)
	spreadBeats(loadCtx, &wg, n, f.pointsInterval, func(i int, due time.Time) { b.sendPoints(b.agents[i], due) })
	time.Sleep(max(2*time.Second, 2*f.pointsInterval+time.Second))
	caughtUp, err := b.pointsCaughtUp(ctx, offered/10, 30*time.Second, 0)
	if err != nil {
		return err
	}
	fmt.Println("warm-up:", caughtUp)
	s0, err := relay.stats()
	if err != nil {
		return err
	}
	load0 := loadAvg()
	stopProf, err := startProfiles(f.profile, relay, f.duration)
	if err != nil {
		return err
	}
	p0 := b.points.snapshot()
	cpu0, self0 := relay.cpuTime(), selfCPUTime()
	mem0, _ := relay.memStats()
	w0 := time.Now()
	time.Sleep(f.duration)
	p1 := b.points.snapshot()
	window := time.Since(w0)
	relayCPU, selfCPU := relay.cpuTime()-cpu0, selfCPUTime()-self0
	if err := stopProf(); err != nil {
		fmt.Println("profile:", err)
	}
	mem1, _ := relay.memStats()
	s1, err := relay.stats()
	if err != nil {
		return err
	}
	load1 := loadAvg()
	stopLoad()
	wg.Wait()
	// Every batch sent acknowledged: as long as the relay makes progress
	// (a relay slower than the load works off its backlog).
	drained, err := b.pointsCaughtUp(ctx, 0, 5*time.Minute, 30*time.Second)
	if err != nil {
		return err
	}
	final := b.points.snapshot()
	b.closeAll()
	if err := relay.stop(); err != nil {
		return fmt.Errorf("stop relay: %w", err)
	}

	checked, checkErr := b.checkPointsStored(ctx, dbPath, ten, 100)
	w := p1.since(p0)
	fig := pointFigures{agents: n, points: f.points, every: f.pointsInterval, heartbeatEvery: f.interval, codec: f.codec, window: window,
		offered: offered, sentRate: float64(w.sent) / window.Seconds(), rate: float64(w.acked) / window.Seconds(),
		p50: agentlink.Quantile(w.lat, 0.50), p99: agentlink.Quantile(w.lat, 0.99), lagP99: agentlink.Quantile(w.lag, 0.99),
		relayCPU: perSample(relayCPU, w.acked), genCPU: perSample(selfCPU, w.acked),
		alloc: float64(mem1.totalAlloc-mem0.totalAlloc) / float64(max(w.acked, 1)),
		busy:  (s1.Store.Busy - s0.Store.Busy).Seconds() / window.Seconds(),
		perTx: float64(s1.Link.Records-s0.Link.Records) / float64(max(s1.Store.Transactions-s0.Store.Transactions, 1)),
		sent:  final.sent, acked: final.acked, drained: drained, checked: checked, checkErr: checkErr}
	fmt.Println()
	fmt.Printf("point samples benchmark, %d agents × %d points every %v, speaking %s (figure | target)\n", n, f.points, f.pointsInterval, f.codec)
	fmt.Printf("  point samples stored per second %8.0f /s | >= %d /s%s  (offered %.0f /s, sent %.0f /s; acknowledged by the relay after its commit)\n",
		fig.rate, targetPointRate, okMark(fig.rate >= targetPointRate), offered, fig.sentRate)
	fmt.Printf("  batch send-to-ack p99           %8.1f ms |            (p50 %.1f ms, %d batches of %d samples)\n", ms(fig.p99), ms(fig.p50), w.batches, f.points)
	fmt.Printf("    sender lag p99                %8.1f ms |            (send time behind each agent's even schedule)\n", ms(fig.lagP99))
	fmt.Printf("  relay CPU per sample            %8.2f µs |            (load generator %.2f µs)\n", us(fig.relayCPU), us(fig.genCPU))
	fmt.Printf("  relay allocation per sample     %8.0f B  |            (%d GC cycles in the window)\n", fig.alloc, mem1.numGC-mem0.numGC)
	fmt.Printf("  relay writer busy               %8.0f %%  |            (%.0f records per transaction)\n", 100*fig.busy, fig.perTx)
	fmt.Printf("  box load average                %s at the window's start, %s at its end\n", load0, load1)
	fmt.Printf("  drain                           %s: %d samples sent, %d acknowledged\n", drained, final.sent, final.acked)
	fmt.Printf("  read back through the store     %d samples of every 100th agent, each once%s\n", checked, errNote(checkErr))
	if err := recordPoints(fig); err != nil {
		return err
	}
	// A relay slower than the load still holds a backlog when the drain
	// gives up: a MISS, not a failure, as long as what it stored is there
	// once (checkErr).
	return checkErr
}

// checkPointsStored reads back, through the public API's service
// (cloud.PointService), every point's samples of every every-th agent
// (the relay stopped): each must hold one sample per batch the relay
// acknowledged, and none twice; batches sent but not acknowledged (the
// relay stopped before it acked them) may be there too. It returns the
// samples read.
func (b *bench) checkPointsStored(ctx context.Context, dbPath string, ten benchstore.Tenant, every int) (int64, error) {
	st, err := sqlite.Open(ctx, dbPath)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	var n int64
	for i := 0; i < len(b.agents); i += every {
		a := b.agents[i]
		a.points.mu.Lock()
		acked, sent := a.points.stored, a.points.stored+len(a.points.pending)
		a.points.mu.Unlock()
		for _, id := range b.pointIDs {
			s, err := st.Points().PointSamples(ctx, ten.Org, ten.Devices[i], id,
				cloud.PointQuery{From: spoolStart, To: time.Now().Add(time.Hour), Limit: 10000})
			if err != nil {
				return n, fmt.Errorf("samples of %s of device %s: %w", id, ten.Devices[i], err)
			}
			n += int64(len(s.Raw))
			if len(s.Raw) < acked || len(s.Raw) > sent {
				return n, fmt.Errorf("device %s holds %d samples of %s, want %d (one per batch acknowledged) to %d (sent)", ten.Devices[i], len(s.Raw), id, acked, sent)
			}
			for k := 1; k < len(s.Raw); k++ {
				if !s.Raw[k].At.After(s.Raw[k-1].At.Time) {
					return n, fmt.Errorf("device %s holds two samples of %s at %s", ten.Devices[i], id, s.Raw[k].At.Time)
				}
			}
		}
	}
	return n, nil
}

// errNote is ": err" or nothing.
func errNote(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

// pointsCaughtUp waits until at most slack samples sent are not yet
// acknowledged, up to d, or while stall > 0 until no sample was
// acknowledged for stall, and says how the wait ended.
func (b *bench) pointsCaughtUp(ctx context.Context, slack float64, d, stall time.Duration) (string, error) {
	t0 := time.Now()
	lastAcked, progress := b.points.acked.Load(), t0
	for {
		acked := b.points.acked.Load()
		backlog := b.points.sent.Load() - acked
		if float64(backlog) <= slack {
			return fmt.Sprintf("the relay caught up with the samples sent in %s (backlog %d)", time.Since(t0).Round(100*time.Millisecond), backlog), nil
		}
		if acked != lastAcked {
			lastAcked, progress = acked, time.Now()
		}
		if time.Since(t0) > d || (stall > 0 && time.Since(progress) > stall) {
			return fmt.Sprintf("the relay was still %d samples behind after %v", backlog, time.Since(t0).Round(time.Second)), nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func perSample(cpu time.Duration, samples int64) time.Duration {
	return cpu / time.Duration(max(samples, 1))
}

// pointFigures are what runPoints measured.
type pointFigures struct {
	agents, points        int
	every, heartbeatEvery time.Duration
	codec                 protocol.Codec
	window                time.Duration
	offered, sentRate     float64
	rate                  float64 // samples acknowledged per second
	p50, p99, lagP99      time.Duration
	relayCPU, genCPU      time.Duration // per sample
	alloc                 float64       // relay bytes allocated per sample
	busy, perTx           float64
	sent, acked           int64 // over the whole run
	drained               string
	checked               int64 // samples read back through the store
	checkErr              error
}

// Figure names of the point rows (the cluster's are fleet-clusterbench's).
const figPointRate = "point samples stored per second, one relay on SQLite"

// recordPoints writes the point figures as report rows.
func recordPoints(f pointFigures) error {
	suffix := ""
	if f.codec != protocol.CBOR {
		suffix = fmt.Sprintf(" (%s agents)", f.codec)
	}
	load := fmt.Sprintf("%s agents × %d points every %v (%s), heartbeats every %v", num(float64(f.agents), ""), f.points, f.every, f.codec, f.heartbeatEvery)
	rows := []benchreport.Row{
		{Area: "points", Figure: figPointRate + suffix, Unit: "samples/s", Measured: f.rate,
			Target: &benchreport.Target{Op: benchreport.AtLeast, Value: targetPointRate},
			Notes: fmt.Sprintf("samples acknowledged by the relay (it acks a batch after its commit) over %v (every 100th agent's, %s samples, read back through the store afterwards: each once); offered %s by %s, sent %s; relay writer busy %s, %s records a transaction; relay and load generator share the machine",
				f.window.Round(time.Second), num(float64(f.checked), ""), num(f.offered, "/s"), load, num(f.sentRate, "/s"), num(100*f.busy, "%"), num(f.perTx, ""))},
		{Area: "points", Figure: "point batch send-to-ack p99, one relay on SQLite" + suffix, Unit: "ms", Measured: ms(f.p99),
			Notes: fmt.Sprintf("for information: p50 %s; a batch of %d samples from its send to its ack; sender lag p99 %s", num(ms(f.p50), "ms"), f.points, num(ms(f.lagP99), "ms"))},
		{Area: "points", Figure: "relay CPU per point sample stored" + suffix, Unit: "µs", Measured: us(f.relayCPU),
			Notes: fmt.Sprintf("for information: relay process CPU over the window / samples acknowledged in it; %s allocated per sample; load generator %s", num(f.alloc, "B"), num(us(f.genCPU), "µs"))},
	}
	switch {
	case f.acked == 0:
		rows[0].Error = "no point sample acknowledged"
	case f.checkErr != nil:
		rows[0].Error = "read back: " + f.checkErr.Error()
	case f.acked != f.sent:
		rows[0].Notes += fmt.Sprintf("; once the load stopped %s: %s samples sent, %s acknowledged", f.drained, num(float64(f.sent), ""), num(float64(f.acked), ""))
	}
	return benchreport.Record(rows...)
}
