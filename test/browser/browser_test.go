// Package browser_test is the panel's browser suite (docs/panel.md): it
// builds the relay, the agent and the webhook sink, starts the demo
// (deploy/demo/run.sh: the relay on a SQLite file, three simulated
// gateways, an OWNER), adds a VIEWER and a device named like markup with the
// admin CLI, stops one agent so that an alert opens, and runs suite.mjs
// (playwright-core driving Debian's headless chromium), failing with its
// output. It runs only with FLEET_BROWSER=1: `make test-browser` sets it
// after installing chromium and playwright-core, and `make test` runs that.
// Screenshots go to FLEET_SCREENSHOTS (`make panel-screenshots`:
// docs/panel/), else to a temporary folder.
package browser_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleet/fleet/test/rig/fleetproc"
	"github.com/fleet/fleet/test/rig/linewatch"
	"github.com/fleet/fleet/test/rig/minisign"
	"github.com/fleet/fleet/test/rig/oidcprovider"
	"github.com/fleet/fleet/test/rig/testnet"
)

const xssName = `<img src=x onerror=window.__xss=1>`

func TestBrowser(t *testing.T) {
	if os.Getenv("FLEET_BROWSER") != "1" {
		t.Skip("drives chromium only with FLEET_BROWSER=1: run make test-browser")
	}
	top := repoRoot(t)
	for _, f := range []string{"cloud/panel/static/vendor/htmx.min.js", "test/browser/node_modules/playwright-core/package.json"} {
		if _, err := os.Stat(filepath.Join(top, f)); err != nil {
			t.Fatalf("%s is missing: run make test-browser (it installs the front end and playwright-core)", f)
		}
	}
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is missing: make test-browser installs it (apt-get install chromium)")
	}
	bin := t.TempDir()
	gobuild(t, top, filepath.Join(bin, "fleet-relay"), "./cloud/cmd/fleet-relay")
	gobuild(t, top, filepath.Join(bin, "fleet-webhook-sink"), "./deploy/demo/cmd/fleet-webhook-sink")
	gobuild(t, top, filepath.Join(bin, "fleet-agent"), "./agent/cmd/fleet-agent")

	data := t.TempDir()
	listen, sink := testnet.FreeAddr(t), testnet.FreeAddr(t)
	demo := startDemo(t, top, bin, data, listen, sink)
	key := demo.Wait(t, regexp.MustCompile(`API key: (svc_sk_\S+)`), 3*time.Minute)[1]
	email := demo.Wait(t, regexp.MustCompile(`^    email: +(\S+)$`), time.Second)[1]
	password := demo.Wait(t, regexp.MustCompile(`^    password: +(\S+)$`), time.Second)[1]
	press := demo.Wait(t, regexp.MustCompile(`^    (\S+)  IG-500 "Press line 1"`), time.Second)[1]
	gate := demo.Wait(t, regexp.MustCompile(`^    (\S+)  IG-100 "Gatehouse" +\(agent pid (\d+)`), time.Second)

	db := filepath.Join(data, "relay.db")
	relay := filepath.Join(bin, "fleet-relay")
	var org struct{ ID string }
	orgs := []struct{ ID string }{}
	fleetproc.Admin(t, relay, nil, &orgs, "org", "list", "--db", db)
	org = orgs[0]
	fleetproc.Admin(t, relay, nil, nil, "device", "add", "--db", db, "--org", org.ID, "--name", xssName, "--serial", "XSS-1", "--model", "IG-100")
	viewerPassword := "viewer password 123"
	fleetproc.AdminInput(t, relay, nil, viewerPassword+"\n", nil, "user", "create", "--db", db, "--org", org.ID, "--email", "viewer@demo.example", "--role", "VIEWER", "--password-stdin")
	totpPassword := "totp password 123" // the two-factor steps' own user
	fleetproc.AdminInput(t, relay, nil, totpPassword+"\n", nil, "user", "create", "--db", db, "--org", org.ID, "--email", "totp@demo.example", "--role", "MEMBER", "--password-stdin")
	// [accounts] one email in two organizations with one password: in the
	// demo organization a temporary one (--temporary), in a second its own.
	accountsPassword := "accounts password 123"
	var second struct{ ID string }
	fleetproc.Admin(t, relay, nil, &second, "org", "create", "--db", db, "--name", "Second Org")
	fleetproc.AdminInput(t, relay, nil, accountsPassword+"\n", nil, "user", "create", "--db", db, "--org", org.ID, "--email", "two.orgs@demo.example", "--role", "MEMBER", "--password-stdin", "--temporary")
	fleetproc.AdminInput(t, relay, nil, accountsPassword+"\n", nil, "user", "create", "--db", db, "--org", second.ID, "--email", "two.orgs@demo.example", "--role", "OWNER", "--password-stdin")
	// [sso] a real OpenID provider on loopback (zitadel/oidc's example)
	// whose domain sso.example signs in to the demo organization.
	sso := oidcprovider.Start(t, oidcprovider.Config{ClientID: "fleet-demo", ClientSecret: "demo-client-secret-1",
		RedirectURIs: []string{"http://" + listen + "/panel/sso/callback"},
		Users:        []oidcprovider.User{{Username: "sam", Password: "sam's provider password", Email: "sam@sso.example", EmailVerified: true}}})
	fleetproc.AdminInput(t, relay, nil, "demo-client-secret-1\n", nil, "org", "set-oidc", "--db", db, "--org", org.ID, "--issuer", sso.Issuer,
		"--client-id", "fleet-demo", "--domains", "sso.example", "--default-role", "VIEWER", "--client-secret-stdin")

	// [forms] an IG-500 of the channel form steps' own (no agent): every
	// kind, changed only by those steps.
	var forms fleetproc.Device
	fleetproc.Admin(t, relay, nil, &forms, "device", "add", "--db", db, "--org", org.ID, "--name", "Forms bench", "--serial", "FORMS-1", "--model", "IG-500")

	// [charts] a gateway of its own whose host has no thermal sensor (an
	// empty --sys-root: no thermal zone, no hwmon), sampling every 2 s so
	// that its charts see new samples while a step watches.
	var probe struct{ ID, Token string }
	fleetproc.Admin(t, relay, nil, &probe, "device", "add", "--db", db, "--org", org.ID, "--name", "Charts probe", "--serial", "CHARTS-1", "--model", "IG-100", "--json")
	noSys, probeState := t.TempDir(), t.TempDir()
	fleetproc.Start(t, "charts probe agent", filepath.Join(data, "agent-charts.log"), []string{"FLEET_TOKEN=" + probe.Token}, filepath.Join(bin, "fleet-agent"),
		"--relay", "ws://"+listen, "--hw", "sim", "--model", "IG-100", "--name", "Charts probe", "--state-dir", probeState,
		"--heartbeat", "5s", "--metrics-interval", "2s", "--dev-root", "none", "--passthrough-listen", "none", "--sys-root", noSys)

	// A release of 9.9.0 (a few random bytes, signed with minisign as an
	// operator signs one) for the rollout pages; no agent of the demo is
	// in the rollout's scope.
	agentFile := filepath.Join(t.TempDir(), "fleet-agent")
	if err := os.WriteFile(agentFile, bytes.Repeat([]byte("not a real agent\n"), 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	sigFile, _ := minisign.NewKey(t).Sign(t, agentFile, "fleet-agent 9.9.0")
	fleetproc.Admin(t, relay, nil, nil, "release", "add", "--db", db, "--org", org.ID, "--version", "9.9.0", "--arch", "amd64", "--file", agentFile, "--sig", sigFile)

	// [live] a gateway of the live steps' own, whose agent the suite kills
	// (SIGKILL, FLEET_LIVE_AGENT_PID) with the fleet page open.
	var liveDev struct{ ID, Token string }
	fleetproc.Admin(t, relay, nil, &liveDev, "device", "add", "--db", db, "--org", org.ID, "--name", "Live gateway", "--serial", "LIVE-1", "--model", "IG-100")
	liveAgent := exec.Command(filepath.Join(bin, "fleet-agent"), "--relay", "ws://"+listen, "--hw", "sim", "--model", "IG-100", "--name", "Live gateway",
		"--state-dir", t.TempDir(), "--heartbeat", "5s", "--metrics-interval", "30s", "--dev-root", "none", "--passthrough-listen", "none")
	liveAgent.Env = append(os.Environ(), "FLEET_TOKEN="+liveDev.Token)
	liveLog, err := os.Create(filepath.Join(data, "agent-live.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer liveLog.Close()
	liveAgent.Stdout, liveAgent.Stderr = liveLog, liveLog
	if err := liveAgent.Start(); err != nil {
		t.Fatalf("start the live steps' agent: %v", err)
	}
	t.Cleanup(func() { liveAgent.Process.Kill(); liveAgent.Wait() })

	// The Gatehouse's agent stops: its device_offline alert opens after
	// three heartbeat intervals, while the suite signs in and looks around.
	pid, _ := strconv.Atoi(gate[2])
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("stop the Gatehouse agent (pid %d): %v", pid, err)
	}

	shots := os.Getenv("FLEET_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	node := exec.CommandContext(ctx, "node", "suite.mjs")
	node.Dir = filepath.Join(top, "test", "browser")
	node.Env = append(os.Environ(),
		"FLEET_BASE=http://"+listen, "FLEET_OWNER_EMAIL="+email, "FLEET_OWNER_PASSWORD="+password,
		"FLEET_VIEWER_EMAIL=viewer@demo.example", "FLEET_VIEWER_PASSWORD="+viewerPassword, "FLEET_ACCOUNTS_EMAIL=two.orgs@demo.example", "FLEET_ACCOUNTS_PASSWORD="+accountsPassword, "FLEET_API_KEY="+key,
		"FLEET_TOTP_EMAIL=totp@demo.example", "FLEET_TOTP_PASSWORD="+totpPassword,
		"FLEET_DEVICE="+press, "FLEET_OFFLINE_DEVICE="+gate[1], "FLEET_FORMS_DEVICE="+forms.ID, "FLEET_XSS_NAME="+xssName,
		"FLEET_SCREENSHOTS="+shots, "CHROMIUM="+chromium,
		"FLEET_SSO_EMAIL=sam@sso.example", "FLEET_SSO_USERNAME=sam", "FLEET_SSO_PASSWORD=sam's provider password", "FLEET_SSO_ORG="+org.ID,
		"FLEET_LIVE_DEVICE="+liveDev.ID, fmt.Sprintf("FLEET_LIVE_AGENT_PID=%d", liveAgent.Process.Pid), // [live]
		"FLEET_CHARTS_DEVICE="+probe.ID) // [charts]
	var out bytes.Buffer
	w := io.MultiWriter(&out, testWriter{t}) // one writer for both: exec then copies with one goroutine
	node.Stdout, node.Stderr = w, w
	node.WaitDelay = 10 * time.Second
	if err := node.Run(); err != nil {
		t.Fatalf("browser suite: %v\n%s\nscreenshots in %s; the relay's log:\n%s", err, out.String(), shots, tail(filepath.Join(data, "relay.log"), 30))
	}
	if !regexp.MustCompile(`(?m)^\d+ passed, 0 failed$`).Match(out.Bytes()) {
		t.Fatalf("browser suite did not report its steps:\n%s", out.String())
	}
	t.Logf("screenshots in %s", shots)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func gobuild(t *testing.T, dir, out, pkg string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// demo is deploy/demo/run.sh in its own process group, its output kept.
type demo struct {
	*linewatch.Lines
	done chan struct{}
}

func startDemo(t *testing.T, top, bin, data, listen, sink string) *demo {
	t.Helper()
	d := &demo{done: make(chan struct{})}
	d.Lines = linewatch.New("the demo", d.done)
	cmd := exec.Command("bash", filepath.Join(top, "deploy", "demo", "run.sh"))
	cmd.Dir = top
	cmd.Env = append(os.Environ(), "BIN="+bin, "DATA="+data, "LISTEN="+listen, "SINK_LISTEN="+sink, fmt.Sprintf("WATCH_PID=%d", os.Getpid()))
	// [small] the relay's metrics on an address of the test's own: make
	// run stops when METRICS_LISTEN (127.0.0.1:9464) is taken.
	cmd.Env = append(cmd.Env, "METRICS_LISTEN="+testnet.FreeAddr(t))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = d, d
	if err := cmd.Start(); err != nil {
		t.Fatalf("run.sh: %v", err)
	}
	go func() {
		cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-d.done:
		case <-time.After(20 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-d.done
		}
	})
	return d
}
