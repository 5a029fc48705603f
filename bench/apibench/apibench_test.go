package apibench_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/bench/apibench"
)

// TestRunSmall runs the benchmark on a small workload: every request
// succeeds, figures are filled in and printed beside their targets.
func TestRunSmall(t *testing.T) {
	cfg := apibench.Config{Devices: 120, Alerts: 30, Clients: 4, Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, Dir: t.TempDir(), Writes: 50}
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
	if c := rep.Results[2].Commits; c < 5 {
		t.Errorf("the writer committed %d times in 300 ms at 50/s", c)
	}
	if rep.FirstRequest <= rep.Steady {
		t.Errorf("first request %s not slower than steady state %s: bcrypt on every request?", rep.FirstRequest, rep.Steady)
	}
	var out bytes.Buffer
	apibench.Print(&out, cfg, rep)
	for _, want := range []string{"GET /devices", "GET /alerts", "target >= 15000", "target < 5 ms", "first request", "50 commits/s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
