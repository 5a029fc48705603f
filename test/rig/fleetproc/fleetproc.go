// Package fleetproc runs Fleet's real binaries for end-to-end tests: it
// builds fleet-relay and fleet-agent once, starts relays and agents as
// processes whose JSON logs go to files, kills them with SIGKILL or stops
// them with SIGTERM, runs admin commands, and talks to the public API as a
// customer would. The cluster tests (test/cluster) and the cluster
// benchmarks build on it, and the HAProxy and Redis harnesses run their
// servers as its processes.
package fleetproc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/minisign"
	"github.com/fleet/fleet/test/rig/testwait"
)

// Bins are the built binaries. AgentJSON is fleet-agent built with the
// fleet_json_only tag: it behaves as agents from before CBOR (no codec
// offered in its hello, JSON throughout).
type Bins struct {
	Dir, Relay, Agent, AgentJSON string
}

// Build builds fleet-relay (cgo) and fleet-agent (static, also as
// AgentJSON) into a new temporary directory; remove Dir when done.
func Build() (Bins, error) {
	dir, err := os.MkdirTemp("", "fleet-bin-")
	if err != nil {
		return Bins{}, err
	}
	b := Bins{Dir: dir, Relay: filepath.Join(dir, "fleet-relay"), Agent: filepath.Join(dir, "fleet-agent"), AgentJSON: filepath.Join(dir, "fleet-agent-json-only")}
	for _, x := range []struct{ out, pkg, cgo, tags string }{
		{b.Relay, "github.com/fleet/fleet/cloud/cmd/fleet-relay", "1", ""},
		{b.Agent, "github.com/fleet/fleet/agent/cmd/fleet-agent", "0", ""},
		{b.AgentJSON, "github.com/fleet/fleet/agent/cmd/fleet-agent", "0", "fleet_json_only"},
	} {
		cmd := exec.Command("go", "build", "-tags", x.tags, "-o", x.out, x.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+x.cgo)
		if out, err := cmd.CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			return Bins{}, fmt.Errorf("go build %s: %v\n%s", x.pkg, err, out)
		}
	}
	return b, nil
}

// BuildAgent builds fleet-agent stamped with version (as `make build
// AGENT_VERSION=version` does) to out.
func BuildAgent(out, version string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X github.com/fleet/fleet/agent.Version="+version, "-o", out, "github.com/fleet/fleet/agent/cmd/fleet-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build fleet-agent %s: %v\n%s", version, err, b)
	}
	return nil
}

// AgentVersion is what `bin --version` prints (the version of the agent
// binary on disk), or the error.
func AgentVersion(bin string) string {
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s --version: %v: %s", bin, err, out)
	}
	return strings.TrimSpace(string(out))
}

// Proc is a child process whose output goes to a log file (appended to
// across restarts).
type Proc struct {
	Name string
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts bin with args and env (added to the test's environment);
// it is killed when the test ends.
func Start(tb testing.TB, name, logPath string, env []string, bin string, args ...string) *Proc {
	tb.Helper()
	return StartAs(tb, name, logPath, env, nil, bin, args...)
}

// Run is Start for a program that is not a test (a benchmark): the caller
// kills the process (it also dies with the caller).
func Run(name, logPath string, env []string, bin string, args ...string) (*Proc, error) {
	return RunAs(name, logPath, env, nil, bin, args...)
}

// StartAs is Start running the process as the user of cred (nil: this
// process's user), such as nobody for an agent that must not be able to
// reboot the machine the test runs on.
func StartAs(tb testing.TB, name, logPath string, env []string, cred *syscall.Credential, bin string, args ...string) *Proc {
	tb.Helper()
	p, err := RunAs(name, logPath, env, cred, bin, args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Kill)
	return p
}

// RunAs is Run as the user of cred (nil: this process's user).
func RunAs(name, logPath string, env []string, cred *syscall.Credential, bin string, args ...string) (*Proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: cred}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %v", name, err)
	}
	p := &Proc{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill sends SIGKILL (kill -9) and waits for the exit.
func (p *Proc) Kill() {
	if p.Exited() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Terminate sends SIGTERM without waiting.
func (p *Proc) Terminate() { p.cmd.Process.Signal(syscall.SIGTERM) }

// Wait waits up to d for the exit and reports whether it came.
func (p *Proc) Wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// Shutdown sends SIGTERM and waits up to d, then sends SIGKILL and waits
// for the exit; it reports whether the process stopped within d.
func (p *Proc) Shutdown(d time.Duration) bool {
	if p.Exited() {
		return true
	}
	p.Terminate()
	if p.Wait(d) {
		return true
	}
	p.Kill()
	return false
}

// Stop is Shutdown failing the test when the process did not stop in time.
func (p *Proc) Stop(tb testing.TB, d time.Duration) {
	tb.Helper()
	if !p.Shutdown(d) {
		tb.Errorf("%s did not stop within %s after SIGTERM", p.Name, d)
	}
}

// ExitCode is the exit status after the process ended (-1 for a signal).
func (p *Proc) ExitCode() int { <-p.done; return p.cmd.ProcessState.ExitCode() }

// LogLines returns the JSON log lines of path whose msg is msg.
func LogLines(tb testing.TB, path, msg string) []map[string]any {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	needle := []byte(`"msg":"` + msg + `"`)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, needle) {
			continue
		}
		var m map[string]any
		if json.Unmarshal(line, &m) != nil || m["msg"] != msg {
			continue
		}
		out = append(out, m)
	}
	return out
}

// Eventually retries f until it returns "" or d passes, then fails the
// test with f's last message.
func Eventually(tb testing.TB, d time.Duration, f func() string) {
	tb.Helper()
	testwait.UntilEvery(tb, d, 50*time.Millisecond, f)
}

// Admin runs an admin command of relay with --json (and env, e.g.
// FLEET_DB) and decodes its output into v (when not nil).
func Admin(tb testing.TB, relay string, env []string, v any, args ...string) {
	tb.Helper()
	AdminInput(tb, relay, env, "", v, args...)
}

// AdminOn returns Admin bound to the relay binary at relay and the
// database db (--db), for a test running several commands on one store.
func AdminOn(tb testing.TB, relay, db string) func(v any, args ...string) {
	return func(v any, args ...string) {
		tb.Helper()
		Admin(tb, relay, nil, v, append(args, "--db", db)...)
	}
}

// AdminInput is Admin with stdin (a password for --password-stdin).
func AdminInput(tb testing.TB, relay string, env []string, stdin string, v any, args ...string) {
	tb.Helper()
	cmd := exec.Command(relay, append(args, "--json")...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("fleet-relay %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if v != nil {
		if err := json.Unmarshal(out, v); err != nil {
			tb.Fatalf("fleet-relay %s: output %q: %v", strings.Join(args, " "), out, err)
		}
	}
}

// Device is what `device add --json` prints.
type Device struct {
	ID    string `json:"id"`
	Token string `json:"token"`
}

// Tenant is an organization with an API key holding every scope and its
// devices, made with the admin CLI.
type Tenant struct {
	OrgID         string
	WebhookSecret string
	Key           string
	Devices       []Device
}

// Provision creates an organization, a key and n IG-500 devices through
// the admin CLI on the store of env (FLEET_DB=...).
func Provision(tb testing.TB, relay string, env []string, name string, n int) Tenant {
	tb.Helper()
	var org struct{ ID, WebhookSecret string }
	Admin(tb, relay, env, &org, "org", "create", "--name", name)
	var key struct{ Key string }
	Admin(tb, relay, env, &key, "key", "create", "--org", org.ID, "--name", "e2e", "--expires", "never",
		"--scopes", "devices:read,devices:write,metrics:read,logs:read,alerts:read,alerts:write")
	t := Tenant{OrgID: org.ID, WebhookSecret: org.WebhookSecret, Key: key.Key}
	for i := range n {
		var d Device
		Admin(tb, relay, env, &d, "device", "add", "--org", org.ID, "--name", fmt.Sprintf("gw-%d", i),
			"--serial", fmt.Sprintf("SN-%s-%d", name, i), "--model", "IG-500")
		t.Devices = append(t.Devices, d)
	}
	return t
}

// AgentArgs are the flags of a simulated agent streaming a sample and a
// heartbeat every second, with fast reconnects, for the device token, its
// state directory and relay URLs.
func AgentArgs(token, stateDir string, relays ...string) []string {
	return append([]string{"--token", token}, AgentFlags(stateDir, relays...)...)
}

// AgentFlags are AgentArgs without a device token: the agent takes it
// from FLEET_TOKEN, a claim (FLEET_CLAIM) or its state directory, and `ps`
// shows none.
func AgentFlags(stateDir string, relays ...string) []string {
	args := []string{"--hw", "sim", "--model", "IG-500", "--state-dir", stateDir,
		"--heartbeat", "1s", "--metrics-interval", "1s", "--backoff-min", "200ms", "--backoff-max", "2s",
		"--passthrough-listen", "none", "--dev-root", "none", "--vpn-interface", "none",
		"--log-level", "debug", "--log-format", "json"}
	for _, r := range relays {
		args = append(args, "--relay", r)
	}
	return args
}

// API is a client of the public API at Base (scheme://host:port).
type API struct {
	TB   testing.TB
	Base string
	Key  string
	C    *http.Client
}

// NewAPI returns a client with a 10s timeout.
func NewAPI(tb testing.TB, base, key string) *API {
	return &API{TB: tb, Base: base, Key: key, C: &http.Client{Timeout: 10 * time.Second}}
}

// Do makes a request to path (below /api/v1/public) and decodes a 2xx body
// into out. It returns the status (0 when the request failed).
func (a *API) Do(method, path string, body, out any) int {
	a.TB.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.Base+"/api/v1/public"+path, rd)
	if err != nil {
		a.TB.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.Key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.C.Do(req)
	if err != nil {
		a.TB.Logf("%s %s: %v", method, path, err)
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			a.TB.Fatalf("%s %s: %s: %v", method, path, b, err)
		}
	}
	return resp.StatusCode
}

// Status returns a device's status ("" when the request failed).
func (a *API) Status(id string) string {
	var d resource.One[resource.DeviceDetail]
	if a.Do("GET", "/devices/"+id, nil, &d) != 200 {
		return ""
	}
	return string(d.Data.Status)
}

// WaitStatus waits until every device in ids has status want.
func (a *API) WaitStatus(ids []string, want string, d time.Duration) {
	a.TB.Helper()
	Eventually(a.TB, d, func() string {
		for _, id := range ids {
			if s := a.Status(id); s != want {
				return fmt.Sprintf("device %s is %q, want %s", id, s, want)
			}
		}
		return ""
	})
}

// Samples returns the capturedAt (Unix ms) of a device's stored samples
// since from (at most 1000), oldest first.
func (a *API) Samples(id string, from time.Time) []int64 {
	a.TB.Helper()
	var l struct {
		Data []resource.MetricSample `json:"data"`
	}
	q := "/devices/" + id + "/metrics?limit=1000&from=" + from.UTC().Format(time.RFC3339)
	if code := a.Do("GET", q, nil, &l); code != 200 {
		a.TB.Fatalf("GET metrics: %d", code)
	}
	out := make([]int64, len(l.Data))
	for i, s := range l.Data {
		out[i] = s.CapturedAt.Time.UnixMilli()
	}
	slices.Sort(out) // the API answers newest first
	return out
}

// Captured returns the capturedAt (Unix ms) of the samples an agent logged
// ("metric captured") before cutoff.
func Captured(tb testing.TB, agentLog string, cutoff time.Time) []int64 {
	tb.Helper()
	var out []int64
	for _, l := range LogLines(tb, agentLog, "metric captured") {
		at, err := resource.ParseTime(fmt.Sprint(l["capturedAt"]))
		if err != nil {
			tb.Fatalf("%s: capturedAt %v", agentLog, l["capturedAt"])
		}
		if at.Before(cutoff) {
			out = append(out, at.UnixMilli())
		}
	}
	return out
}

// CheckSamples checks that every sample the agent logged between from and
// cutoff is stored exactly once and in order, allowing `spare` stored
// samples the agent never logged (one per kill -9 of the agent: a sample
// spooled in the instant before its log line). It returns how many.
func CheckSamples(tb testing.TB, a *API, id, agentLog string, from, cutoff time.Time, spare int) int {
	tb.Helper()
	var captured []int64
	for _, c := range Captured(tb, agentLog, cutoff) {
		if c >= from.UnixMilli() {
			captured = append(captured, c)
		}
	}
	if !slices.IsSorted(captured) {
		tb.Errorf("%s: captured samples out of order", id)
	}
	var stored []int64
	Eventually(tb, 20*time.Second, func() string {
		stored = stored[:0]
		for _, s := range a.Samples(id, from) {
			if s < cutoff.UnixMilli() {
				stored = append(stored, s)
			}
		}
		if missing := Minus(captured, stored); len(missing) > 0 {
			return fmt.Sprintf("device %s: %d of %d captured samples not stored", id, len(missing), len(captured))
		}
		return ""
	})
	if extra := Minus(stored, captured); len(extra) > spare {
		tb.Errorf("device %s: %d stored samples the agent never logged", id, len(extra))
	}
	seen := map[int64]bool{}
	for _, s := range stored {
		if seen[s] {
			tb.Errorf("device %s: sample %d stored twice", id, s)
		}
		seen[s] = true
	}
	return len(captured)
}

// Minus returns the values of a not in b.
func Minus(a, b []int64) []int64 {
	in := make(map[int64]bool, len(b))
	for _, v := range b {
		in[v] = true
	}
	var out []int64
	for _, v := range a {
		if !in[v] {
			out = append(out, v)
		}
	}
	return out
}

// HostArch is this machine's agent architecture as releases name it
// ("amd64", "arm64", "armv7").
func HostArch() string { return protocol.ArchOf(runtime.GOARCH, "") }

// AddRelease signs file with key (Debian's minisign) and adds it as the
// agent release version of org for this machine's architecture with
// `fleet-relay release add` on the store of env.
func AddRelease(tb testing.TB, relay string, env []string, org, version, file string, key minisign.Key) {
	tb.Helper()
	sig, _ := key.Sign(tb, file, "fleet-agent "+version)
	Admin(tb, relay, env, nil, "release", "add", "--org", org, "--version", version, "--arch", HostArch(), "--file", file, "--sig", sig)
}

// CreateRollout posts a rollout (POST /rollouts) and returns its id.
func (a *API) CreateRollout(body map[string]any) string {
	a.TB.Helper()
	var r resource.One[resource.Rollout]
	if code := a.Do("POST", "/rollouts", body, &r); code != 201 || r.Data.ID == "" {
		a.TB.Fatalf("POST /rollouts %v: %d %+v", body, code, r.Data)
	}
	return r.Data.ID
}

// Rollout returns GET /rollouts/{id} (and the status).
func (a *API) Rollout(id string) (resource.RolloutDetail, int) {
	var r resource.One[resource.RolloutDetail]
	code := a.Do("GET", "/rollouts/"+id, nil, &r)
	return r.Data, code
}

// WaitRollout waits up to d until rollout id is in state and returns it.
func (a *API) WaitRollout(id, state string, d time.Duration) resource.RolloutDetail {
	a.TB.Helper()
	var r resource.RolloutDetail
	Eventually(a.TB, d, func() string {
		var code int
		if r, code = a.Rollout(id); code != 200 {
			return fmt.Sprintf("GET /rollouts/%s: %d", id, code)
		}
		if r.State != state {
			return fmt.Sprintf("rollout %s is %s (%v), want %s; devices %+v", id, r.State, r.Counts, state, r.Devices)
		}
		return ""
	})
	return r
}

// AgentVersion is the device's agentVersion in the API ("" when the
// request failed).
func (a *API) AgentVersion(id string) string {
	var d resource.One[resource.DeviceDetail]
	if a.Do("GET", "/devices/"+id, nil, &d) != 200 {
		return ""
	}
	return d.Data.AgentVersion
}

// CopyAgent copies the agent binary bin to dir/fleet-agent (mode 0755,
// dir made) and returns its path: an agent updates its own binary, so
// each runs from a copy of its own.
func CopyAgent(tb testing.TB, bin, dir string) string {
	tb.Helper()
	b, err := os.ReadFile(bin)
	if err != nil {
		tb.Fatal(err)
	}
	out := filepath.Join(dir, "fleet-agent")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(out, b, 0o755); err != nil {
		tb.Fatal(err)
	}
	return out
}
