package relay

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// TestMainRunsEveryPart runs the whole relay in process through Main, on
// port 0 with a temporary SQLite file, and reaches each of its parts as a
// user would: the API and /readyz, the panel, the metrics listener, the
// agents' endpoint, the alert engine (an agent's vpn_down event opens an
// alert) and the webhook sender (the alert reaches the organization's
// receiver as alert.opened). Close stops them all and releases both
// listeners.
func TestMainRunsEveryPart(t *testing.T) {
	rcv := newReceiver(t)
	db := filepath.Join(t.TempDir(), "relay.db")
	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")
	var key struct{ Key string }
	mustJSON(t, &key, "key", "create", "--db", db, "--org", org.ID, "--name", "ops", "--scopes", "devices:read,alerts:read")
	var dev struct{ ID, Token string }
	mustJSON(t, &dev, "device", "add", "--db", db, "--org", org.ID, "--name", "press", "--serial", "SN-1", "--model", "IG-500")
	mustJSON(t, &struct{}{}, "org", "set-alert-webhook", "--db", db, "--org", org.ID, "--url", rcv.srv.URL+"/alerts")

	m := NewMain(&strings.Builder{})
	if err := m.ParseFlags([]string{"--db", db, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--webhook-allow-private", "--webhook-ca", rcv.ca, "--webhook-backoff", "200ms"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			m.Close()
		}
	})
	base, metrics := "http://"+m.Addr(), "http://"+m.MetricsAddr()+"/metrics"

	if code, body := health(t, base+"/readyz"); code != 200 {
		t.Errorf("readyz: %d %s", code, body)
	}
	if code, body := get(t, base+"/api/v1/public/devices/"+dev.ID, key.Key); code != 200 || !strings.Contains(string(body), `"serialNumber":"SN-1"`) {
		t.Errorf("GET device: %d %s", code, body)
	}
	if code, body := health(t, base+"/panel/login"); code != 200 || !strings.Contains(body, "<form") {
		t.Errorf("panel sign-in page: %d", code)
	}
	if code, body := health(t, metrics); code != 200 || !strings.Contains(body, "fleet_relay_build_info") {
		t.Errorf("metrics: %d", code)
	}

	// An agent reports its VPN down: the alert engine opens vpn_down and
	// the webhook sender delivers alert.opened.
	_, send := dialAgent(t, m.Addr(), dev.Token)
	send(protocol.Message{Type: protocol.TypeHello, Hello: &protocol.Hello{AgentVersion: "test", Model: "IG-500", HeartbeatInterval: protocol.Duration{Duration: time.Minute}}})
	send(protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: []protocol.Record{{Seq: 1, Event: &protocol.Event{
		ID: ids.New(), Type: protocol.EventVPNDown, Severity: resource.SeverityError, Message: "tunnel down", CreatedAt: resource.T(time.Now())}}}}})
	var alerts struct{ Data []resource.Alert }
	eventually(t, 10*time.Second, func() bool {
		_, body := get(t, base+"/api/v1/public/alerts?deviceId="+dev.ID, key.Key)
		json.Unmarshal(body, &alerts)
		return len(alerts.Data) == 1
	})
	if a := alerts.Data[0]; a.State != resource.AlertActive || a.Message != "tunnel down" {
		t.Errorf("alert %+v, want an open vpn_down alert saying the agent's message", a)
	}
	eventually(t, 10*time.Second, func() bool {
		for _, d := range rcv.list() {
			if d.body["event"] == "alert.opened" {
				return true
			}
		}
		return false
	})

	closed = true
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, url := range []string{base + "/healthz", metrics} {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			t.Errorf("%s still answers after Close", url)
		}
	}
}
