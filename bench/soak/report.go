package soak

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/fleet/fleet/bench/benchreport"
)

// Print writes the report as a few readable lines.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "soak: %d agents, %s of faults, then a drain\n", r.Agents, r.Duration)
	fmt.Fprintf(w, "  samples: offered %d, stored %d, lost %d, stored twice %d\n", r.SamplesOffered, r.SamplesStored, r.SamplesLost, r.SamplesDuplicated)
	var states []string
	for s, n := range r.DeliveriesByState {
		states = append(states, fmt.Sprintf("%s %d", s, n))
	}
	sort.Strings(states)
	fmt.Fprintf(w, "  webhook deliveries: recorded %d (%s), received %d, lost %d\n", r.DeliveriesExpected, strings.Join(states, ", "), r.DeliveriesReceived, r.DeliveriesLost)
	fmt.Fprintf(w, "  relay: %d kill -9, %d restarts, %d unexpected exits\n", r.Kills, r.Restarts, r.UnexpectedExit)
	fmt.Fprintf(w, "  faults: %s\n", strings.Join(r.Faults, "; "))
	if r.DiskFull.Ran {
		fmt.Fprintf(w, "  disk full (%s): API writes answered 503 service_unavailable %d times, otherwise %v; writes accepted again %s after space returned\n",
			r.DiskFull.How, r.DiskFull.API503, r.DiskFull.APIOther, r.DiskFull.ResumedAfter.Round(time.Millisecond))
	} else {
		fmt.Fprintf(w, "  disk full: %s\n", r.DiskFull.How)
	}
	fmt.Fprintf(w, "  relay RSS and goroutines (every sample: at, process, RSS MiB, goroutines):\n   ")
	for i, s := range r.Samples {
		if i > 0 && i%6 == 0 {
			fmt.Fprint(w, "\n   ")
		}
		fmt.Fprintf(w, " %4ds #%d %5.1f %5d |", int(s.At.Seconds()), s.Generation, float64(s.RSS)/(1<<20), s.Goroutines)
	}
	fmt.Fprintf(w, "\n  steady window from %s: RSS growth %.1f %%, goroutine growth %.1f %%\n", r.SteadyFrom.Round(time.Second), 100*r.RSSGrowth, 100*r.GoroutineGrowth)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

// Rows are the soak's rows of the `make bench` report.
func (r *Report) Rows() []benchreport.Row {
	figure := fmt.Sprintf("soak, %d agents, %s of faults", r.Agents, r.Duration)
	notes := fmt.Sprintf("%d samples offered, %d stored; %d deliveries recorded, %d received; %d kill -9; disk full: %d 503s",
		r.SamplesOffered, r.SamplesStored, r.DeliveriesExpected, r.DeliveriesReceived, r.Kills, r.DiskFull.API503)
	zero := &benchreport.Target{Op: benchreport.AtMost, Value: 0}
	return []benchreport.Row{
		{Area: "soak", Figure: figure + ": samples lost", Measured: float64(r.SamplesLost), Unit: "samples", Target: zero, Notes: notes},
		{Area: "soak", Figure: figure + ": samples stored twice", Measured: float64(r.SamplesDuplicated), Unit: "samples", Target: zero},
		{Area: "soak", Figure: figure + ": webhook deliveries lost", Measured: float64(r.DeliveriesLost), Unit: "deliveries", Target: zero},
		{Area: "soak", Figure: figure + ": relay RSS growth after warm-up", Measured: 100 * r.RSSGrowth, Unit: "%",
			Target: &benchreport.Target{Op: benchreport.Below, Value: 5}, Notes: fmt.Sprintf("goroutines %+.1f %%", 100*r.GoroutineGrowth)},
	}
}
