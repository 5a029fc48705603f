package e2e_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// bins holds the binaries TestMain builds: agentJSON is fleet-agent built
// with the fleet_json_only tag, which behaves as agents from before CBOR
// (it offers no codec in its hello and speaks JSON throughout).
var bins struct {
	dir, relay, agent, agentJSON string
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fleet-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.dir = dir
	bins.relay = filepath.Join(dir, "fleet-relay")
	bins.agent = filepath.Join(dir, "fleet-agent")
	bins.agentJSON = filepath.Join(dir, "fleet-agent-json-only")
	for _, b := range []struct {
		out, pkg string
		cgo      string
		tags     string
	}{
		{bins.relay, "github.com/fleet/fleet/cloud/cmd/fleet-relay", "1", ""},
		{bins.agent, "github.com/fleet/fleet/agent/cmd/fleet-agent", "0", ""},
		{bins.agentJSON, "github.com/fleet/fleet/agent/cmd/fleet-agent", "0", "fleet_json_only"},
	} {
		cmd := exec.Command("go", "build", "-tags", b.tags, "-o", b.out, b.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: go build %s: %v\n%s", b.pkg, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort returns a loopback port nobody listens on.
//
// The relay is restarted on the same port, which stays free for seconds in
// between; a port from the kernel's ephemeral range could meanwhile become
// the source port of some other outgoing connection on the machine, and the
// restart would fail. So the port is picked below that range.
func freePort(t *testing.T) int {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 12000 {
				low = n
			}
		}
	}
	for range 100 {
		port := 10000 + rand.IntN(low-10000)
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		ln.Close()
		return port
	}
	t.Fatalf("no free port below %d", low)
	return 0
}

// proc is a child process whose stderr goes to a log file (appended across
// restarts) and is scanned for lines.
type proc struct {
	t       *testing.T
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
}

func start(t *testing.T, name, logPath string, bin string, args ...string) *proc {
	t.Helper()
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = f
	cmd.Stdout = f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{t: t, name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill() })
	return p
}

// kill sends SIGKILL (kill -9) and waits for the exit.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and waits up to d.
func (p *proc) stop(d time.Duration) {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(d):
		p.t.Errorf("%s did not stop within %s after SIGTERM", p.name, d)
		p.kill()
	}
}

// logLines returns the JSON log lines of the file whose msg is msg.
func logLines(t *testing.T, path, msg string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte(msg)) {
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

// eventually retries f until it returns "" or d passes.
func eventually(t *testing.T, d time.Duration, f func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		msg := f()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", d, msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// run runs an admin command and decodes its --json output into v.
func runJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	cmd := exec.Command(bins.relay, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("fleet-relay %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("fleet-relay %s: output %q: %v", strings.Join(args, " "), out, err)
	}
}

// api is a client of the relay's public API.
type api struct {
	t    *testing.T
	base string
	key  string
	c    *http.Client
}

func (a *api) do(method, path string, body any, out any) int {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.base+"/api/v1/public"+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.c.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			a.t.Fatalf("%s %s: %s: %v", method, path, b, err)
		}
	}
	if resp.StatusCode >= 300 {
		a.t.Logf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode
}
