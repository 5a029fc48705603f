// Command fleet-benchreport runs `make bench` and writes its report, and
// records the figures of the benchmarks that are not Go programs of their
// own (see package benchreport).
//
//	fleet-benchreport run [--make make] [--md bench/results.md] [--work bin/bench] TARGET...
//	    runs `make TARGET` for each target, one after the other, with
//	    FLEET_BENCH_RESULTS and FLEET_BENCH_TARGET set, carries on past a
//	    failing one, then prints the table and writes it as Markdown; exits
//	    1 when a benchmark failed to run or recorded nothing.
//	fleet-benchreport gotest --set NAME -- go test -bench ... PKG
//	    runs the go test command, passing its output through, and records
//	    the rows of metric set NAME from its benchmark lines.
//	fleet-benchreport agent-size NAME=FILE...
//	    prints each agent binary's size beside its target and records it.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// errUsage is a command line that names no known subcommand.
var errUsage = errors.New("usage: fleet-benchreport run|gotest|agent-size ... (see the package documentation)")

// errFailed is returned when the command ran but what it measured or ran
// failed; the details were already printed.
var errFailed = errors.New("failed")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:])
	switch {
	case err == nil:
	case errors.Is(err, errFailed):
		os.Exit(1)
	default:
		fmt.Fprintln(os.Stderr, "fleet-benchreport:", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errUsage
	}
	switch args[0] {
	case "run":
		return runAll(ctx, args[1:])
	case "gotest":
		return goTest(ctx, args[1:])
	case "agent-size":
		return agentSize(args[1:])
	}
	return errUsage
}
