package e2e_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/fleetproc"
	"github.com/fleet/fleet/test/rig/pgtest"
)

// outage is how long the database is away in TestPostgresOutage: shorter
// than the 30 s of the issue to keep the test short; nothing in the relay
// depends on the length (agents retry with backoff, the pool and the
// listener reconnect, the sweeper's deadlines pass either way).
const outage = 10 * time.Second

// TestPostgresOutage takes the database of a relay serving three real
// agents away and back: meanwhile the API answers 503 service_unavailable
// in the error envelope (with Retry-After) and /readyz 503, the agents keep
// what they could not deliver in their spools, and afterwards everything
// resumes by itself: every agent ONLINE again and every sample captured
// before, during and after the outage stored exactly once, in order.
func TestPostgresOutage(t *testing.T) {
	srv, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dir := t.TempDir()
	env := []string{"FLEET_DB=" + srv.CreateDB(t)}
	ten := fleetproc.Provision(t, bins.relay, env, "Outage", 3)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	relayLog := filepath.Join(dir, "relay.log")
	relay := fleetproc.Start(t, "fleet-relay", relayLog, env, bins.relay, "serve", "--listen", addr, "--rate-limit", "1000000",
		"--agent-orphan-window", "5s", "--log-level", "info")
	fleetproc.Eventually(t, 30*time.Second, func() string {
		if len(fleetproc.LogLines(t, relayLog, "relay listening")) == 0 {
			return "relay not listening"
		}
		return ""
	})
	base := "http://" + addr
	api := fleetproc.NewAPI(t, base, ten.Key)
	var ids []string
	for i, d := range ten.Devices {
		fleetproc.Start(t, fmt.Sprintf("fleet-agent %d", i), filepath.Join(dir, fmt.Sprintf("agent-%d.log", i)), nil, bins.agent,
			fleetproc.AgentArgs(d.Token, filepath.Join(dir, fmt.Sprintf("state-%d", i)), base)...)
		ids = append(ids, d.ID)
	}
	api.WaitStatus(ids, "ONLINE", 30*time.Second)
	from := time.Now().Add(-time.Second)
	time.Sleep(3 * time.Second)

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	fleetproc.Eventually(t, 10*time.Second, func() string {
		code, body, retry := get(t, base+"/api/v1/public/devices", ten.Key)
		var e resource.ErrorBody
		if code != 503 || json.Unmarshal(body, &e) != nil || e.Error.Code != "service_unavailable" || e.Error.Message == "" || retry == "" {
			return fmt.Sprintf("GET /devices during the outage: %d %s (Retry-After %q)", code, body, retry)
		}
		return ""
	})
	if code, body, _ := get(t, base+"/readyz", ""); code != 503 {
		t.Errorf("/readyz during the outage: %d %s", code, body)
	}
	time.Sleep(outage - time.Since(down))
	if relay.Exited() {
		t.Fatal("the relay exited during the outage")
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("database back after %s", time.Since(down).Round(time.Second))

	fleetproc.Eventually(t, 30*time.Second, func() string {
		if code, body, _ := get(t, base+"/readyz", ""); code != 200 {
			return fmt.Sprintf("/readyz after the outage: %d %s", code, body)
		}
		return ""
	})
	api.WaitStatus(ids, "ONLINE", 60*time.Second)
	time.Sleep(3 * time.Second)
	cutoff := time.Now().Add(-2 * time.Second)
	for i, id := range ids {
		n := fleetproc.CheckSamples(t, api, id, filepath.Join(dir, fmt.Sprintf("agent-%d.log", i)), from, cutoff, 0)
		if want := int(cutoff.Sub(from)/time.Second) - 3; n < want {
			t.Errorf("device %d: %d samples captured across the outage, want about one a second (%d)", i, n, want)
		}
	}
}

// get returns the status, body and Retry-After of GET url (with key when
// not "").
func get(t *testing.T, url, key string) (int, []byte, string) {
	req, _ := http.NewRequest("GET", url, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, []byte(err.Error()), ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header.Get("Retry-After")
}
