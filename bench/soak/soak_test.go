package soak_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet/fleet/bench/soak"
)

// TestShortSoak is the short variant of `make soak`: 100 agents through
// every fault, a kill -9 of the relay, a full disk and a flapping webhook
// receiver for about 75 s; nothing may be lost.
func TestShortSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("the short soak takes about two minutes")
	}
	relay := filepath.Join(t.TempDir(), "fleet-relay")
	if out, err := exec.Command("go", "build", "-o", relay, "../../cloud/cmd/fleet-relay").CombinedOutput(); err != nil {
		t.Fatalf("build relay: %v\n%s", err, out)
	}
	cfg := soak.Short(relay)
	cfg.Log = t.Logf
	rep, err := soak.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.Print(&b)
	t.Log(b.String())
	if why := rep.Failed(0); len(why) > 0 {
		t.Errorf("soak failed: %v", why)
	}
	if rep.SamplesOffered == 0 || rep.DeliveriesExpected == 0 || rep.Kills == 0 || len(rep.Faults) < 5 {
		t.Errorf("the soak did not exercise everything: %d samples, %d deliveries, %d kills, faults %v",
			rep.SamplesOffered, rep.DeliveriesExpected, rep.Kills, rep.Faults)
	}
}
