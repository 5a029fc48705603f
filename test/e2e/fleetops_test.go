package e2e_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet/fleet/agent"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/fleetproc"
	"github.com/fleet/fleet/test/rig/minisign"
	"github.com/fleet/fleet/test/rig/pgtest"
)

// Fleet operations end to end (issue 28): gateways claimed with a claim
// token, agents updated by rollouts of signed releases (and bad releases
// rolled back or refused), and a reboot through a fake logind. The real
// fleet-relay and fleet-agent run as processes, on SQLite and on
// PostgreSQL. Secrets (claim and device tokens) go to the agents through
// their environment, never their argv.

// onStores runs f on SQLite and on a throwaway PostgreSQL, with the
// FLEET_DB environment of each.
func onStores(t *testing.T, f func(t *testing.T, env []string)) {
	t.Run("sqlite", func(t *testing.T) { f(t, []string{"FLEET_DB=" + filepath.Join(t.TempDir(), "fleet.db")}) })
	t.Run("postgres", func(t *testing.T) {
		srv, err := pgtest.Start()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() }) // after the database's own cleanup
		f(t, []string{"FLEET_DB=" + srv.CreateDB(t)})
	})
}

// workDir is t's directory: under FLEET_E2E_KEEP when set (kept after the
// test, to read the logs), else a temporary one.
func workDir(t *testing.T) string {
	keep := os.Getenv("FLEET_E2E_KEEP")
	if keep == "" {
		return t.TempDir()
	}
	dir := filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "-"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// serveRelay starts `fleet-relay serve` on the store of env and waits
// until it listens; it returns the relay's base URL.
func serveRelay(t *testing.T, dir string, env []string) (*fleetproc.Proc, string) {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	log := filepath.Join(dir, "relay.log")
	p := fleetproc.Start(t, "fleet-relay", log, env, bins.relay, "serve", "--listen", addr, "--rate-limit", "1000000",
		"--log-level", "info", "--agent-orphan-window", "5s")
	fleetproc.Eventually(t, 30*time.Second, func() string {
		if p.Exited() {
			t.Fatalf("fleet-relay exited; see %s", log)
		}
		if len(fleetproc.LogLines(t, log, "relay listening")) == 0 {
			return "relay not listening"
		}
		return ""
	})
	return p, "http://" + addr
}

// TestClaimGateways: a claim of two uses registers two gateways (their
// agents started with --serial and the claim token in FLEET_CLAIM), which
// come ONLINE with the claim's model and tags and keep their device token
// in their state directory (0600); a third gateway is refused with a clear
// error, exits non-zero and creates nothing; a claimed agent restarted
// without the claim reconnects with the token it kept.
func TestClaimGateways(t *testing.T) { onStores(t, testClaimGateways) }

func testClaimGateways(t *testing.T, env []string) {
	dir := workDir(t)
	ten := fleetproc.Provision(t, bins.relay, env, "Claims", 0)
	var claim struct{ ID, Token string }
	fleetproc.Admin(t, bins.relay, env, &claim, "claim", "create", "--org", ten.OrgID, "--model", "IG-500",
		"--tags", "line-3,hall-7", "--uses", "2")
	if claim.ID == "" || !strings.HasPrefix(claim.Token, "fleet_ct_") {
		t.Fatalf("claim create printed id %q and a token %d long, want an id and a fleet_ct_ token", claim.ID, len(claim.Token))
	}
	_, base := serveRelay(t, dir, env)
	api := fleetproc.NewAPI(t, base, ten.Key)
	claimEnv := []string{"FLEET_CLAIM=" + claim.Token}
	stateDir := func(i int) string { return filepath.Join(dir, fmt.Sprintf("state-%d", i)) }
	agentLog := func(i int) string { return filepath.Join(dir, fmt.Sprintf("agent-%d.log", i)) }
	start := func(i int, env []string) *fleetproc.Proc {
		args := append(fleetproc.AgentFlags(stateDir(i), base), "--serial", fmt.Sprintf("SN-CLAIM-%d", i), "--name", fmt.Sprintf("gw-%d", i))
		return fleetproc.Start(t, fmt.Sprintf("fleet-agent %d", i), agentLog(i), env, bins.agent, args...)
	}
	devices := func() []resource.Device {
		var l resource.List[resource.Device]
		if code := api.Do("GET", "/devices?limit=100", nil, &l); code != 200 {
			t.Fatalf("GET /devices: %d", code)
		}
		return l.Data
	}

	a0 := start(0, claimEnv)
	start(1, claimEnv)
	var ids []string
	fleetproc.Eventually(t, 30*time.Second, func() string {
		ds := devices()
		if len(ds) != 2 {
			return fmt.Sprintf("%d devices, want the 2 claimed", len(ds))
		}
		ids = ids[:0]
		for _, d := range ds {
			ids = append(ids, d.ID)
		}
		return ""
	})
	api.WaitStatus(ids, "ONLINE", 30*time.Second)
	serials := map[string]string{}
	for _, d := range devices() {
		serials[d.SerialNumber] = d.ID
		if d.Model != "IG-500" || !slices.Equal(d.Tags, []string{"hall-7", "line-3"}) {
			t.Errorf("claimed device %s: model %q tags %v, want IG-500 [hall-7 line-3]", d.SerialNumber, d.Model, d.Tags)
		}
		var ev resource.List[resource.Event]
		if code := api.Do("GET", "/devices/"+d.ID+"/events?type=device.claimed", nil, &ev); code != 200 || len(ev.Data) != 1 ||
			!strings.Contains(string(ev.Data[0].Data), claim.ID) || !strings.Contains(string(ev.Data[0].Data), d.SerialNumber) {
			t.Errorf("device %s: device.claimed events %d %+v, want one naming the claim and the serial", d.SerialNumber, code, ev.Data)
		}
	}
	if serials["SN-CLAIM-0"] == "" || serials["SN-CLAIM-1"] == "" {
		t.Fatalf("claimed serials %v", serials)
	}
	var tagged resource.List[resource.Device]
	if code := api.Do("GET", "/devices?tag=line-3&tag=hall-7", nil, &tagged); code != 200 || len(tagged.Data) != 2 {
		t.Errorf("GET /devices?tag=line-3&tag=hall-7: %d, %d devices, want 2", code, len(tagged.Data))
	}
	for i := range 2 {
		fi, err := os.Stat(filepath.Join(stateDir(i), agent.DeviceTokenFile))
		if err != nil {
			t.Fatalf("agent %d kept no device token: %v", i, err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("agent %d's %s is %v, want 0600", i, agent.DeviceTokenFile, fi.Mode().Perm())
		}
		b, _ := os.ReadFile(agentLog(i))
		if strings.Contains(string(b), claim.Token) {
			t.Errorf("agent %d logged its claim token", i)
		}
	}

	// The third gateway: refused, exits non-zero, nothing created.
	a2 := start(2, claimEnv)
	if !a2.Wait(30 * time.Second) {
		t.Fatal("the agent of a third gateway on a used-up claim is still running after 30s")
	}
	if code := a2.ExitCode(); code == 0 {
		t.Error("the agent refused its claim exited 0")
	}
	b, _ := os.ReadFile(agentLog(2))
	if out := strings.ToLower(string(b)); !strings.Contains(out, "claim") || !strings.Contains(out, "used") {
		t.Errorf("the refused agent does not say its claim is used up:\n%s", b)
	}
	if _, err := os.Stat(filepath.Join(stateDir(2), agent.DeviceTokenFile)); err == nil {
		t.Error("the refused agent keeps a device token")
	}
	if ds := devices(); len(ds) != 2 {
		t.Errorf("%d devices after the third claim, want still 2", len(ds))
	}
	var claims []map[string]any
	fleetproc.Admin(t, bins.relay, env, &claims, "claim", "list", "--org", ten.OrgID)
	if len(claims) != 1 || fmt.Sprint(claims[0]["used"]) != "2" || claims[0]["state"] != "used_up" {
		t.Errorf("claim list = %v, want one claim used 2 times, used_up", claims)
	}

	// Restarted without the claim: the kept token.
	a0.Kill()
	api.WaitStatus([]string{serials["SN-CLAIM-0"]}, "OFFLINE", 20*time.Second)
	start(0, nil)
	api.WaitStatus([]string{serials["SN-CLAIM-0"]}, "ONLINE", 30*time.Second)
	if ds := devices(); len(ds) != 2 {
		t.Errorf("%d devices after the restart, want still 2", len(ds))
	}
}

// releases builds and adds an organization's signed agent releases.
type releases struct {
	t   *testing.T
	env []string
	org string
	dir string
}

// add signs file with key and adds it as version for this machine's arch.
func (r releases) add(version, file string, key minisign.Key) {
	r.t.Helper()
	fleetproc.AddRelease(r.t, bins.relay, r.env, r.org, version, file, key)
}

// build builds fleet-agent stamped version in r's directory.
func (r releases) build(version string) string {
	r.t.Helper()
	out := filepath.Join(r.dir, "fleet-agent-"+version)
	if err := fleetproc.BuildAgent(out, version); err != nil {
		r.t.Fatal(err)
	}
	return out
}

// script writes a shell script release.
func (r releases) script(name, body string) string {
	r.t.Helper()
	p := filepath.Join(r.dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		r.t.Fatal(err)
	}
	return p
}

// gate is a reverse proxy in front of the relay for one agent: closed, it
// refuses the agent's websocket handshakes (503) and passes everything
// else (release downloads), so that the relay is unreachable for a new
// agent binary while the connection already up stays up.
type gate struct {
	srv    *httptest.Server
	closed atomic.Bool
}

func startGate(t *testing.T, relay string) *gate {
	t.Helper()
	u, err := url.Parse(relay)
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == protocol.Path && g.closed.Load() {
			http.Error(w, "the test's gate is closed", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(g.srv.Close)
	return g
}

// TestAgentRollouts updates real agents through rollouts. Three agents run
// from copies of fleet-agent built as 1.0.0 with no supervisor (the
// updater's guard brings the old binary back when a new one dies), holding
// the update key. Three bad releases are rolled out at once, one to each
// agent, with maxFailures 0: one that exits at once, one (a real 1.1.2)
// that never reaches the relay within healthFor (its agent's websocket
// handshakes are refused from the moment the rollout starts until the old
// binary is back), and a real 1.1.3 signed by another key. Each is rolled
// back or refused: the rollout stopped with a reason, the device
// rolled_back or failed with an error, ONLINE again on 1.0.0 (its binary
// on disk and its agentVersion). Then 1.1.0, signed with the key, is rolled
// out to all three in two waves: every copy on disk reports 1.1.0 with
// --version, every agentVersion is 1.1.0, the rollout completed with every
// device healthy.
func TestAgentRollouts(t *testing.T) { onStores(t, testAgentRollouts) }

func testAgentRollouts(t *testing.T, env []string) {
	const n = 3
	const healthFor = 10 * time.Second
	dir := workDir(t)
	ten := fleetproc.Provision(t, bins.relay, env, "Rollouts", n)
	rel := releases{t: t, env: env, org: ten.OrgID, dir: t.TempDir()}
	key, other := minisign.NewKey(t), minisign.NewKey(t)
	v100, v110, v112, v113 := rel.build("1.0.0"), rel.build("1.1.0"), rel.build("1.1.2"), rel.build("1.1.3")
	rel.add("1.1.0", v110, key)
	rel.add("1.1.1", rel.script("exits-at-once", "echo 'this release exits at once' >&2\nexit 3"), key)
	rel.add("1.1.2", v112, key)
	rel.add("1.1.3", v113, other)

	_, base := serveRelay(t, dir, env)
	api := fleetproc.NewAPI(t, base, ten.Key)
	unreachable := startGate(t, base) // agent 1's way to the relay
	bin := make([]string, n)
	ids := make([]string, n)
	for i, d := range ten.Devices {
		ids[i] = d.ID
		bin[i] = fleetproc.CopyAgent(t, v100, filepath.Join(dir, fmt.Sprintf("gw-%d", i)))
		relay := base
		if i == 1 {
			relay = unreachable.srv.URL
		}
		args := append(fleetproc.AgentFlags(filepath.Join(dir, fmt.Sprintf("state-%d", i)), relay), "--update-key", key.Pub,
			"--name", fmt.Sprintf("gw-%d", i))
		fleetproc.Start(t, fmt.Sprintf("fleet-agent %d", i), filepath.Join(dir, fmt.Sprintf("agent-%d.log", i)),
			[]string{"FLEET_TOKEN=" + d.Token}, bin[i], args...)
	}
	api.WaitStatus(ids, "ONLINE", 30*time.Second)
	for i, id := range ids {
		if v := api.AgentVersion(id); v != "1.0.0" {
			t.Fatalf("device %d agentVersion %q before any rollout, want 1.0.0", i, v)
		}
	}

	// The bad releases, one per device, at once.
	bad := []struct {
		version string
		states  []string
	}{
		{"1.1.1", []string{resource.RolloutDeviceRolledBack, resource.RolloutDeviceFailed}},
		{"1.1.2", []string{resource.RolloutDeviceRolledBack}},
		{"1.1.3", []string{resource.RolloutDeviceFailed}},
	}
	rollouts := make([]string, n)
	for i, b := range bad {
		rollouts[i] = api.CreateRollout(map[string]any{"version": b.version, "scope": map[string]any{"deviceIds": []string{ids[i]}},
			"maxFailures": 0, "healthFor": healthFor.String()})
	}
	// 1.1.2 never reaches the relay: agent 1's new websockets are
	// refused until its old binary is back (the new one, <binary>.new
	// while on trial, is gone).
	unreachable.closed.Store(true)
	trial := bin[1] + ".new"
	seen := false
	fleetproc.Eventually(t, 2*time.Minute, func() string {
		if _, err := os.Stat(trial); err == nil {
			seen = true
			return "agent 1 runs 1.1.2 on trial"
		}
		if !seen {
			r, _ := api.Rollout(rollouts[1])
			return fmt.Sprintf("agent 1 has not installed 1.1.2: rollout %s %v %+v", r.State, r.Counts, r.Devices)
		}
		unreachable.closed.Store(false)
		return ""
	})
	for i, b := range bad {
		r := api.WaitRollout(rollouts[i], resource.RolloutStopped, 2*time.Minute)
		if r.Reason == nil || *r.Reason == "" {
			t.Errorf("rollout of %s stopped without a reason", b.version)
		}
		if len(r.Devices) != 1 || !slices.Contains(b.states, r.Devices[0].State) || r.Devices[0].Error == nil || *r.Devices[0].Error == "" {
			t.Errorf("rollout of %s: devices %+v, want one %v with an error", b.version, r.Devices, b.states)
		} else {
			t.Logf("release %s on device %d: %s: %s (rollout stopped: %s)", b.version, i, r.Devices[0].State, *r.Devices[0].Error, *r.Reason)
		}
	}
	api.WaitStatus(ids, "ONLINE", time.Minute)
	for i, id := range ids {
		if v := fleetproc.AgentVersion(bin[i]); v != "1.0.0" {
			t.Errorf("agent %d's binary on disk reports %q after its bad release, want 1.0.0", i, v)
		}
		fleetproc.Eventually(t, 20*time.Second, func() string {
			if v := api.AgentVersion(id); v != "1.0.0" {
				return fmt.Sprintf("device %d agentVersion %q after its bad release, want 1.0.0", i, v)
			}
			return ""
		})
	}

	// The good release, to every device in two waves.
	id := api.CreateRollout(map[string]any{"version": "1.1.0", "scope": map[string]any{}, "waves": []int{34, 100},
		"maxFailures": 0, "healthFor": healthFor.String()})
	r := api.WaitRollout(id, resource.RolloutCompleted, 3*time.Minute)
	if r.Total != n || r.Counts[resource.RolloutDeviceHealthy] != n {
		t.Errorf("rollout of 1.1.0 completed with %d devices %v, want %d healthy", r.Total, r.Counts, n)
	}
	waves := map[int]int{}
	for _, d := range r.Devices {
		waves[d.Wave]++
		if d.State != resource.RolloutDeviceHealthy || d.FromVersion != "1.0.0" {
			t.Errorf("device %s: %s from %q, want healthy from 1.0.0", d.DeviceID, d.State, d.FromVersion)
		}
	}
	if waves[0] != 2 || waves[1] != 1 {
		t.Errorf("devices by wave %v, want 2 in the first (ceil(34%% of 3)) and 1 in the second", waves)
	}
	api.WaitStatus(ids, "ONLINE", 30*time.Second)
	for i, id := range ids {
		if v := fleetproc.AgentVersion(bin[i]); v != "1.1.0" {
			t.Errorf("agent %d's binary on disk reports %q, want 1.1.0", i, v)
		}
		if v := api.AgentVersion(id); v != "1.1.0" {
			t.Errorf("device %d agentVersion %q, want 1.1.0", i, v)
		}
	}
}
