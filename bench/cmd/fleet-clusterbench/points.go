package main

import (
	"fmt"
	"time"

	"github.com/fleet/fleet/bench/benchreport"
	"github.com/fleet/fleet/test/rig/haproxytest"
)

// targetPointRate is the point samples stored per second across the
// cluster's relays (DESIGN.md, performance targets: points).
const targetPointRate = 50000

// pointHeartbeat is the heartbeat period of the points step's agents
// (fleet-agent's default): their load is the samples.
const pointHeartbeat = 30 * time.Second

// points is step 5: pointAgents agents through HAProxy, each sending a
// batch of b.points point samples every b.pointsInterval (and a heartbeat
// every 30 s); after a warm-up, the samples acknowledged per second over
// one window (the relays ack a batch once committed), then every batch
// acknowledged before the agents stop; it records the rows. sw is where
// the swarm is kept for the caller's CPU readings and cleanup. With
// --points 0 it does nothing.
func (b *bench) pointsStep(hp *haproxytest.Proxy, tokens []string, sw **swarm, roots func() map[int]string, cond string) error {
	if b.points == 0 {
		return nil
	}
	rows, err := b.pointsWindow(hp, tokens, sw, roots, cond)
	if err != nil {
		return err
	}
	return record(rows...)
}

// pointsWindow measures step 5's rows.
func (b *bench) pointsWindow(hp *haproxytest.Proxy, tokens []string, sw **swarm, roots func() map[int]string, cond string) ([]benchreport.Row, error) {
	n := min(b.pointAgents, len(tokens))
	offered := float64(n*b.points) / b.pointsInterval.Seconds()
	fmt.Printf("%d agents through HAProxy, each %d point samples every %v (%.0f samples/s offered) ...\n", n, b.points, b.pointsInterval, offered)
	file, err := writeTokens(b.dir, "tokens-points", tokens[:n])
	if err != nil {
		return nil, err
	}
	s, err := startSwarm(b.loadgenBin, wsURL(hp.Addr), file, float64(n)/pointHeartbeat.Seconds(),
		"--points", fmt.Sprint(b.points), "--points-interval", b.pointsInterval.String())
	if err != nil {
		return nil, err
	}
	*sw = s
	time.Sleep(b.warmup)
	caughtUp, err := waitPoints(s, offered/10, time.Minute)
	if err != nil {
		return nil, err
	}
	rep, cpu, err := b.measure(s, roots)
	if err != nil {
		return nil, err
	}
	var fin swarmFinal
	if err := s.Do("stop", &fin); err != nil {
		return nil, err
	}
	*sw = nil
	rate := float64(rep.PointsAcked) / rep.Seconds
	rows := []benchreport.Row{
		{Area: "points", Figure: "point samples stored per second across 3 relays on PostgreSQL (agents through HAProxy)", Unit: "samples/s", Measured: rate,
			Target: &benchreport.Target{Op: benchreport.AtLeast, Value: targetPointRate},
			Notes: fmt.Sprintf("samples acknowledged by the relays (a batch is acked once committed) over %v after %v of warm-up (%s); offered %s by %s agents × %d points every %v (heartbeats every %v), sent %s; %s; %s",
				b.hbWindow, b.warmup, caughtUp, num(offered, "/s"), num(float64(n), ""), b.points, b.pointsInterval, pointHeartbeat,
				num(float64(rep.PointsSent)/rep.Seconds, "/s"), cond, cpu)},
		{Area: "points", Figure: "point batch send-to-ack p99 across 3 relays on PostgreSQL", Unit: "ms", Measured: rep.PointP99Ms,
			Notes: fmt.Sprintf("for information: p50 %s; a batch of %d samples from its send to its ack, through HAProxy; sender lag p99 %s",
				num(rep.PointP50Ms, "ms"), b.points, num(rep.PointLagP99Ms, "ms"))},
	}
	switch {
	case rep.PointsAcked == 0:
		rows[0].Error = "no point sample acknowledged in the window"
	case fin.Unacked > 0:
		rows[0].Error = fmt.Sprintf("%d records never acknowledged once the agents stopped", fin.Unacked)
	}
	return rows, nil
}

// waitPoints waits (up to d) until at most slack of the samples the swarm
// sent are unacknowledged, and says how the wait ended.
func waitPoints(s *swarm, slack float64, d time.Duration) (string, error) {
	t0 := time.Now()
	for {
		var st swarmStatus
		if err := s.Do("status", &st); err != nil {
			return "", err
		}
		backlog := st.PointsSent - st.PointsAcked
		if float64(backlog) <= slack {
			return fmt.Sprintf("the relays caught up with the warm-up's samples %s after it", time.Since(t0).Round(100*time.Millisecond)), nil
		}
		if time.Since(t0) > d {
			return fmt.Sprintf("the relays were still %s samples behind %v after the warm-up: measured anyway (the load is above what they store)", num(float64(backlog), ""), d), nil
		}
		time.Sleep(250 * time.Millisecond)
	}
}
