package apibench_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/bench/apibench"
)

// TestRunSmall runs the benchmark on a small workload: every request
// succeeds, figures are filled in and printed beside their targets.
func TestRunSmall(t *testing.T) {
	cfg := apibench.Config{Devices: 120, Alerts: 30, Clients: 4, Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, Dir: t.TempDir(), Writes: 50, Alternations: 2}
	rep, err := apibench.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 3 {
		t.Fatalf("%d results", len(rep.Results))
	}
	for _, r := range rep.Results {
		if r.Requests == 0 || r.Errors != 0 || r.P50 <= 0 || r.P99 < r.P50 {
			t.Errorf("%s: %+v", r.Name, r)
		}
	}
	// Counts, not speeds: a loaded machine slows the writer and can make
	// any request slower than the first.
	if c := rep.Results[2].Commits; c < 1 {
		t.Errorf("the writer committed %d times during the measurement", c)
	}
	if rep.FirstBcrypts != 1 || rep.SteadyBcrypts != 0 {
		t.Errorf("a new key's first request ran bcrypt %d times, its next 200 %d times; want 1 and 0", rep.FirstBcrypts, rep.SteadyBcrypts)
	}
	// The ceiling comparison: both sides answered every request; the bare
	// server answered the relay's bytes (Run checks them before measuring).
	if n := len(rep.Ceiling.Alternations); n != 2 {
		t.Fatalf("%d alternations, want 2", n)
	}
	for i, a := range rep.Ceiling.Alternations {
		if a.Relay.Requests == 0 || a.Bare.Requests == 0 || a.Relay.Errors+a.Bare.Errors != 0 || a.Ratio() <= 0 {
			t.Errorf("alternation %d: relay %+v, bare %+v", i+1, a.Relay, a.Bare)
		}
	}
	if !slices.Contains(rep.Ceiling.Header, "Content-Type") || !slices.Contains(rep.Ceiling.Header, "X-RateLimit-Remaining") {
		t.Errorf("captured header names %v", rep.Ceiling.Header)
	}
	var out bytes.Buffer
	apibench.Print(&out, cfg, rep)
	for _, want := range []string{"GET /devices", "GET /alerts", "target >= 15000", "target < 5 ms", "first request", "50 commits/s", "against bare net/http", "median ratio"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
