package cluster_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/fleetproc"
	"github.com/fleet/fleet/test/rig/minisign"
)

// TestRolloutRelayKilled: an agent rollout on the PostgreSQL cluster
// (three relays behind the shipped HAProxy configuration, agents that know
// only HAProxy's address) survives the kill -9 of the relay running the
// rollout engine (the holder of the "rollouts" lease) in the middle of
// it: another relay takes the lease and the rollout completes, every
// agent's binary on disk and agentVersion on the new version, every device
// healthy and ONLINE.
func TestRolloutRelayKilled(t *testing.T) {
	const n = 4
	dir := t.TempDir()
	dbURL := pg.Get(t).CreateDB(t)
	env := []string{"FLEET_DB=" + dbURL}
	var relays []*relay
	var addrs []string
	for i := range 3 {
		r := newRelay(t, dir, fmt.Sprintf("relay%d", i+1), env)
		relays = append(relays, r)
		addrs = append(addrs, r.Addr)
	}
	for _, r := range relays {
		r.waitListening(t)
	}
	ten := fleetproc.Provision(t, bins.Relay, env, "Rollout", n)
	_, lb := balance(t, addrs, 20*time.Second)
	api := fleetproc.NewAPI(t, lb, ten.Key)

	v100, v110 := filepath.Join(dir, "fleet-agent-1.0.0"), filepath.Join(dir, "fleet-agent-1.1.0")
	for v, out := range map[string]string{"1.0.0": v100, "1.1.0": v110} {
		if err := fleetproc.BuildAgent(out, v); err != nil {
			t.Fatal(err)
		}
	}
	key := minisign.NewKey(t)
	fleetproc.AddRelease(t, bins.Relay, env, ten.OrgID, "1.1.0", v110, key)

	bin := make([]string, n)
	ids := make([]string, n)
	for i, d := range ten.Devices {
		ids[i] = d.ID
		bin[i] = fleetproc.CopyAgent(t, v100, filepath.Join(dir, fmt.Sprintf("gw-%d", i)))
		name := fmt.Sprintf("agent-%d", i)
		fleetproc.Start(t, name, filepath.Join(dir, name+".log"), []string{"FLEET_TOKEN=" + d.Token}, bin[i],
			append(fleetproc.AgentFlags(filepath.Join(dir, name), lb), "--update-key", key.Pub, "--name", name)...)
	}
	api.WaitStatus(ids, "ONLINE", 60*time.Second)

	// Waves of 1, 2 and 4 devices: the engine is killed once the first
	// wave is healthy, while the second runs.
	id := api.CreateRollout(map[string]any{"version": "1.1.0", "scope": map[string]any{}, "waves": []int{25, 50, 100},
		"maxFailures": 0, "healthFor": "10s"})
	fleetproc.Eventually(t, 2*time.Minute, func() string {
		r, _ := api.Rollout(id)
		if r.State != resource.RolloutRunning || r.Wave < 1 {
			return fmt.Sprintf("rollout %s in wave %d (%v), want running in the second wave", r.State, r.Wave, r.Counts)
		}
		return ""
	})
	holder := leaseHolder(t, dbURL, relays)
	if holder < 0 {
		t.Fatal("no live relay holds the rollouts lease while a rollout runs")
	}
	t.Logf("kill -9 %s, the rollout engine, in the second wave", relays[holder].Name)
	relays[holder].Kill()

	r := api.WaitRollout(id, resource.RolloutCompleted, 3*time.Minute)
	if r.Total != n || r.Counts[resource.RolloutDeviceHealthy] != n {
		t.Errorf("rollout completed with %d devices %v, want %d healthy", r.Total, r.Counts, n)
	}
	if next := leaseHolder(t, dbURL, relays); next < 0 || next == holder {
		t.Errorf("the rollouts lease is held by relay index %d after the kill of %d", next, holder)
	}
	api.WaitStatus(ids, "ONLINE", 60*time.Second)
	for i, id := range ids {
		if v := fleetproc.AgentVersion(bin[i]); v != "1.1.0" {
			t.Errorf("agent %d's binary on disk reports %q, want 1.1.0", i, v)
		}
		if v := api.AgentVersion(id); v != "1.1.0" {
			t.Errorf("device %d agentVersion %q, want 1.1.0", i, v)
		}
	}
}

// leaseHolder returns the index of the live relay holding the rollouts
// lease (a relay's lease owner is hostname-pid-random), or -1.
func leaseHolder(t *testing.T, dbURL string, relays []*relay) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var owner string
	if err := conn.QueryRow(ctx, `SELECT owner FROM leases WHERE name = 'rollouts' AND lease_until > (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint`).Scan(&owner); err != nil {
		t.Logf("rollouts lease: %v", err)
		return -1
	}
	for i, r := range relays {
		if !r.Exited() && strings.Contains(owner, fmt.Sprintf("-%d-", r.Pid())) {
			return i
		}
	}
	t.Logf("rollouts lease held by %s, no live relay of the test", owner)
	return -1
}
