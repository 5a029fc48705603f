package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/logbuf"
	"github.com/fleet/fleet/test/rig/relaystub"
	"github.com/fleet/fleet/test/rig/testwait"
)

const token = "fleet_dt_process-test-token"

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// buildAgent builds the binary once per test run, as make build does.
func buildAgent(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fleet-agent-test")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "fleet-agent")
		cmd := exec.Command("go", "build", "-trimpath", "-o", binPath, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

func start(t *testing.T, bin string, args []string, logs *logbuf.Buffer) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logs
	cmd.Env = append(os.Environ(), "FLEET_TOKEN="+token) // the token from the environment
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, what, 20*time.Second, cond)
}

// TestBinary runs the real fleet-agent process against a loopback relay
// stub: status file + SIGUSR1, a dropped link, kill -9 and restart, and a
// graceful SIGTERM; every record arrives exactly once and in order.
func TestBinary(t *testing.T) {
	bin := buildAgent(t)
	r := relaystub.Start(token)
	defer r.Close()
	state := t.TempDir()
	args := []string{"--relay", r.URL, "--hw", "sim", "--model", "IG-500", "--state-dir", state,
		"--heartbeat", "1h", "--metrics-interval", "1s", "--backoff-min", "20ms", "--backoff-max", "200ms",
		"--proc-root", "../../metrics/testdata/normal/proc", "--sys-root", "../../metrics/testdata/normal/sys",
		"--dev-root", "none", "--passthrough-listen", "none", "--log-level", "debug"}
	logs := &logbuf.Buffer{}
	cmd := start(t, bin, args, logs)

	waitFor(t, "first heartbeat", func() bool { return r.LastHeartbeat().Status == resource.StatusOnline })
	// SIGUSR1 re-reads the status file and sends a heartbeat at once (the
	// heartbeat interval is an hour).
	os.WriteFile(filepath.Join(state, "status"), []byte("REBOOTING\n"), 0o600)
	cmd.Process.Signal(syscall.SIGUSR1)
	waitFor(t, "REBOOTING heartbeat", func() bool { return r.LastHeartbeat().Status == resource.StatusRebooting })
	os.Remove(filepath.Join(state, "status"))

	// A dropped link reconnects.
	waitFor(t, "a metric", func() bool { return r.Metrics() >= 1 })
	r.Drop()
	waitFor(t, "reconnect", func() bool { return r.HelloCount() == 2 })
	waitFor(t, "more metrics", func() bool { return r.Metrics() >= 3 })

	// kill -9 and restart: nothing lost, nothing twice.
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	before := r.Metrics()
	cmd = start(t, bin, args, logs)
	waitFor(t, "session after restart", func() bool { return r.HelloCount() == 3 })
	waitFor(t, "metrics after restart", func() bool { return r.Metrics() >= before+2 })

	// SIGTERM: agent.stopped reaches the relay, exit status 0.
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, logs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit within 10s of SIGTERM")
	}
	if n := len(r.Events(protocol.EventAgentStopped)); n != 1 {
		t.Fatalf("%d agent.stopped events", n)
	}
	if n := len(r.Events(protocol.EventAgentStarted)); n != 2 {
		t.Fatalf("%d agent.started events, want 2", n)
	}
	seqs := r.Seqs()
	r.Mu.Lock()
	defer r.Mu.Unlock()
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("stored seqs have a gap at %d: %v", i+1, seqs)
		}
		if r.Received[s] != 1 {
			t.Fatalf("seq %d received %d times", s, r.Received[s])
		}
	}
	if bytes.Contains([]byte(logs.String()), []byte(token)) {
		t.Fatal("the token appears in the agent's log")
	}
	if bytes.Contains([]byte(logs.String()), []byte("--token")) {
		t.Fatalf("a token from FLEET_TOKEN warned about --token:\n%s", logs)
	}
}

// TestTokenFlagWarns: a device token given with --token (ps shows it to
// every user of the gateway) works, and the agent says at start to use
// FLEET_TOKEN, the config file or the state directory's file instead.
func TestTokenFlagWarns(t *testing.T) {
	bin := buildAgent(t)
	r := relaystub.Start(token)
	defer r.Close()
	logs := &logbuf.Buffer{}
	cmd := exec.Command(bin, "--relay", r.URL, "--token", token, "--hw", "sim", "--model", "IG-500", "--state-dir", t.TempDir(),
		"--heartbeat", "1h", "--dev-root", "none", "--passthrough-listen", "none",
		"--proc-root", "../../metrics/testdata/normal/proc", "--sys-root", "../../metrics/testdata/normal/sys")
	cmd.Stderr = logs
	cmd.Env = withoutToken(os.Environ())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitFor(t, "first heartbeat", func() bool { return r.LastHeartbeat().Status == resource.StatusOnline })
	out := logs.String()
	for _, want := range []string{"level=WARN", "--token", "ps", "FLEET_TOKEN", "device-token"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, token) {
		t.Error("the token appears in the agent's log")
	}
}

// withoutToken is env without FLEET_TOKEN.
func withoutToken(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "FLEET_TOKEN=") {
			out = append(out, kv)
		}
	}
	return out
}

func TestUsageErrors(t *testing.T) {
	bin := buildAgent(t)
	cmd := exec.Command(bin, "--relay", "http://127.0.0.1:1")
	cmd.Env = []string{}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !bytes.Contains(out, []byte("--token is required")) {
		t.Fatalf("missing token: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "--help").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("-spool-max-bytes")) {
		t.Fatalf("--help: %v\n%s", err, out)
	}
}
