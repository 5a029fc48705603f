package relay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/dialects"
	"github.com/fleet/fleet/test/rig/fleetproc"
	"github.com/fleet/fleet/test/rig/linktest"
	"github.com/fleet/fleet/test/rig/pgtest"
)

// run runs the command line args as fleet-relay does, with nothing on
// standard input, and returns its exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return exitStatus(Run(ctx, args, strings.NewReader(""), stdout, stderr))
}

// exitStatus is the exit status of fleet-relay's main for Run's error.
func exitStatus(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	default:
		return 1
	}
}

// cli runs one admin command in process (its own store handle, as a
// separate process would have) and returns stdout, stderr and the status.
func cli(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// mustJSON runs a command with --json, expects success and decodes stdout.
func mustJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out, errOut, code := cli(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%v: %v in %q", args, err, out)
	}
}

// startMain runs serve in process on port 0 with a temp database.
func startMain(t testing.TB, db string, extra ...part) *Main {
	t.Helper()
	m := NewMain(io.Discard)
	m.parts = append(m.parts, extra...)
	if err := m.ParseFlags([]string{"--db", db, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--rate-limit", "100000"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func get(t *testing.T, url, key string) (int, []byte) {
	t.Helper()
	return apiCall(t, "GET", url, key, "")
}

// apiCall makes a request with key (and a JSON body unless "") and returns
// the status and body.
func apiCall(t *testing.T, method, url, key, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// caFile writes the certificate of an HTTPS test server to a PEM file in a
// temporary folder (for --webhook-ca) and returns its path.
func caFile(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return ca
}

// dialRelay connects to relay addr's agent endpoint as the device of token;
// the connection is closed at the end of the test.
func dialRelay(t *testing.T, addr, token string) *websocket.Conn {
	t.Helper()
	return linktest.MustDial(t, "http://"+addr, token)
}

func errorCode(b []byte) string {
	var e resource.ErrorBody
	json.Unmarshal(b, &e)
	return e.Error.Code
}

// pg is the PostgreSQL server of this test binary, started by the first
// test that needs it.
var pg pgtest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	pg.Close()
	os.Exit(code)
}

// databases returns a fresh database of each dialect: a SQLite file path
// and a PostgreSQL URL.
func databases(t *testing.T) map[string]string {
	return map[string]string{
		"sqlite":   filepath.Join(t.TempDir(), "relay.db"),
		"postgres": pg.Get(t).CreateDB(t),
	}
}

// TestAdminWhileServing runs the admin commands against the database of a
// running relay and checks their effect through the API, on each store.
func TestAdminWhileServing(t *testing.T) {
	for name, db := range databases(t) {
		t.Run(name, func(t *testing.T) { testAdminWhileServing(t, db) })
	}
}

func testAdminWhileServing(t *testing.T, db string) {
	m := startMain(t, db)
	base := "http://" + m.Addr() + "/api/v1/public"

	var org struct{ ID, Name, WebhookSecret string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")
	if org.ID == "" || org.Name != "Acme" || !strings.HasPrefix(org.WebhookSecret, "whsec_") {
		t.Fatalf("org create printed %+v", org)
	}
	var key struct {
		ID, Key, Name string
		Scopes        []string
		ExpiresAt     *string
	}
	mustJSON(t, &key, "key", "create", "--db", db, "--org", org.ID, "--name", "ci", "--scopes", "devices:read,alerts:read")
	if !strings.HasPrefix(key.Key, "svc_sk_"+key.ID+"_") || key.ExpiresAt == nil || strings.Join(key.Scopes, ",") != "devices:read,alerts:read" {
		t.Fatalf("key create printed %+v", key)
	}
	exp, _ := time.Parse(time.RFC3339, *key.ExpiresAt)
	if d := time.Until(exp); d < 89*24*time.Hour || d > 90*24*time.Hour {
		t.Errorf("default expiry in %v, want 90 days", d)
	}
	var dev struct{ ID, Token string }
	mustJSON(t, &dev, "device", "add", "--db", db, "--org", org.ID, "--name", "press 4", "--serial", "SN-1", "--model", "IG-500", "--location", "hall B")
	if dev.ID == "" || !strings.HasPrefix(dev.Token, "fleet_dt_") {
		t.Fatalf("device add printed %+v", dev)
	}

	code, body := get(t, base+"/devices", key.Key)
	var list resource.List[resource.Device]
	json.Unmarshal(body, &list)
	if code != 200 || len(list.Data) != 1 || list.Data[0].ID != dev.ID || list.Data[0].Location != "hall B" {
		t.Fatalf("GET /devices = %d %s", code, body)
	}

	// key list shows the key but never its secret, in JSON and for humans.
	out, _, code2 := cli(t, "key", "list", "--db", db, "--org", org.ID, "--json")
	_, secretPart, _ := strings.Cut(strings.TrimPrefix(key.Key, "svc_sk_"), "_")
	if code2 != 0 || !strings.Contains(out, key.ID) || strings.Contains(out, secretPart) || strings.Contains(out, `"key"`) {
		t.Errorf("key list --json = %s", out)
	}
	human, _, _ := cli(t, "key", "list", "--db", db, "--org", org.ID)
	if !strings.Contains(human, key.ID) || !strings.Contains(human, "active") || strings.Contains(human, secretPart) {
		t.Errorf("key list = %s", human)
	}

	// Revocation by the CLI is seen on the very next request.
	if _, errOut, code := cli(t, "key", "revoke", "--db", db, "--id", key.ID); code != 0 {
		t.Fatalf("key revoke: %s", errOut)
	}
	if code, body := get(t, base+"/devices", key.Key); code != 401 || errorCode(body) != cloud.EREVOKED {
		t.Errorf("after revoke: %d %s", code, body)
	}
	human, _, _ = cli(t, "key", "list", "--db", db, "--org", org.ID)
	if !strings.Contains(human, "revoked") {
		t.Errorf("key list after revoke = %s", human)
	}

	// A never-expiring key.
	var forever struct {
		Key       string
		ExpiresAt *string
	}
	mustJSON(t, &forever, "key", "create", "--db", db, "--org", org.ID, "--name", "forever", "--scopes", "devices:read", "--expires", "never")
	if forever.ExpiresAt != nil {
		t.Errorf("--expires never gave expiresAt %v", *forever.ExpiresAt)
	}
	if code, _ := get(t, base+"/devices/"+dev.ID, forever.Key); code != 200 {
		t.Errorf("GET device with new key: %d", code)
	}

	// The agent endpoint is mounted: a request without a device token is
	// refused, not unknown.
	if resp, err := http.Get("http://" + m.Addr() + protocol.Path); err != nil || resp.StatusCode != 401 {
		t.Errorf("agent endpoint without a token: %v %v", resp.Status, err)
	}

	// org list and device list.
	var orgs []struct{ ID, Name string }
	mustJSON(t, &orgs, "org", "list", "--db", db)
	if len(orgs) != 1 || orgs[0].ID != org.ID || orgs[0].Name != "Acme" {
		t.Errorf("org list = %+v", orgs)
	}
	var devices []resource.Device
	mustJSON(t, &devices, "device", "list", "--db", db, "--org", org.ID)
	if len(devices) != 1 || devices[0].ID != dev.ID || devices[0].Model != "IG-500" {
		t.Errorf("device list = %+v", devices)
	}
	if out, _, _ := cli(t, "device", "list", "--db", db, "--org", org.ID); strings.Contains(out, dev.Token) || !strings.Contains(out, "press 4") {
		t.Errorf("device list = %s", out)
	}

	// device revoke.
	var rev struct{ ID, RevokedAt string }
	mustJSON(t, &rev, "device", "revoke", "--db", db, "--id", dev.ID)
	if rev.ID != dev.ID || rev.RevokedAt == "" {
		t.Errorf("device revoke printed %+v", rev)
	}
}

func TestAdminErrors(t *testing.T) {
	db := filepath.Join(t.TempDir(), "relay.db")
	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"org", "create", "--db", db}, 2, "--name is required"},
		{[]string{"key", "create", "--db", db, "--org", org.ID, "--name", "k", "--scopes", "devices:read", "--expires", "400d"}, 2, "1d..365d"},
		{[]string{"key", "create", "--db", db, "--org", org.ID, "--name", "k", "--scopes", "devices:root"}, 2, "unknown scope"},
		{[]string{"key", "create", "--db", db, "--org", "nosuchorg", "--name", "k", "--scopes", "devices:read"}, 1, "not found"},
		{[]string{"device", "add", "--db", db, "--org", org.ID, "--name", "d", "--serial", "S", "--model", "IG-9000"}, 1, "IG-100, IG-300, IG-500"},
		{[]string{"key", "revoke", "--db", db, "--id", "nosuchkey"}, 1, "not found"},
		{[]string{"device", "revoke", "--db", db, "--id", "nosuchdevice"}, 1, "not found"},
		{[]string{"key", "list", "--db", db, "--org", org.ID, "stray"}, 2, "unexpected argument"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"key", "list", "--db", db + ".typo", "--org", org.ID}, 1, "does not exist"},
		{[]string{"device", "add", "--db", db, "--org", org.ID, "--name", "bad\x07name", "--serial", "S", "--model", "IG-100"}, 1, "printable"},
		{[]string{"serve", "--db", db, "--rate-limit", "0"}, 2, "--rate-limit"},
		{[]string{"serve", "--db", db, "--tls-cert", "x.pem"}, 2, "--tls-key"},
		{[]string{"serve", "--db", db, "--trusted-proxies", "10.0.0.5,haproxy"}, 2, `--trusted-proxies: want IP addresses or CIDR ranges, comma-separated: net.ParseIP failed for "haproxy"`},
	} {
		_, errOut, code := cli(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}

func TestFlagsFromEnvironment(t *testing.T) {
	db := filepath.Join(t.TempDir(), "env.db")
	t.Setenv("FLEET_DB", db)
	t.Setenv("FLEET_RATE_LIMIT", "42")
	t.Setenv("FLEET_RETENTION", "48h")
	t.Setenv("FLEET_DEVICE_INGEST_LIMIT", "500")
	t.Setenv("FLEET_PUBLIC_URL", "https://fleet.example.com/")
	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--name", "from env")
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("FLEET_DB not used: %v", err)
	}
	m := NewMain(io.Discard)
	if err := m.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	if m.Config.DB != db || m.Config.RateLimit != 42 || m.Config.Retention != 48*time.Hour ||
		m.Config.Agent.Quota != (agentlink.Quota{Items: 500, Bytes: agentlink.DefaultQuota.Bytes}) || m.Config.Notify.PublicURL != "https://fleet.example.com" {
		t.Errorf("config from env = %+v", m.Config)
	}
	// The command line wins over the environment.
	m = NewMain(io.Discard)
	if err := m.ParseFlags([]string{"--rate-limit", "7"}); err != nil || m.Config.RateLimit != 7 {
		t.Errorf("flag over env: %d, %v", m.Config.RateLimit, err)
	}
}

// TestGracefulShutdownFinishesInFlight closes the relay while a request is
// being served: the request completes, new connections are refused.
func TestGracefulShutdownFinishesInFlight(t *testing.T) {
	db := filepath.Join(t.TempDir(), "relay.db")
	started := make(chan struct{})
	slow := part{name: "slow", start: func(ctx context.Context, mux *http.ServeMux) (func(context.Context) error, error) {
		mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
			close(started)
			time.Sleep(300 * time.Millisecond)
			io.WriteString(w, "done")
		})
		return nil, nil
	}}
	m := startMain(t, db, slow)
	addr := m.Addr()
	var wg sync.WaitGroup
	wg.Add(1)
	var status int
	var body string
	go func() {
		defer wg.Done()
		resp, err := http.Get("http://" + addr + "/slow")
		if err != nil {
			t.Error(err)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		status, body = resp.StatusCode, string(b)
	}()
	<-started
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if status != 200 || body != "done" {
		t.Errorf("in-flight request ended %d %q", status, body)
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Error("relay still accepts connections after Close")
	}
}

// relayPkg is fleet-relay's command (its main over this package) and
// agentPkg fleet-agent's, for the tests that run the real binaries.
const (
	relayPkg = "../cmd/fleet-relay"
	agentPkg = "../../agent/cmd/fleet-agent"
)

// goBuild builds the command at pkg (relative to this package) into dir
// and returns the binary's path.
func goBuild(t *testing.T, dir, pkg string) string {
	t.Helper()
	abs, err := filepath.Abs(pkg)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(abs))
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// TestBinary builds fleet-relay and runs it as a real process: serve with
// a bad flag refused, serve on a temp database, admin commands of separate
// processes on the same file, SIGTERM for a clean exit.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := goBuild(t, dir, relayPkg)
	// A flag the relay cannot run with: exit 2 naming it, before the
	// database opens.
	bad := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--webhook-timeout", "0s")
	bad.Env = append(os.Environ(), "FLEET_DB="+filepath.Join(dir, "never.db"))
	out, err := bad.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "--webhook-timeout") {
		t.Errorf("serve --webhook-timeout 0s: %v, %q; want exit 2 naming the flag", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "never.db")); err == nil {
		t.Error("serve with a bad flag made its database")
	}
	db := filepath.Join(dir, "relay.db")
	serve := exec.Command(bin, "serve", "--listen", "127.0.0.1:0")
	serve.Env = append(os.Environ(), "FLEET_DB="+db)
	stderr, _ := serve.StderrPipe()
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer serve.Process.Kill()
	logs := bufio.NewScanner(stderr)
	var addr string
	for logs.Scan() {
		var line struct{ Msg, Addr string }
		json.Unmarshal(logs.Bytes(), &line)
		if line.Msg == "relay listening" {
			addr = line.Addr
			break
		}
	}
	if addr == "" {
		t.Fatal("no 'relay listening' log line")
	}
	rest := make(chan string, 1)
	go func() {
		var b strings.Builder
		for logs.Scan() {
			b.WriteString(logs.Text() + "\n")
		}
		rest <- b.String()
	}()
	admin := fleetproc.AdminOn(t, bin, db)
	var org struct{ ID string }
	admin(&org, "org", "create", "--name", "Acme")
	var key struct{ Key string }
	admin(&key, "key", "create", "--org", org.ID, "--name", "k", "--scopes", "devices:read")
	var dev struct{ ID string }
	admin(&dev, "device", "add", "--org", org.ID, "--name", "gw", "--serial", "S1", "--model", "IG-100")
	// The audit log reads from another process: whatever the admin
	// commands above recorded is the CLI's.
	var recs []cloud.AuditRecord
	admin(&recs, "audit", "list", "--org", org.ID, "--since", "1h")
	for _, r := range recs {
		if r.Actor.Kind != cloud.ActorCLI || r.At.Before(time.Now().Add(-time.Hour)) {
			t.Errorf("audit record of the admin commands: %+v", r)
		}
	}
	code, body := get(t, "http://"+addr+"/api/v1/public/devices/"+dev.ID, key.Key)
	if code != 200 || !strings.Contains(string(body), `"model":"IG-100"`) {
		t.Fatalf("GET device = %d %s", code, body)
	}
	serve.Process.Signal(syscall.SIGTERM)
	// The log is read to its end (the process closed it by exiting) before
	// Wait, which closes the pipe and would lose the last lines.
	var logText string
	select {
	case logText = <-rest:
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not exit after SIGTERM")
	}
	if err := serve.Wait(); err != nil {
		t.Errorf("serve exited with %v after SIGTERM", err)
	}
	if !strings.Contains(logText, `"relay stopped"`) {
		t.Errorf("no 'relay stopped' in logs:\n%s", logText)
	}
	if strings.Contains(logText, key.Key) || strings.Contains(logText, "svc_sk_") {
		t.Errorf("a key appears in the logs")
	}
}

// TestHelp checks that -h prints the flags and exits 0.
func TestHelp(t *testing.T) {
	_, errOut, code := cli(t, "key", "create", "-h")
	if code != 0 || !strings.Contains(errOut, "-scopes") || !strings.Contains(errOut, "-expires") {
		t.Errorf("key create -h: exit %d, %q", code, errOut)
	}
}

// TestServeRunsRetention starts serve on a database holding an old and a
// recent event: the sweep removes the old one.
func TestServeRunsRetention(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "relay.db")
	// Open beside the relay, as another process would, to count the rows.
	s := dialects.SQLiteAt(t, path, nil)
	org := storetest.Org(t, s.Store, "acme")
	_, token := storetest.Device(t, s.Store, cloud.NewDevice{OrgID: org.ID, Name: "gw", SerialNumber: "S", Model: "IG-100"})
	dev := storetest.Auth(t, s.Agent, token)
	old := resource.T(time.Now().Add(-49 * time.Hour))
	events := storetest.Events(t, s.Agent, dev, resource.Event{Type: "agent.started", CreatedAt: old}, resource.Event{Type: "agent.started"})
	metrics := storetest.Metrics(t, s.Agent, dev, resource.MetricSample{CapturedAt: old}, resource.MetricSample{CapturedAt: resource.T(time.Now())})
	if len(events) != 2 || len(metrics) != 2 {
		t.Fatalf("stored %d events and %d metrics, want 2 and 2", len(events), len(metrics))
	}

	m := NewMain(io.Discard)
	if err := m.ParseFlags([]string{"--db", path, "--listen", "127.0.0.1:0", "--retention", "48h"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var events, metrics int
		dialects.QueryRow(t, s.Store, `SELECT COUNT(*) FROM events`, nil, &events)
		dialects.QueryRow(t, s.Store, `SELECT COUNT(*) FROM metrics`, nil, &metrics)
		if events == 1 && metrics == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the sweep: %d events and %d metrics, want 1 and 1", events, metrics)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
