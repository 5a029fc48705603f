package relay

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// TestClusterRolloutSurvivesItsEngine: two relays on one PostgreSQL
// database, two devices whose agents hold connections to the relay that
// does not step the rollouts. A rollout in two waves is created; the relay
// holding the "rollouts" lease starts the first wave, whose update reaches
// the agent on the other relay; that relay is then stopped, the first
// device reports healthy on the new version, and the remaining relay takes
// the lease and starts the second wave: nothing of the rollout lived in
// the stopped relay's memory.
func TestClusterRolloutSurvivesItsEngine(t *testing.T) {
	c := startCluster(t, 2)
	var second struct{ ID, Token string }
	mustJSON(t, &second, "device", "add", "--db", c.url, "--org", c.orgID, "--name", "lathe", "--serial", "SN-2", "--model", "IG-500")
	data, sig := storetest.ReleaseBinary(t, 4096)
	storetest.Release(t, c.relays[0].DB.Releases(), cloud.NewRelease{OrgID: c.orgID, Version: "2.0.0", Arch: "amd64", Signature: sig}, data)

	holder := c.leaseHolder(t, "rollouts")
	other := 1 - holder
	t.Logf("relay %d holds the rollouts lease", holder)
	hello := func(version string) protocol.Hello {
		return protocol.Hello{AgentVersion: version, Arch: "amd64", Model: "IG-500", HeartbeatInterval: protocol.Duration{Duration: time.Minute}}
	}
	tokens := map[string]string{c.devID: c.token, second.ID: second.Token}
	order := []string{c.devID, second.ID}
	slices.Sort(order) // the rollout's order: by id
	agents := map[string]*simAgent{}
	for _, id := range order {
		agents[id] = connectAgentHello(t, c.relays[other].Addr(), tokens[id], hello("1.0.0"))
	}

	code, body := c.call(t, other, "POST", "/rollouts", `{"version":"2.0.0","waves":[50,100],"healthFor":"10s"}`)
	if code != 201 {
		t.Fatalf("POST /rollouts: %d %s", code, body)
	}
	var created resource.One[resource.RolloutDetail]
	json.Unmarshal(body, &created)
	first, last := order[0], order[1]
	cmd := agents[first].command(10 * time.Second)
	if cmd.Kind != protocol.CommandUpdate || cmd.Update == nil || cmd.Update.Version != "2.0.0" || cmd.Update.RolloutID != created.Data.ID {
		t.Fatalf("first wave's command %+v", cmd)
	}

	c.relays[holder].Close()
	start := time.Now()
	for _, st := range []string{protocol.CommandAccepted, protocol.CommandDownloading, protocol.CommandInstalling} {
		agents[first].send(protocol.Message{Type: protocol.TypeCommandStatus, CommandStatus: &protocol.CommandStatus{ID: cmd.ID, State: st}})
	}
	agents[first].ws.CloseNow()
	updated := connectAgentHello(t, c.relays[other].Addr(), tokens[first], hello("2.0.0"))
	updated.send(protocol.Message{Type: protocol.TypeCommandStatus, CommandStatus: &protocol.CommandStatus{ID: cmd.ID, State: protocol.CommandHealthy, Version: "2.0.0"}})

	next := agents[last].command(rolloutLease + 15*time.Second)
	if next.Kind != protocol.CommandUpdate || next.Update == nil || next.Update.Version != "2.0.0" {
		t.Fatalf("second wave's command %+v", next)
	}
	t.Logf("second wave sent %s after the lease holder stopped", time.Since(start).Round(100*time.Millisecond))
	if h := c.leaseHolder(t, "rollouts"); h != other {
		t.Errorf("relay %d holds the rollouts lease, want %d", h, other)
	}
	code, body = c.call(t, other, "GET", "/rollouts/"+created.Data.ID, "")
	var got resource.One[resource.RolloutDetail]
	json.Unmarshal(body, &got)
	if code != 200 || got.Data.State != resource.RolloutRunning || got.Data.Wave != 1 || got.Data.Counts[resource.RolloutDeviceHealthy] != 1 {
		t.Errorf("the rollout after the second wave started: %d %s", code, body)
	}
}

// command waits up to d for a command message and returns it.
func (a *simAgent) command(d time.Duration) protocol.Command {
	a.t.Helper()
	deadline := time.Now().Add(d)
	for {
		m := a.next(time.Until(deadline))
		if m.Type == protocol.TypeCommand && m.Command != nil {
			return *m.Command
		}
	}
}

// leaseHolder waits for one of c's relays to hold the cluster-wide lease
// name and returns its index.
func (c *cluster) leaseHolder(t *testing.T, name string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	holder := -1
	eventually(t, 10*time.Second, func() bool {
		var owner string
		if conn.QueryRow(ctx, `SELECT owner FROM leases WHERE name = $1`, name).Scan(&owner) != nil {
			return false
		}
		for i, r := range c.relays {
			if r.DB != nil && r.DB.Cluster.Relay == owner {
				holder = i
			}
		}
		return holder >= 0
	})
	return holder
}
