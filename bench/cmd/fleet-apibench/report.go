package main

import (
	"fmt"
	"runtime"
	"strings"
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
	out = append(out, ceilingRows(cfg, rep)...)
	if cfg.CeilingOnly {
		return out
	}
	out = append(out,
		benchreport.Row{Area: "API", Figure: "a new key's first request (bcrypt, once per key)", Unit: "ms", Measured: ms(rep.FirstRequest),
			Notes: "for information"},
		benchreport.Row{Area: "API", Figure: "the same key's next requests (median, no bcrypt)", Unit: "ms", Measured: ms(rep.Steady),
			Notes: "for information: DESIGN.md wants no bcrypt on the steady-state path"})
	return out
}

// ceilingRows are the comparison with bare net/http: the median ratio
// against issue 31's target, each side's throughput and CPU per request in
// the notes.
func ceilingRows(cfg apibench.Config, rep apibench.Report) []benchreport.Row {
	c := rep.Ceiling
	if len(c.Alternations) == 0 {
		return nil
	}
	var ratios, sides []string
	for _, a := range c.Alternations {
		ratios = append(ratios, fmt.Sprintf("%.2f", a.Ratio()))
		sides = append(sides, fmt.Sprintf("%s / %s req/s, CPU %.0f / %.0f µs", benchreport.FormatValue(a.Relay.RPS(), ""), benchreport.FormatValue(a.Bare.RPS(), ""),
			float64(a.Relay.CPU)/float64(time.Microsecond), float64(a.Bare.CPU)/float64(time.Microsecond)))
	}
	notes := fmt.Sprintf("%d alternations of %v each side (after %v of warm-up), %d clients on loopback, the same keep-alive client on both; the bare server answers the %d bytes the relay answered (same header names and values); relay / bare per alternation: %s; ratios %s; CPU per request (process, load generator included), bare / relay: median %.2f; load average %s on %d CPUs shared with other work",
		len(c.Alternations), cfg.Duration, cfg.Warmup, cfg.Clients, c.Bytes, strings.Join(sides, "; "), strings.Join(ratios, ", "), c.MedianCPURatio(), rep.LoadAvg, runtime.NumCPU())
	row := benchreport.Row{Area: "API", Figure: "GET /devices (limit 25) against bare net/http answering the same bytes, throughput ratio (median)", Unit: "×",
		Measured: c.MedianRatio(), Target: &benchreport.Target{Op: benchreport.AtLeast, Value: apibench.CeilingTarget}, Notes: notes}
	for _, a := range c.Alternations {
		if a.Relay.Errors+a.Bare.Errors > 0 {
			row.Error = fmt.Sprintf("%d relay and %d bare requests failed", a.Relay.Errors, a.Bare.Errors)
		}
	}
	return []benchreport.Row{row}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
