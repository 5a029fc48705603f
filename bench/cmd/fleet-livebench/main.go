// Command fleet-livebench measures the panel's live updates with 1,000
// open Server-Sent Events streams on one real relay (SQLite, real HTTP):
// relay memory per open stream, relay CPU per pushed change, and the push
// latency from the store to every stream. `make bench-panel-live` runs it.
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
	"github.com/fleet/fleet/bench/livebench"
)

func main() {
	var cfg livebench.Config
	fs := flag.NewFlagSet("fleet-livebench", flag.ExitOnError)
	fs.StringVar(&cfg.Relay, "relay", "bin/fleet-relay", "the fleet-relay binary")
	fs.IntVar(&cfg.Streams, "streams", 1000, "open live streams (panel pages)")
	fs.IntVar(&cfg.Sessions, "sessions", 125, "signed-in sessions holding them (8 streams at most each, as 8 tabs)")
	fs.IntVar(&cfg.Devices, "devices", 300, "devices of the organization")
	fs.IntVar(&cfg.Rounds, "rounds", 30, "rounds of changes, one a second (also the idle window in seconds)")
	fs.IntVar(&cfg.PerRound, "per-round", 10, "devices whose heartbeat each round stores (300 devices at 30 s heartbeats)")
	fs.DurationVar(&cfg.Settle, "settle", 10*time.Second, "wait before each memory reading")
	fs.StringVar(&cfg.Dir, "dir", "", "directory for the database (default: a temporary one)")
	_ = fs.Parse(os.Args[1:])
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, err := livebench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet-livebench:", err)
		benchreport.Record(benchreport.Row{Area: "panel", Figure: "live updates, 1,000 open streams", Error: err.Error()})
		os.Exit(1)
	}
	n := float64(r.Streams)
	perStream := float64(r.RSSAfter-r.RSSBefore) / n / 1024
	changeCPU := r.ChangeCPU - r.IdleCPU // the rounds' CPU beyond the idle streams'
	perPush := float64(changeCPU) / float64(time.Microsecond) / (float64(r.Changes) * n)
	perChange := float64(changeCPU) / float64(time.Microsecond) / float64(r.Changes)
	idlePct := 100 * float64(r.IdleCPU) / float64(r.Window)
	cond := fmt.Sprintf("%d streams of %d sessions on one relay (SQLite, loopback); %d devices, %d changed a second for %s",
		r.Streams, cfg.Sessions, cfg.Devices, cfg.PerRound, r.Window)
	rows := []benchreport.Row{
		{Area: "panel", Figure: "live updates: relay RSS per open stream", Unit: "KiB", Measured: perStream,
			Notes: fmt.Sprintf("%s; RSS %.1f MiB before (a relay started afresh on the signed-in sessions), %.1f MiB with the streams open; per stream %.1f KiB of heap in use, %.1f KiB of goroutine stacks, %.1f goroutines",
				cond, mib(r.RSSBefore), mib(r.RSSAfter), (r.After.HeapInuse-r.Before.HeapInuse)/n/1024, (r.After.StackInuse-r.Before.StackInuse)/n/1024, (r.After.Goroutines-r.Before.Goroutines)/n)},
		{Area: "panel", Figure: "live updates: relay CPU per change pushed to one stream", Unit: "µs", Measured: perPush,
			Notes: fmt.Sprintf("%s; (relay CPU while changing − idle CPU) / (changes × streams); per change to all streams %.0f µs", cond, perChange)},
		{Area: "panel", Figure: "live updates: relay CPU with the streams open and nothing changing", Unit: "% of a core", Measured: idlePct,
			Notes: fmt.Sprintf("%s; one store read a second for the organization and a keep-alive per stream every 15 s", cond)},
		{Area: "panel", Figure: "live updates: change stored to event read, p99", Unit: "ms", Measured: ms(r.P99),
			Notes: fmt.Sprintf("%s; p50 %.0f ms, max %.0f ms; %d of %d (round, stream) pairs arrived; the bound is 2 s", cond, ms(r.P50), ms(r.Max), r.Delivered, r.Expected)},
	}
	for _, row := range rows {
		fmt.Printf("panel  %-58s %10s  %s\n", row.Figure, benchreport.FormatValue(row.Measured, row.Unit), row.Notes)
	}
	if err := benchreport.Record(rows...); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-livebench:", err)
		os.Exit(1)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mib(b int64) float64 { return float64(b) / (1 << 20) }
