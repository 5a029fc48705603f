package e2e_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/hw/modbus/modbustest"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/fleetproc"
	"github.com/fleet/fleet/test/rig/mailpit"
	"github.com/fleet/fleet/test/rig/pgtest"
	"github.com/fleet/fleet/test/rig/ptytest"
)

// TestAlertRulesEndToEnd is issue 27's end-to-end test, on SQLite and on
// PostgreSQL: the real fleet-relay and fleet-agent as processes, a Modbus
// slave (hw/modbus/modbustest) on a pty read by the agent as rs485-1's
// point "temp", a real SMTP server requiring STARTTLS (Mailpit) and an
// HTTPS receiver for the chat (slack) and signed webhook channels. A rule
// on the point, made through the public API, notifies both channels made
// with `fleet-relay notify add`:
//   - the slave's value crosses the threshold: one ACTIVE alert, one e-mail
//     and one chat message naming the device, the rule, the value and the
//     threshold, linking to the alert in the panel;
//   - back under `clear`: the alert is resolved (and says so to both);
//   - under a silence: the alert opens and is listed, nobody is told;
//   - the rule disabled: nothing opens; enabled and deleted: its alert is
//     resolved;
//   - the preview of the rule over the last hour counts the crossings the
//     test made;
//   - the SMTP server down when an alert opens, the relay killed with
//     SIGKILL before it could send, both back: the e-mail arrives exactly
//     once.
func TestAlertRulesEndToEnd(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		testAlertRules(t, []string{"FLEET_DB=" + filepath.Join(t.TempDir(), "fleet.db")})
	})
	t.Run("postgres", func(t *testing.T) {
		srv, err := pgtest.Start()
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		testAlertRules(t, []string{"FLEET_DB=" + srv.CreateDB(t)})
	})
}

func testAlertRules(t *testing.T, dbEnv []string) {
	dir := t.TempDir()
	caFile, certFile, keyFile := selfSigned(t, dir)
	mail := mailpit.Start(t, mailpit.Options{CertFile: certFile, KeyFile: keyFile, RequireTLS: true})
	chat := startChatReceiver(t)

	ten := fleetproc.Provision(t, bins.relay, dbEnv, "Alerts", 1)
	chat.secret = ten.WebhookSecret
	dev := ten.Devices[0]
	var mailCh, chatCh, hookCh struct{ ID string }
	fleetproc.Admin(t, bins.relay, dbEnv, &mailCh, "notify", "add", "--org", ten.OrgID, "--name", "Ops mail", "--kind", "email",
		"--target", "ops@example.com", "--min-severity", "WARNING")
	fleetproc.Admin(t, bins.relay, dbEnv, &chatCh, "notify", "add", "--org", ten.OrgID, "--name", "Ops chat", "--kind", "slack",
		"--target", chat.URL+"/chat")
	fleetproc.Admin(t, bins.relay, dbEnv, &hookCh, "notify", "add", "--org", ten.OrgID, "--name", "Pager", "--kind", "webhook",
		"--target", chat.URL+"/hook", "--min-severity", "CRITICAL") // the rule is ERROR: never sent
	if mailCh.ID == "" || chatCh.ID == "" || hookCh.ID == "" {
		t.Fatalf("notify add printed no ids: %q %q %q", mailCh.ID, chatCh.ID, hookCh.ID)
	}

	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	relayLog := filepath.Join(dir, "relay.log")
	relayEnv := append(slicesClone(dbEnv), "FLEET_SMTP_URL=smtp://fleet:s3cret-pass@"+mail.SMTPAddr(), "SSL_CERT_FILE="+caFile)
	starts := 0
	startRelay := func() *fleetproc.Proc {
		starts++
		p := fleetproc.Start(t, "fleet-relay", relayLog, relayEnv, bins.relay, "serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
			"--rate-limit", "1000000", "--log-level", "info", "--agent-orphan-window", "5s",
			"--webhook-ca", chat.CAFile, "--webhook-allow-private", "--webhook-backoff", "1s,5s,10s,30s,60s",
			"--smtp-from", "fleet@e2e.example", "--public-url", "https://fleet.e2e.example")
		want := starts
		fleetproc.Eventually(t, 30*time.Second, func() string {
			if len(fleetproc.LogLines(t, relayLog, "relay listening")) < want {
				return "relay not listening"
			}
			return ""
		})
		return p
	}
	relay := startRelay()
	api := fleetproc.NewAPI(t, base, ten.Key)

	// The Modbus slave on a pty, and the agent reading it.
	sim := modbustest.New(modbustest.Options{IDs: []int{7}})
	sim.SetHolding(7, 0, 50)
	rsPath := ptytest.Serve(t, func(ctx context.Context, f *os.File) { sim.Serve(ctx, modbustest.FileLine{F: f}) })
	agentLog := filepath.Join(dir, "agent.log")
	fleetproc.Start(t, "fleet-agent", agentLog, nil, bins.agent, "--relay", base, "--token", dev.Token, "--hw", "linux",
		"--port", "rs485-1="+rsPath, "--recheck-interval", "200ms", "--model", "IG-500", "--state-dir", filepath.Join(dir, "state"),
		"--heartbeat", "1s", "--metrics-interval", "1s", "--backoff-min", "200ms", "--backoff-max", "2s",
		"--passthrough-listen", "none", "--dev-root", "none", "--vpn-interface", "none",
		"--name", "Boiler house", "--log-level", "debug", "--log-format", "json")
	api.WaitStatus([]string{dev.ID}, "ONLINE", 30*time.Second)
	rs485 := map[string]any{"kind": "rs485", "baudRate": 115200, "dataBits": 8, "parity": "even", "stopBits": 1,
		"mode": "modbus_rtu_master", "slaveId": 7, "points": []map[string]any{
			{"name": "temp", "function": "holding", "register": 0, "type": "u16", "unit": "°C", "intervalMs": 200}}}
	if code := api.Do("PUT", "/devices/"+dev.ID+"/serial/channels/rs485-1", rs485, nil); code != 200 {
		t.Fatalf("PUT rs485-1: %d", code)
	}
	pointIs := func(v float64) {
		t.Helper()
		fleetproc.Eventually(t, 20*time.Second, func() string {
			var l resource.List[resource.Point]
			if code := api.Do("GET", "/devices/"+dev.ID+"/points", nil, &l); code != 200 {
				return fmt.Sprintf("GET points: %d", code)
			}
			for _, p := range l.Data {
				if p.ID == "rs485-1.temp" && p.Quality == "good" && p.Value == v {
					return ""
				}
			}
			return fmt.Sprintf("rs485-1.temp is not %v yet: %+v", v, l.Data)
		})
	}
	pointIs(50)

	// A bad rule is refused naming the field; the good one is made.
	bad := map[string]any{"name": "Boiler hot", "severity": "ERROR", "notify": []string{mailCh.ID, chatCh.ID, hookCh.ID},
		"condition": map[string]any{"kind": "threshold", "source": "point.rs485-1.temp", "op": ">", "value": 80, "clear": 90, "for": "0s"}}
	var apiErr resource.ErrorBody
	if code := api.Do("POST", "/alert-rules", bad, &apiErr); code != 400 {
		t.Fatalf("POST a rule with clear on the wrong side: %d, want 400", code)
	}
	if code := api.Do("POST", "/alert-rules", map[string]any{"name": "Ghost", "severity": "ERROR",
		"condition": map[string]any{"kind": "threshold", "source": "point.rs485-1.nope", "op": ">", "value": 1}}, nil); code != 400 {
		t.Fatalf("POST a rule on an unknown point: %d, want 400", code)
	}
	good := bad
	good["condition"].(map[string]any)["clear"] = 70
	var rule resource.One[resource.AlertRule]
	if code := api.Do("POST", "/alert-rules", good, &rule); code != 201 {
		t.Fatalf("POST /alert-rules: %d", code)
	}
	ruleID := rule.Data.ID
	excursions := []time.Time{}

	// Crossing: one alert, one e-mail, one chat message.
	excursions = append(excursions, time.Now())
	sim.SetHolding(7, 0, 95)
	a := waitAlert(t, api, ruleID, "ACTIVE")
	waitMail(t, mail, 1)
	chat.wait(t, "/chat", 1)
	ms, _ := mail.Messages()
	m := ms[0]
	for _, want := range []string{"Boiler hot", "gw-0", "95", "80", "https://fleet.e2e.example/panel/alerts/" + a.ID} {
		if !strings.Contains(m.Subject+"\n"+m.Text, want) {
			t.Errorf("the e-mail does not say %q:\nSubject: %s\n%s", want, m.Subject, m.Text)
		}
	}
	if m.To[0].Address != "ops@example.com" || m.From.Address != "fleet@e2e.example" {
		t.Errorf("e-mail from %v to %v", m.From, m.To)
	}
	if txt := chat.texts("/chat")[0]; !strings.Contains(txt, "Boiler hot") || !strings.Contains(txt, "gw-0") ||
		!strings.Contains(txt, "95") || !strings.Contains(txt, "/panel/alerts/"+a.ID) {
		t.Errorf("the chat message: %s", txt)
	}
	if !strings.Contains(string(a.Payload), `"threshold":80`) || !strings.Contains(string(a.Payload), `"value":95`) {
		t.Errorf("alert payload %s", a.Payload)
	}

	// Back under clear: resolved, and said so.
	sim.SetHolding(7, 0, 60)
	excursions = append(excursions, time.Now())
	waitAlertState(t, api, a.ID, "RESOLVED")
	waitMail(t, mail, 2)
	chat.wait(t, "/chat", 2)

	// A silence: the alert opens and is listed; nobody is told.
	var sil resource.One[resource.Silence]
	if code := api.Do("POST", "/silences", map[string]any{"scope": map[string]any{"deviceIds": []string{dev.ID}},
		"from": resource.FormatTime(time.Now().Add(-time.Second)), "to": resource.FormatTime(time.Now().Add(time.Hour)), "comment": "boiler service"}, &sil); code != 201 {
		t.Fatalf("POST /silences: %d", code)
	}
	var sils resource.List[resource.Silence]
	if code := api.Do("GET", "/silences", nil, &sils); code != 200 || len(sils.Data) != 1 || sils.Data[0].Comment != "boiler service" {
		t.Fatalf("GET /silences: %d %+v", code, sils.Data)
	}
	excursions = append(excursions, time.Now())
	sim.SetHolding(7, 0, 97)
	silenced := waitAlert(t, api, ruleID, "ACTIVE")
	sim.SetHolding(7, 0, 55)
	excursions = append(excursions, time.Now())
	waitAlertState(t, api, silenced.ID, "RESOLVED")
	time.Sleep(3 * time.Second) // what would have been sent has had time to be
	if ms, _ := mail.Messages(); len(ms) != 2 {
		t.Errorf("under a silence: %d e-mails, want still 2", len(ms))
	}
	if n := len(chat.texts("/chat")); n != 2 {
		t.Errorf("under a silence: %d chat messages, want still 2", n)
	}
	if code := api.Do("DELETE", "/silences/"+sil.Data.ID, nil, nil); code != 204 {
		t.Fatalf("DELETE silence: %d", code)
	}

	// Disabled: nothing opens.
	if code := api.Do("PATCH", "/alert-rules/"+ruleID, map[string]any{"enabled": false}, nil); code != 200 {
		t.Fatalf("PATCH enabled false: %d", code)
	}
	time.Sleep(time.Second)
	sim.SetHolding(7, 0, 99)
	pointIs(99)
	time.Sleep(3 * time.Second)
	if open := alertsOf(t, api, ruleID, "ACTIVE"); len(open) != 0 {
		t.Errorf("a disabled rule opened %d alerts", len(open))
	}
	sim.SetHolding(7, 0, 50)
	pointIs(50)

	// The preview over the last hour counts the two excursions the rule
	// saw while enabled and the one it did not (a preview replays the
	// history, whatever the rule's state was): three openings.
	var prev resource.One[resource.RulePreview]
	body := map[string]any{"name": "Boiler hot", "severity": "ERROR", "from": resource.FormatTime(time.Now().Add(-time.Hour)),
		"condition": good["condition"]}
	if code := api.Do("POST", "/alert-rules/preview", body, &prev); code != 200 {
		t.Fatalf("POST /alert-rules/preview: %d", code)
	}
	if prev.Data.Opened != 3 || len(prev.Data.Devices) != 1 || prev.Data.Devices[0].DeviceID != dev.ID || prev.Data.Devices[0].Opened != 3 {
		t.Errorf("preview: %+v, want 3 openings on %s", prev.Data, dev.ID)
	} else if open := time.Duration(prev.Data.Devices[0].OpenForMs) * time.Millisecond; open < excursions[1].Sub(excursions[0])-2*time.Second {
		t.Errorf("preview: open for %s, want at least the first excursion (%s)", open, excursions[1].Sub(excursions[0]))
	}

	// Enabled again and crossing: open; deleted: resolved.
	if code := api.Do("PATCH", "/alert-rules/"+ruleID, map[string]any{"enabled": true}, nil); code != 200 {
		t.Fatalf("PATCH enabled true: %d", code)
	}
	time.Sleep(time.Second)
	sim.SetHolding(7, 0, 96)
	again := waitAlert(t, api, ruleID, "ACTIVE")
	waitMail(t, mail, 3)
	if code := api.Do("DELETE", "/alert-rules/"+ruleID, nil, nil); code != 204 {
		t.Fatalf("DELETE rule: %d", code)
	}
	waitAlertState(t, api, again.ID, "RESOLVED")
	if code := api.Do("GET", "/alert-rules/"+ruleID, nil, nil); code != 404 {
		t.Errorf("GET a deleted rule: %d, want 404", code)
	}
	sim.SetHolding(7, 0, 50)
	pointIs(50)
	waitMail(t, mail, 4) // the deletion's resolution

	// The mail server down when an alert opens; the relay killed before it
	// could send; both back: the e-mail arrives once.
	good["name"] = "Boiler hot again"
	var rule2 resource.One[resource.AlertRule]
	if code := api.Do("POST", "/alert-rules", good, &rule2); code != 201 {
		t.Fatalf("POST second rule: %d", code)
	}
	time.Sleep(time.Second)
	mail.Stop()
	sim.SetHolding(7, 0, 98)
	crash := waitAlert(t, api, rule2.Data.ID, "ACTIVE")
	time.Sleep(time.Second) // an attempt failed on the closed port
	relay.Kill()
	mail.Restart()
	relay = startRelay()
	defer relay.Stop(t, 30*time.Second)
	fleetproc.Eventually(t, 60*time.Second, func() string {
		n := 0
		ms, err := mail.Messages()
		if err != nil {
			return err.Error()
		}
		for _, m := range ms {
			if strings.Contains(m.Text, "/panel/alerts/"+crash.ID) {
				n++
			}
		}
		if n != 1 {
			return fmt.Sprintf("%d e-mails for the alert opened before the crash, want 1", n)
		}
		return ""
	})
	time.Sleep(3 * time.Second)
	n := 0
	ms, _ = mail.Messages()
	for _, m := range ms {
		if strings.Contains(m.Text, "/panel/alerts/"+crash.ID) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d e-mails for the alert opened before the crash, want exactly 1", n)
	}
	if hooks := chat.texts("/hook"); len(hooks) != 0 {
		t.Errorf("the CRITICAL-only webhook channel got %d deliveries of ERROR alerts", len(hooks))
	}
	if bad := chat.failures(); len(bad) > 0 {
		t.Errorf("receiver: %v", bad)
	}
	if b, _ := os.ReadFile(relayLog); strings.Contains(string(b), "s3cret-pass") {
		t.Error("the relay's log shows the SMTP password")
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

func alertsOf(t *testing.T, api *fleetproc.API, ruleID, state string) []resource.Alert {
	t.Helper()
	var l resource.List[resource.Alert]
	if code := api.Do("GET", "/alerts?limit=100&state="+state, nil, &l); code != 200 {
		t.Fatalf("GET /alerts: %d", code)
	}
	var out []resource.Alert
	for _, a := range l.Data {
		if a.RuleID == ruleID {
			out = append(out, a)
		}
	}
	return out
}

func waitAlert(t *testing.T, api *fleetproc.API, ruleID, state string) resource.Alert {
	t.Helper()
	var a resource.Alert
	fleetproc.Eventually(t, 20*time.Second, func() string {
		l := alertsOf(t, api, ruleID, state)
		if len(l) != 1 {
			return fmt.Sprintf("%d %s alerts of rule %s, want 1", len(l), state, ruleID)
		}
		a = l[0]
		return ""
	})
	return a
}

func waitAlertState(t *testing.T, api *fleetproc.API, id, state string) {
	t.Helper()
	fleetproc.Eventually(t, 20*time.Second, func() string {
		var l resource.List[resource.Alert]
		api.Do("GET", "/alerts?limit=100&state="+state, nil, &l)
		for _, a := range l.Data {
			if a.ID == id {
				return ""
			}
		}
		return fmt.Sprintf("alert %s not %s", id, state)
	})
}

func waitMail(t *testing.T, mail *mailpit.Server, n int) {
	t.Helper()
	fleetproc.Eventually(t, 20*time.Second, func() string {
		ms, err := mail.Messages()
		if err != nil {
			return err.Error()
		}
		if len(ms) != n {
			return fmt.Sprintf("%d e-mails received, want %d", len(ms), n)
		}
		return ""
	})
}

// chatReceiver is an HTTPS server standing for a chat's incoming webhook
// (/chat: {"text": ...}) and a customer's signed webhook (/hook).
type chatReceiver struct {
	URL    string
	CAFile string
	secret string

	mu   sync.Mutex
	got  map[string][]string
	fail []string
}

func startChatReceiver(t *testing.T) *chatReceiver {
	c := &chatReceiver{got: map[string][]string{}}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		c.mu.Lock()
		defer c.mu.Unlock()
		switch r.URL.Path {
		case "/chat":
			var m struct {
				Text string `json:"text"`
			}
			if err := json.Unmarshal(body, &m); err != nil || m.Text == "" {
				c.fail = append(c.fail, "chat body "+string(body))
			}
			c.got["/chat"] = append(c.got["/chat"], m.Text)
		case "/hook":
			if !webhook.Verify(c.secret, body, r.Header.Get(webhook.HeaderSignature)) {
				c.fail = append(c.fail, "unsigned webhook")
			}
			c.got["/hook"] = append(c.got["/hook"], string(body))
		default:
			c.fail = append(c.fail, "unexpected "+r.URL.Path)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	c.CAFile = filepath.Join(t.TempDir(), "chat-ca.pem")
	if err := os.WriteFile(c.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *chatReceiver) texts(path string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.got[path]...)
}

func (c *chatReceiver) failures() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.fail...)
}

func (c *chatReceiver) wait(t *testing.T, path string, n int) {
	t.Helper()
	fleetproc.Eventually(t, 20*time.Second, func() string {
		if got := len(c.texts(path)); got != n {
			return fmt.Sprintf("%d messages at %s, want %d", got, path, n)
		}
		return ""
	})
}

// selfSigned writes a CA certificate, and a certificate for 127.0.0.1
// signed by it with its key, into dir.
func selfSigned(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fleet e2e CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	caCert, _ := x509.ParseCertificate(caDER)
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "smtp.pem"), filepath.Join(dir, "smtp-key.pem")
	for f, b := range map[string]*pem.Block{caFile: {Type: "CERTIFICATE", Bytes: caDER}, certFile: {Type: "CERTIFICATE", Bytes: leafDER},
		keyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(f, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caFile, certFile, keyFile
}
