// Command fleet-apibench measures the public API (GET /devices and GET
// /alerts) on loopback against a real SQLite file and prints each figure
// beside its target, then GET /devices?limit=25 alternated with a bare
// net/http server answering the same bytes (-alternations; -ceiling-only
// for that alone). `make bench-api` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"time"

	"github.com/fleet/fleet/bench/apibench"
	"github.com/fleet/fleet/bench/benchreport"
)

func main() {
	var cfg apibench.Config
	fs := flag.NewFlagSet("fleet-apibench", flag.ExitOnError)
	fs.IntVar(&cfg.Devices, "devices", 10_000, "devices in the organization")
	fs.IntVar(&cfg.Alerts, "alerts", 500, "ACTIVE alerts in the organization")
	fs.IntVar(&cfg.Clients, "clients", 16, "concurrent clients")
	fs.DurationVar(&cfg.Duration, "duration", 5*time.Second, "measured time per endpoint")
	fs.DurationVar(&cfg.Warmup, "warmup", time.Second, "unmeasured warm-up per endpoint")
	fs.IntVar(&cfg.Writes, "writes", 100, "commits per second during the extra GET /devices run (0: no such run)")
	fs.IntVar(&cfg.Alternations, "alternations", 4, "rounds of GET /devices?limit=25 against a bare net/http server answering the same bytes (0: none)")
	fs.BoolVar(&cfg.CeilingOnly, "ceiling-only", false, "run only the comparison with bare net/http")
	fs.StringVar(&cfg.Dir, "dir", "", "directory for the database file (default: a temporary one)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	_ = fs.Parse(os.Args[1:])
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleet-apibench:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "fleet-apibench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := apibench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet-apibench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
	apibench.Print(os.Stdout, cfg, rep)
	if err := benchreport.Record(rows(cfg, rep)...); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-apibench:", err)
		os.Exit(1)
	}
}
