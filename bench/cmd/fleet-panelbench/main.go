// Command fleet-panelbench measures the panel's fleet page (10,000 devices)
// and device page (7 days of metrics) rendered by the real relay, and
// prints each p99 beside its target. `make bench-panel` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/fleet/fleet/bench/benchreport"
	"github.com/fleet/fleet/bench/panelbench"
)

func main() {
	var cfg panelbench.Config
	fs := flag.NewFlagSet("fleet-panelbench", flag.ExitOnError)
	fs.StringVar(&cfg.Relay, "relay", "bin/fleet-relay", "the fleet-relay binary")
	fs.IntVar(&cfg.Devices, "devices", 10_000, "devices in the organization")
	fs.IntVar(&cfg.Samples, "samples", 2016, "metric samples of the charted device (5 minutes apart; 2,016 is 7 days)")
	fs.IntVar(&cfg.Requests, "requests", 300, "measured loads of each page")
	fs.IntVar(&cfg.Warmup, "warmup", 20, "unmeasured loads of each page first")
	fs.StringVar(&cfg.Dir, "dir", "", "directory for the database (default: a temporary one)")
	_ = fs.Parse(os.Args[1:])
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := panelbench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet-panelbench:", err)
		benchreport.Record(benchreport.Row{Area: "panel", Figure: "panel pages", Error: err.Error()})
		os.Exit(1)
	}
	target := benchreport.Target{Op: benchreport.Below, Value: 50}
	var rows []benchreport.Row
	for _, r := range res {
		notes := fmt.Sprintf("%d sequential loads on loopback after %d warm-up, signed in; p50 %.1f ms; page %s KiB", r.Requests, cfg.Warmup, ms(r.P50), benchreport.FormatValue(float64(r.Bytes)/1024, ""))
		if r.CPU > 0 {
			notes += fmt.Sprintf("; relay CPU %.1f ms a load", ms(r.CPU))
		}
		fmt.Printf("panel  %-62s p99 %7.2f ms  (target < 50 ms)  %s\n", r.Name, ms(r.P99), notes)
		rows = append(rows, benchreport.Row{Area: "panel", Figure: r.Name + ", p99 render", Unit: "ms", Measured: ms(r.P99), Target: &target, Notes: notes})
	}
	if err := benchreport.Record(rows...); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-panelbench:", err)
		os.Exit(1)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
