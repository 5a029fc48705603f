// Command fleet-clusterbench is the relay cluster's benchmark (`make
// bench-cluster`). Everything runs on this machine: PostgreSQL (a
// throwaway cluster, test/rig/pgtest), three fleet-relay processes on it
// behind the shipped HAProxy configuration (test/rig/haproxytest), and the
// load generators: fleet-loadgen agents as a process, apibench's HTTP
// clients and an HTTPS webhook receiver in this one. Data is prepared
// through the store contract (cloud.Store, webhook.Store), never with SQL.
// In order:
//
//  1. GET /devices (25 a page, 10,000 devices) through HAProxy;
//  2. 5,000 agents through HAProxy offering 10,100 heartbeats/s: stored per
//     second (the relays' own counters) and heartbeat-to-stored p99 (the
//     agents' probe: a sample sent right behind a heartbeat, timed to its
//     ack);
//  3. under that load, kill -9 of one relay: the time until every agent is
//     connected again, and every sample stored exactly once;
//  4. 20,000 deliveries put in the shared outbox: delivered per second by
//     the three relays to the HTTPS receiver;
//  5. 2,000 agents through HAProxy, each sending 50 point samples a round
//     (offering 1 % above the 50,000/s target): samples stored per second
//     across the relays (acknowledged after their commit) and the batches'
//     send-to-ack p99;
//  6. one relay on PostgreSQL and one on SQLite, each alone with 10,000
//     devices, under the same load (GET /devices, then the agents): the
//     figures of each and their ratio.
//
// Each figure is printed beside its target (DESIGN.md, performance
// targets) and recorded for the `make bench` report (bench/benchreport);
// each measured window's notes say where the machine's CPU went.
//
//	fleet-clusterbench [--relay bin/fleet-relay] [--loadgen bin/fleet-loadgen] [--agents 5000] [--duration 30s] ...
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

// config is the workload.
type config struct {
	relayBin, loadgenBin, haproxyCfg string
	devices, agents, deliveries      int
	rate                             float64 // heartbeats offered per second
	hbWindow, warmup, apiWindow      time.Duration
	clients                          int
	outboxDevices                    int
	relayProcs                       int // GOMAXPROCS of the cluster's relays; 0: Go's default
	pointAgents, points              int // step 5: agents sending point samples, samples per round
	pointsInterval                   time.Duration
	onlyPoints                       bool // run step 5 alone
}

func main() {
	c := config{}
	fs := flag.NewFlagSet("fleet-clusterbench", flag.ExitOnError)
	fs.StringVar(&c.relayBin, "relay", "bin/fleet-relay", "fleet-relay binary")
	fs.StringVar(&c.loadgenBin, "loadgen", "bin/fleet-loadgen", "fleet-loadgen binary")
	fs.StringVar(&c.haproxyCfg, "haproxy-config", "deploy/haproxy/haproxy.cfg", "the HAProxy configuration the project ships")
	fs.IntVar(&c.devices, "devices", 10000, "devices in the organization")
	fs.IntVar(&c.agents, "agents", 5000, "agents connected (at most --devices; HAProxy holds two descriptors each)")
	fs.Float64Var(&c.rate, "rate", targetHBRate*1.01, "heartbeats per second offered by all agents together")
	fs.DurationVar(&c.hbWindow, "duration", 30*time.Second, "measured window of the heartbeat load")
	fs.DurationVar(&c.warmup, "warmup", 10*time.Second, "heartbeat load before the window")
	fs.DurationVar(&c.apiWindow, "api-duration", 5*time.Second, "measured window of GET /devices")
	fs.IntVar(&c.clients, "clients", 16, "concurrent API clients")
	fs.IntVar(&c.deliveries, "deliveries", 20000, "deliveries put in the shared outbox")
	fs.IntVar(&c.outboxDevices, "outbox-devices", 1000, "devices the deliveries are spread over")
	fs.IntVar(&c.relayProcs, "relay-gomaxprocs", max(1, runtime.NumCPU()/3), "GOMAXPROCS of each of the cluster's three relays, their share of this machine's CPUs (0: Go's default, every CPU); the single-relay runs keep Go's default")
	fs.IntVar(&c.pointAgents, "point-agents", 2000, "agents sending point samples in the points step (at most --devices)")
	fs.IntVar(&c.points, "points", 50, "point samples each of them sends a round (0: no points step)")
	fs.DurationVar(&c.pointsInterval, "points-interval", 1980*time.Millisecond, "their sampling round (the default offers 1 % above the 50,000/s target with 2,000 agents × 50 points)")
	fs.BoolVar(&c.onlyPoints, "only-points", false, "run the points step alone (on the cluster), none of the others")
	fs.Parse(os.Args[1:])
	if c.agents > c.devices || c.outboxDevices > c.devices || c.pointAgents > c.devices || c.agents < 1 || c.pointAgents < 1 || c.pointsInterval <= 0 {
		fmt.Fprintln(os.Stderr, "fleet-clusterbench: --agents, --point-agents and --outbox-devices must be between 1 and --devices, --points-interval positive")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-clusterbench:", err)
		stop()
		os.Exit(1)
	}
}
