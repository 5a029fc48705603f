package main

import (
	"fmt"
	"runtime"
	"time"

	"github.com/fleet/fleet/bench/apibench"
	"github.com/fleet/fleet/bench/benchreport"
)

// rows are the run's figures for the `make bench` report: throughput and
// p99 of each endpoint beside DESIGN.md's targets (15,000 req/s, p99 under
// 5 ms), the run with background commits and the new key's first request
// for information. Failed requests make the row a failure, not a figure.
func rows(cfg apibench.Config, rep apibench.Report) []benchreport.Row {
	var out []benchreport.Row
	for _, r := range rep.Results {
		notes := fmt.Sprintf("%s devices, %d clients on loopback, %v measured; p50 %.2f ms", benchreport.FormatValue(float64(cfg.Devices), ""), cfg.Clients, cfg.Duration, ms(r.P50))
		if r.CPU > 0 {
			notes += fmt.Sprintf("; CPU %.0f µs per request (server and load generator) on %d CPUs", float64(r.CPU)/float64(time.Microsecond), runtime.NumCPU())
		}
		rps := benchreport.Target{Op: benchreport.AtLeast, Value: 15000}
		p99 := benchreport.Target{Op: benchreport.Below, Value: 5}
		through := benchreport.Row{Area: "API", Figure: r.Name + ", throughput", Unit: "req/s", Measured: r.RPS(), Target: &rps, Notes: notes}
		latency := benchreport.Row{Area: "API", Figure: r.Name + ", p99 latency", Unit: "ms", Measured: ms(r.P99), Target: &p99, Notes: notes}
		if r.Commits > 0 {
			// Not a target: the cached figures above are; this one shows
			// the store path that each commit forces.
			through.Target, latency.Target = nil, nil
			through.Notes = fmt.Sprintf("for information: %d commits during the run, each emptying the page and key caches; %s", r.Commits, notes)
			latency.Notes = through.Notes
		}
		if r.Errors > 0 {
			through.Error = fmt.Sprintf("%d of %d requests failed", r.Errors, r.Requests)
			latency.Error = through.Error
		}
		out = append(out, through, latency)
	}
	out = append(out,
		benchreport.Row{Area: "API", Figure: "a new key's first request (bcrypt, once per key)", Unit: "ms", Measured: ms(rep.FirstRequest),
			Notes: "for information"},
		benchreport.Row{Area: "API", Figure: "the same key's next requests (median, no bcrypt)", Unit: "ms", Measured: ms(rep.Steady),
			Notes: "for information: DESIGN.md wants no bcrypt on the steady-state path"})
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
