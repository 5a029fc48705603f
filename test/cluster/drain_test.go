package cluster_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/fleet/fleet/test/rig/fleetproc"
)

// TestDrainMovesAgentsToTheNextRelay: two relays on one store, agents
// given both with --relay (no balancer). SIGTERM to the relay holding them:
// its /readyz turns 503 during the drain delay, then the agents get 1012,
// move to the other relay and stay ONLINE there; the drained relay exits
// 0; every sample each agent captured is stored exactly once. Then the
// other relay is killed with SIGKILL while the first is back: the agents
// go around their list to it, again losing nothing.
func TestDrainMovesAgentsToTheNextRelay(t *testing.T) {
	const n = 3
	dir := t.TempDir()
	env := []string{"FLEET_DB=" + filepath.Join(dir, "fleet.db")}
	tenant := fleetproc.Provision(t, bins.Relay, env, "Drain", n)
	a := startRelay(t, dir, "relay-a", env, "--drain-delay", "1s")
	b := startRelay(t, dir, "relay-b", env)
	api := fleetproc.NewAPI(t, b.URL(), tenant.Key)
	start := time.Now().Add(-time.Second)
	agents, ids := startAgents(t, dir, tenant.Devices, a.URL(), b.URL())
	api.WaitStatus(ids, "ONLINE", 20*time.Second)
	if got := a.onlineCount(t); got != n {
		t.Fatalf("relay a took %d agents, want all %d (it is first in their list)", got, n)
	}
	time.Sleep(3 * time.Second) // samples stream

	a.Terminate()
	fleetproc.Eventually(t, 2*time.Second, func() string {
		if code := readyz(a.URL()); code != 503 {
			return "relay a's /readyz still answers " + itoa(code) + " after SIGTERM"
		}
		return ""
	})
	fleetproc.Eventually(t, 20*time.Second, func() string {
		if got := b.onlineCount(t); got < n {
			return "agents on relay b: " + itoa(got)
		}
		return ""
	})
	if !a.Wait(20 * time.Second) {
		t.Fatal("relay a did not exit after its drain")
	}
	if code := a.ExitCode(); code != 0 {
		t.Errorf("relay a exited %d after SIGTERM", code)
	}
	for _, ag := range agents {
		if len(fleetproc.LogLines(t, ag.Log, "relay draining; reconnecting")) == 0 {
			t.Errorf("%s was not told to reconnect (1012)", ag.Name)
		}
	}
	api.WaitStatus(ids, "ONLINE", 10*time.Second)
	time.Sleep(3 * time.Second)

	// Relay a comes back; relay b dies without a word.
	a.restart(t)
	b.Kill()
	api = fleetproc.NewAPI(t, a.URL(), tenant.Key)
	fleetproc.Eventually(t, 30*time.Second, func() string {
		if got := a.onlineCount(t); got < 2*n {
			return "agents back on relay a: " + itoa(got-n)
		}
		return ""
	})
	api.WaitStatus(ids, "ONLINE", 10*time.Second)
	time.Sleep(3 * time.Second)

	cutoff := time.Now().Add(-time.Second)
	for _, ag := range agents {
		got := fleetproc.CheckSamples(t, api, ag.dev.ID, ag.Log, start, cutoff, 0)
		if got < 5 {
			t.Errorf("%s captured only %d samples", ag.Name, got)
		}
		t.Logf("%s: %d samples stored exactly once across two relays", ag.Name, got)
	}
}
