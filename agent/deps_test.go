package agent

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAgentDoesNotLinkCloud proves the agent binary stays small and static:
// it must not link SQLite (cgo), chi or anything of the relay.
func TestAgentDoesNotLinkCloud(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/fleet/fleet/agent/cmd/fleet-agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 20 {
		t.Fatalf("suspiciously few deps: %v", deps)
	}
	forbidden := []string{"github.com/mattn/go-sqlite3", "github.com/go-chi/", "github.com/fleet/fleet/cloud", "github.com/getkin/kin-openapi"}
	for _, d := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(d, f) {
				t.Errorf("fleet-agent links %s", d)
			}
		}
	}
	// The agent's own metrics (--metrics-listen) link the Prometheus
	// client library, and it brings nothing of the relay with it.
	linked := false
	for _, d := range deps {
		linked = linked || d == "github.com/prometheus/client_golang/prometheus"
	}
	if !linked {
		t.Errorf("fleet-agent does not link github.com/prometheus/client_golang/prometheus: is agent/agentmetrics wired in?")
	}
	out, err = exec.Command("go", "list", "-deps", "github.com/fleet/fleet/agent/agentmetrics").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, d := range strings.Fields(string(out)) {
		if strings.HasPrefix(d, "github.com/fleet/fleet/cloud") || strings.HasPrefix(d, "github.com/go-chi/") || strings.HasPrefix(d, "github.com/mattn/go-sqlite3") {
			t.Errorf("agent/agentmetrics (with client_golang) links %s", d)
		}
	}
	// CGO off: the agent builds as one static binary.
	cmd := exec.Command("go", "list", "-f", "{{.CgoFiles}}", "-deps", "github.com/fleet/fleet/agent/cmd/fleet-agent")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go list with CGO_ENABLED=0: %v\n%s", err, out)
	}
}
