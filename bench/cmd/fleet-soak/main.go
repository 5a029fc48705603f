// Command fleet-soak runs the soak under faults (bench/soak) and prints
// its report: `make soak` (2,000 agents, SOAK_DURATION), and the 10-minute
// row of `make bench`. It exits 1 when anything was lost (or, with
// --max-rss-growth, the relay's RSS grew once steady), 2 when the soak
// could not run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fleet/fleet/bench/benchreport"
	"github.com/fleet/fleet/bench/soak"
)

func main() {
	relay := flag.String("relay", "bin/fleet-relay", "fleet-relay binary")
	duration := flag.Duration("duration", 10*time.Minute, "length of the faulty phase")
	agents := flag.Int("agents", 2000, "simulated agents")
	short := flag.Bool("short", false, "the short variant (100 agents, about 75 s)")
	maxGrowth := flag.Float64("max-rss-growth", 0.05, "fail when the relay's RSS grows more than this fraction once steady (0: report only)")
	flag.Parse()

	cfg := soak.Long(*relay, *duration)
	cfg.Agents = *agents
	if *short {
		cfg = soak.Short(*relay)
	}
	cfg.MaxRSSGrowth = *maxGrowth
	cfg.Log = func(f string, a ...any) { fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+f+"\n", a...) }
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := soak.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet-soak:", err)
		os.Exit(2)
	}
	rep.Print(os.Stdout)
	if benchreport.Enabled() {
		if err := benchreport.Record(rep.Rows()...); err != nil {
			fmt.Fprintln(os.Stderr, "fleet-soak:", err)
		}
	}
	if why := rep.Failed(cfg.MaxRSSGrowth); len(why) > 0 {
		fmt.Printf("SOAK FAILED: %v\n", why)
		os.Exit(1)
	}
	fmt.Println("soak passed: nothing lost")
}
