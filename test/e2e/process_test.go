package e2e_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/fleet/fleet/test/rig/fleetproc"
	"github.com/fleet/fleet/test/rig/testnet"
)

// bins holds the binaries TestMain builds: agentJSON is fleet-agent built
// to behave as agents from before CBOR (fleetproc.Bins).
var bins struct {
	dir, relay, agent, agentJSON string
}

func TestMain(m *testing.M) {
	b, err := fleetproc.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	bins.dir, bins.relay, bins.agent, bins.agentJSON = b.Dir, b.Relay, b.Agent, b.AgentJSON
	code := m.Run()
	os.RemoveAll(b.Dir)
	os.Exit(code)
}

// freePort returns a loopback port nobody listens on, below the ephemeral
// range: the relay is restarted on the same port.
func freePort(t *testing.T) int { return testnet.FreePort(t) }
