package cluster_test

import (
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/fleet/fleet/test/rig/fleetproc"
	"github.com/fleet/fleet/test/rig/haproxytest"
)

// haproxyCfg is the configuration the project ships.
const haproxyCfg = "../../deploy/haproxy/haproxy.cfg"

// TestHAProxy runs the shipped HAProxy configuration in front of three
// real relays on one store, with agents that know only HAProxy's address:
// health checks on /readyz take a draining relay out before it closes its
// agents, and a killed one at once; agents' websockets pass through and
// are balanced over the relays; API requests (GET) are answered all along
// (a refused or dropped connection is retried on another relay); a relay
// restarted comes back UP; every sample is stored exactly once.
func TestHAProxy(t *testing.T) {
	const n = 6
	dir := t.TempDir()
	env := []string{"FLEET_DB=" + filepath.Join(dir, "fleet.db")}
	tenant := fleetproc.Provision(t, bins.Relay, env, "Balanced", n)
	var relays []*relay
	var addrs []string
	for _, name := range []string{"relay1", "relay2", "relay3"} {
		r := startRelay(t, dir, name, env, "--drain-delay", "3s", "--trusted-proxies", "127.0.0.1")
		relays = append(relays, r)
		addrs = append(addrs, r.Addr)
	}
	hp, lb := balance(t, addrs, 10*time.Second)
	api := fleetproc.NewAPI(t, lb, tenant.Key)

	start := time.Now().Add(-time.Second)
	agents, ids := startAgents(t, dir, tenant.Devices, lb)
	api.WaitStatus(ids, "ONLINE", 20*time.Second)
	for _, r := range relays {
		if r.onlineCount(t) == 0 {
			t.Errorf("%s holds no agent: websockets not balanced", r.Name)
		}
	}
	// API requests are balanced too.
	for range 30 {
		if code := api.Do("GET", "/devices?limit=25", nil, nil); code != 200 {
			t.Fatalf("GET /devices through HAProxy: %d", code)
		}
	}
	// The access log is written in batches (every 200 ms).
	for _, r := range relays {
		fleetproc.Eventually(t, 5*time.Second, func() string {
			if len(fleetproc.LogLines(t, r.Log, "request")) == 0 {
				return r.Name + " answered no API request"
			}
			return ""
		})
	}

	// A client polling the API through HAProxy all along.
	poll := startPoller(t, lb, tenant.Key, 20*time.Millisecond)
	time.Sleep(2 * time.Second)

	// SIGTERM: HAProxy sees /readyz turn 503 and takes relay1 out while it
	// still serves (drain delay 3s); then relay1 closes its agents (1012),
	// which come back through HAProxy to the other two.
	r1 := relays[0]
	before := r1.onlineCount(t)
	r1.Terminate()
	waitStates(t, hp, map[string]string{"relay1": "DOWN"}, 3*time.Second)
	if r1.Exited() {
		t.Fatal("relay1 exited before HAProxy took it out")
	}
	if !r1.Wait(20 * time.Second) {
		t.Fatal("relay1 did not exit after its drain")
	}
	api.WaitStatus(ids, "ONLINE", 20*time.Second)
	if r1.onlineCount(t) != before {
		t.Error("an agent reconnected to the draining relay1")
	}
	fleetproc.Eventually(t, 20*time.Second, func() string {
		if moved := relays[1].onlineCount(t) + relays[2].onlineCount(t) - (n - before); moved < before {
			return "agents moved from relay1 to relay2 and relay3: " + itoa(moved) + " of " + itoa(before)
		}
		return ""
	})

	// kill -9: relay2 vanishes; HAProxy marks it DOWN, its agents move.
	relays[1].Kill()
	waitStates(t, hp, map[string]string{"relay2": "DOWN"}, 5*time.Second)
	api.WaitStatus(ids, "ONLINE", 30*time.Second)

	// relay1 restarted: UP again, and it takes new agents.
	r1.restart(t)
	waitStates(t, hp, map[string]string{"relay1": "UP"}, 10*time.Second)
	time.Sleep(3 * time.Second)
	poll.check(t, "during the drain and the kill")

	cutoff := time.Now().Add(-time.Second)
	for _, ag := range agents {
		got := fleetproc.CheckSamples(t, api, ag.dev.ID, ag.Log, start, cutoff, 0)
		if got < 5 {
			t.Errorf("%s captured only %d samples", ag.Name, got)
		}
	}
}

// TestHAProxyClientAddresses: behind the shipped HAProxy configuration, a
// relay told to trust it (--trusted-proxies) counts unauthenticated
// requests per client address, as it does without a balancer: the client
// that used up its budget gets 429, another client behind the same HAProxy
// still gets its 401, and neither a client that writes the other's
// address into X-Forwarded-For nor one that connects to the relay directly
// with that header is taken for it. The access log names each client.
func TestHAProxyClientAddresses(t *testing.T) {
	dir := t.TempDir()
	env := []string{"FLEET_DB=" + filepath.Join(dir, "fleet.db")}
	r := startRelay(t, dir, "relay1", env, "--rate-limit", "3", "--trusted-proxies", "127.0.0.1")
	_, lb := balance(t, []string{r.Addr}, 10*time.Second)

	// get sends an unauthenticated GET /devices from the loopback address
	// src to base and returns the status.
	get := func(src, base, forwardedFor string) int {
		t.Helper()
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).DialContext,
		}}
		defer c.CloseIdleConnections()
		req, err := http.NewRequest("GET", base+"/api/v1/public/devices", nil)
		if err != nil {
			t.Fatal(err)
		}
		if forwardedFor != "" {
			req.Header.Set("X-Forwarded-For", forwardedFor)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET from %s: %v", src, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 3 {
		if code := get("127.0.0.2", lb, ""); code != http.StatusUnauthorized {
			t.Fatalf("client 127.0.0.2, request %d: %d, want 401", i+1, code)
		}
	}
	if code := get("127.0.0.2", lb, ""); code != http.StatusTooManyRequests {
		t.Fatalf("client 127.0.0.2 after its budget: %d, want 429", code)
	}
	if code := get("127.0.0.3", lb, ""); code != http.StatusUnauthorized {
		t.Errorf("client 127.0.0.3 behind the same HAProxy: %d, want 401 (its own budget)", code)
	}
	if code := get("127.0.0.4", lb, "127.0.0.3"); code != http.StatusUnauthorized {
		t.Errorf("client 127.0.0.4 forwarding for 127.0.0.3: %d, want 401", code)
	}
	// Straight to the relay, 127.0.0.5 is no trusted proxy: its header is
	// not believed, so it does not pass for 127.0.0.2 (whose budget is
	// spent).
	if code := get("127.0.0.5", r.URL(), "127.0.0.2"); code != http.StatusUnauthorized {
		t.Errorf("127.0.0.5 straight to the relay, forwarding for 127.0.0.2: %d, want 401", code)
	}
	// Refused unauthenticated, each client has a line of its own
	// ("request refused", then only counted in the minute's summary).
	want := map[string]int{"127.0.0.2": 1, "127.0.0.3": 1, "127.0.0.4": 1, "127.0.0.5": 1}
	fleetproc.Eventually(t, 5*time.Second, func() string { // the access log is written in batches
		got := map[string]int{}
		for _, l := range fleetproc.LogLines(t, r.Log, "request refused") {
			got[fmt.Sprint(l["remote"])]++
		}
		if !maps.Equal(got, want) {
			return fmt.Sprintf("access log's remote addresses: %v, want %v", got, want)
		}
		return ""
	})
}

// TestHAProxyConfig checks what the shipped file promises that the test
// above cannot wait for: websocket tunnels outlive the HTTP timeouts by
// far, and every relay is health-checked on /readyz.
func TestHAProxyConfig(t *testing.T) {
	b, err := os.ReadFile(haproxyCfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(b)
	for _, want := range []string{
		`(?m)^\s+timeout tunnel (1h|[1-9][0-9]*m)\b`,
		`(?m)^\s+option httpchk$`,
		`(?m)^\s+http-check send meth GET uri /readyz\b`,
		`(?m)^\s+http-check expect status 200$`,
		`(?m)^\s+default-server check\b`,
		`(?m)^\s+option redispatch\b`,
		`(?m)^\s+balance leastconn$`,
		// The relays keep the access log; HAProxy logs the abnormal.
		`(?m)^\s+option dontlog-normal$`,
		// The client's address, for relays run with --trusted-proxies.
		`(?m)^\s+option forwardfor$`,
	} {
		if !regexp.MustCompile(want).MatchString(cfg) {
			t.Errorf("haproxy.cfg lacks %s", want)
		}
	}
}

// waitStates waits until HAProxy reports each named server in its state.
// balance runs the shipped HAProxy configuration in front of the relays
// at addrs (relay1, relay2, ... in its stats) and waits up to d until it
// sees them all UP; it returns HAProxy and its URL.
func balance(t *testing.T, addrs []string, d time.Duration) (*haproxytest.Proxy, string) {
	t.Helper()
	hp := haproxytest.Start(t, haproxyCfg, addrs)
	up := map[string]string{}
	for i := range addrs {
		up[fmt.Sprintf("relay%d", i+1)] = "UP"
	}
	waitStates(t, hp, up, d)
	return hp, "http://" + hp.Addr
}

func waitStates(t *testing.T, hp *haproxytest.Proxy, want map[string]string, d time.Duration) {
	t.Helper()
	fleetproc.Eventually(t, d, func() string {
		got := hp.States(t)
		for name, w := range want {
			if got[name] != w {
				return "HAProxy sees " + name + " " + got[name] + ", want " + w
			}
		}
		return ""
	})
}
