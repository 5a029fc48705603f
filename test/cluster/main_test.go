package cluster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleet/fleet/test/rig/fleetproc"
	"github.com/fleet/fleet/test/rig/pgtest"
	"github.com/fleet/fleet/test/rig/testnet"
)

var bins fleetproc.Bins

// pg is the PostgreSQL server of the tests that need one (started on first
// use; each test makes its own database).
var pg pgtest.Shared

func TestMain(m *testing.M) {
	b, err := fleetproc.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster tests:", err)
		os.Exit(1)
	}
	bins = b
	code := m.Run()
	pg.Close()
	os.RemoveAll(b.Dir)
	os.Exit(code)
}

// relay is one fleet-relay serve process of a test.
type relay struct {
	*fleetproc.Proc
	Addr string
	args []string
	env  []string
	n    int // starts so far
}

// URL is the relay's base URL.
func (r *relay) URL() string { return "http://" + r.Addr }

// startRelay starts `fleet-relay serve` on a free port with env (FLEET_DB
// ...) and extra flags, and waits until it listens.
func startRelay(t *testing.T, dir, name string, env []string, args ...string) *relay {
	t.Helper()
	r := newRelay(t, dir, name, env, args...)
	r.waitListening(t)
	return r
}

// newRelay starts `fleet-relay serve` like startRelay without waiting:
// several relays start at once this way (then waitListening each).
func newRelay(t *testing.T, dir, name string, env []string, args ...string) *relay {
	t.Helper()
	r := &relay{Addr: testnet.FreeAddr(t), env: env}
	r.args = append([]string{"serve", "--listen", r.Addr, "--rate-limit", "1000000", "--agent-orphan-window", "5s"}, args...)
	r.Proc = &fleetproc.Proc{Name: name, Log: filepath.Join(dir, name+".log")}
	r.start(t)
	return r
}

// restart starts the relay again (same port, same log) and waits until it
// listens.
func (r *relay) restart(t *testing.T) {
	t.Helper()
	r.start(t)
	r.waitListening(t)
}

func (r *relay) start(t *testing.T) {
	t.Helper()
	r.n++
	r.Proc = fleetproc.Start(t, r.Name, r.Log, r.env, bins.Relay, r.args...)
}

// waitListening waits until the relay's latest start logged "relay
// listening": its store is open and it serves (/readyz answers 200).
func (r *relay) waitListening(t *testing.T) {
	t.Helper()
	want := r.n
	fleetproc.Eventually(t, 60*time.Second, func() string {
		if r.Exited() {
			t.Fatalf("%s exited; see %s", r.Name, r.Log)
		}
		if len(fleetproc.LogLines(t, r.Log, "relay listening")) < want {
			return r.Name + " not listening"
		}
		return ""
	})
}

// onlineCount is how many "agent online" lines the relay logged.
func (r *relay) onlineCount(t *testing.T) int {
	return len(fleetproc.LogLines(t, r.Log, "agent online"))
}

// agent is one fleet-agent process.
type agent struct {
	*fleetproc.Proc
	dev  fleetproc.Device
	args []string
}

func startAgent(t *testing.T, dir string, i int, dev fleetproc.Device, relays ...string) *agent {
	t.Helper()
	name := fmt.Sprintf("agent-%d", i)
	a := &agent{Proc: &fleetproc.Proc{Name: name, Log: filepath.Join(dir, name+".log")}, dev: dev,
		args: append(fleetproc.AgentArgs(dev.Token, filepath.Join(dir, name), relays...), "--name", name)}
	a.restart(t)
	return a
}

// startAgents starts an agent for each device (agent i for device i)
// with the relay URLs relays, and returns them with the devices' ids.
func startAgents(t *testing.T, dir string, devices []fleetproc.Device, relays ...string) ([]*agent, []string) {
	t.Helper()
	agents := make([]*agent, len(devices))
	ids := make([]string, len(devices))
	for i, d := range devices {
		agents[i] = startAgent(t, dir, i, d, relays...)
		ids[i] = d.ID
	}
	return agents, ids
}

// restart starts the agent (again: same state directory, same log).
func (a *agent) restart(t *testing.T) {
	t.Helper()
	a.Proc = fleetproc.Start(t, a.Name, a.Log, nil, bins.Agent, a.args...)
}
