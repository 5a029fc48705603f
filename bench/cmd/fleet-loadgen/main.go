// Command fleet-loadgen is the agent-link benchmark: it registers many
// devices in a temporary SQLite store through the store contract, starts a relay process on it
// (the agent endpoint and its store, as fleet-relay serve wires them), and
// connects thousands of simulated agents speaking shared/protocol over
// loopback from several 127.x source addresses. It prints, each beside its
// target: the relay's RSS per connection, heartbeats stored per second with
// the heartbeat-to-stored p99, and the drain time of a reconnect storm in
// which every agent flushes an hour of spooled metrics.
//
//	fleet-loadgen [bench] [--agents 20000] [--duration 20s] ...
//	fleet-loadgen relay --db PATH --listen ADDR   (the relay process the bench starts)
//	fleet-loadgen guest --binary STATIC [--agents 20000]   (the capacity figures in a qemu guest, where RLIMIT_NOFILE can be raised)
//	fleet-loadgen agents --url WS --tokens FILE [--rate 10100]   (agents against relays run by someone else, driven through stdin: bench/cluster)
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	args := os.Args[1:]
	cmd := "bench"
	if len(args) > 0 && (args[0] == "bench" || args[0] == "relay" || args[0] == "guest" || args[0] == "agents") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "relay":
		err = runRelay(ctx, args)
	case "guest":
		err = runGuest(ctx, args)
	case "agents":
		err = runAgents(ctx, args)
	default:
		err = runBench(ctx, args)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet-loadgen:", err)
		os.Exit(1)
	}
}
