package relay

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/fleetproc"
	"github.com/fleet/fleet/test/rig/testwait"
)

// startRelayBinary runs `fleet-relay serve` and returns its address.
func startRelayBinary(t *testing.T, bin string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	logs := bufio.NewScanner(stderr)
	for logs.Scan() {
		var line struct{ Msg, Addr string }
		json.Unmarshal(logs.Bytes(), &line)
		if line.Msg == "relay listening" {
			go io.Copy(io.Discard, stderr)
			return cmd, line.Addr
		}
	}
	t.Fatal("no 'relay listening' log line")
	return nil, ""
}

// TestWebhooksThroughTheRelayKilledAndRestarted runs the real relay binary
// with a simulated agent: signal changes and a full disk cause webhooks to a
// real HTTPS receiver that fails each delivery's first two requests; the
// relay is killed with SIGKILL during the retries and restarted; every
// delivery ends delivered, none recorded delivered before the kill is sent
// again, each device's signals arrive in order, and acknowledging the alert
// through the API sends alert.acknowledged.
func TestWebhooksThroughTheRelayKilledAndRestarted(t *testing.T) {
	dir := t.TempDir()
	bin := goBuild(t, dir, relayPkg)
	db := filepath.Join(dir, "relay.db")
	admin := fleetproc.AdminOn(t, bin, db)
	ten := fleetproc.Provision(t, bin, []string{"FLEET_DB=" + db}, "Acme", 1)
	dev := ten.Devices[0]

	type hitRec struct {
		id, event string
		n         int // the signal's sequence number (live "n=<k>")
		at        time.Time
	}
	var mu sync.Mutex
	var hits []hitRec
	seen := map[string]int{}
	badSig := 0
	rcv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id := r.Header.Get(webhook.HeaderDeliveryID)
		ts, _ := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64)
		var b struct {
			Event    string
			Channels []resource.SignalChannel
		}
		json.Unmarshal(body, &b)
		h := hitRec{id: id, event: b.Event, n: -1, at: time.Now()}
		if len(b.Channels) == 1 {
			fmt.Sscanf(b.Channels[0].Live, "n=%d", &h.n)
		}
		mu.Lock()
		if !webhook.Verify(ten.WebhookSecret, body, r.Header.Get(webhook.HeaderSignature)) ||
			!webhook.VerifyStandard(ten.WebhookSecret, id, ts, body, r.Header.Get("webhook-signature")) {
			badSig++
		}
		hits = append(hits, h)
		seen[id]++
		n := seen[id]
		mu.Unlock()
		if n <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer rcv.Close()
	ca := caFile(t, rcv)
	admin(nil, "org", "set-alert-webhook", "--org", ten.OrgID, "--url", rcv.URL+"/alerts")

	flags := []string{"--db", db, "--webhook-allow-private", "--webhook-ca", ca, "--webhook-backoff", "400ms,400ms,400ms,400ms,400ms"}
	relay, addr := startRelayBinary(t, bin, flags...)
	api := "http://" + addr + "/api/v1/public"
	call := func(method, path, body string) (int, []byte) { return apiCall(t, method, api+path, ten.Key, body) }
	if code, b := call("PATCH", "/devices/"+dev.ID+"/serial", `{"webhookUrl":"http://example.com/x"}`); code != 400 || errorCode(b) != "validation_error" {
		t.Errorf("PATCH with an http URL: %d %s", code, b)
	}
	if code, b := call("PATCH", "/devices/"+dev.ID+"/serial", `{"webhookUrl":"`+rcv.URL+`/signals","webhookEnabled":true}`); code != 200 {
		t.Fatalf("PATCH serial: %d %s", code, b)
	}

	// The simulated agent: 20 signal changes and a full disk.
	ctx := context.Background()
	ws, send := dialAgent(t, addr, dev.Token)
	send(protocol.Message{Type: protocol.TypeHello, Hello: &protocol.Hello{AgentVersion: "sim", Model: "IG-500", HeartbeatInterval: protocol.Duration{Duration: time.Minute}}})
	const changes = 20
	for i := 0; i < changes; i++ {
		send(protocol.Message{Type: protocol.TypeHeartbeat, Heartbeat: &protocol.Heartbeat{At: resource.T(time.Now()), Status: resource.StatusOnline,
			Channels: []protocol.ChannelState{{ID: "uart-1", Available: true, Live: fmt.Sprintf("n=%d", i)}}}})
		time.Sleep(20 * time.Millisecond)
	}
	send(protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: []protocol.Record{{Seq: 1,
		Metric: &resource.MetricSample{CapturedAt: resource.T(time.Now()), CPUPct: 5, MemPct: 20, DiskUsedPct: 97, TempCPU: 40}}}}})

	// Kill the relay while retries are under way.
	testwait.Until(t, 20*time.Second, func() string {
		mu.Lock()
		n := len(hits)
		mu.Unlock()
		if n >= changes+10 {
			return ""
		}
		return fmt.Sprintf("only %d webhook requests before the kill", n)
	})
	relay.Process.Signal(syscall.SIGKILL)
	relay.Wait()
	killedAt := time.Now()
	ws.CloseNow()

	store, err := sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ds, err := store.WebhookDeliveries(ctx, ten.OrgID, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != changes+1 {
		t.Fatalf("%d deliveries in the outbox, want %d (20 signals, alert.opened)", len(ds), changes+1)
	}
	before := map[string]bool{}
	pending := 0
	for _, d := range ds {
		if d.State == "delivered" {
			before[d.ID] = true
		} else if d.State == "pending" {
			pending++
		}
	}
	if pending == 0 {
		t.Fatal("nothing pending at the kill")
	}

	_, addr = startRelayBinary(t, bin, flags...)
	api = "http://" + addr + "/api/v1/public"
	testwait.UntilEvery(t, 30*time.Second, 50*time.Millisecond, func() string {
		ds, err = store.WebhookDeliveries(ctx, ten.OrgID, 1000)
		if err != nil {
			t.Fatal(err)
		}
		done := 0
		for _, d := range ds {
			if d.State == "delivered" {
				done++
			}
		}
		if done == len(ds) {
			return ""
		}
		return fmt.Sprintf("%d of %d delivered after the restart", done, len(ds))
	})

	mu.Lock()
	last := -1
	firstSeen := map[string]bool{}
	for _, h := range hits {
		if before[h.id] && h.at.After(killedAt) {
			t.Errorf("delivery %s recorded delivered before the kill was sent again", h.id)
		}
		if h.event == "serial.signal" && !firstSeen[h.id] {
			firstSeen[h.id] = true
			if h.n <= last {
				t.Errorf("signal %d sent after signal %d", h.n, last)
			}
			last = h.n
		}
	}
	if badSig > 0 {
		t.Errorf("%d requests with a bad signature", badSig)
	}
	mu.Unlock()

	// Acknowledge through the API: alert.acknowledged.
	code, b := call("GET", "/alerts", "")
	var list resource.List[resource.Alert]
	json.Unmarshal(b, &list)
	if code != 200 || len(list.Data) != 1 {
		t.Fatalf("GET /alerts: %d %s", code, b)
	}
	if code, b := call("POST", "/alerts/"+list.Data[0].ID+"/acknowledge", ""); code != 200 {
		t.Fatalf("acknowledge: %d %s", code, b)
	}
	testwait.For(t, "an alert.acknowledged webhook delivered", 15*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, h := range hits {
			if h.event == "alert.acknowledged" && seen[h.id] >= 3 {
				return true
			}
		}
		return false
	})
}

// TestWebhookAdminCommands runs the webhook admin commands on a database and
// checks their output and effect.
func TestWebhookAdminCommands(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "relay.db")
	var org struct{ ID, WebhookSecret string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")

	var set struct{ ID, AlertWebhookURL string }
	mustJSON(t, &set, "org", "set-alert-webhook", "--db", db, "--org", org.ID, "--url", "https://hooks.example.com/fleet")
	if set.AlertWebhookURL != "https://hooks.example.com/fleet" {
		t.Errorf("set-alert-webhook printed %+v", set)
	}
	for _, bad := range []string{"http://hooks.example.com/", "https://u:p@hooks.example.com/", "not a url"} {
		if _, errOut, code := cli(t, "org", "set-alert-webhook", "--db", db, "--org", org.ID, "--url", bad); code != 1 || !strings.Contains(errOut, "url") {
			t.Errorf("set-alert-webhook %q: exit %d, %q", bad, code, errOut)
		}
	}
	if _, _, code := cli(t, "org", "set-alert-webhook", "--db", db, "--org", "nosuchorg", "--url", "https://x.example.com/"); code != 1 {
		t.Errorf("unknown org: exit %d", code)
	}
	if _, _, code := cli(t, "org", "set-alert-webhook", "--db", db, "--url", "https://x.example.com/"); code != 2 {
		t.Errorf("missing --org: exit %d, want 2", code)
	}

	var rot struct{ ID, WebhookSecret string }
	mustJSON(t, &rot, "org", "rotate-secret", "--db", db, "--org", org.ID)
	if !strings.HasPrefix(rot.WebhookSecret, "whsec_") || rot.WebhookSecret == org.WebhookSecret {
		t.Errorf("rotate-secret printed %+v", rot)
	}

	var none []cloud.DeliveryInfo
	mustJSON(t, &none, "webhook", "deliveries", "--db", db, "--org", org.ID)
	if len(none) != 0 {
		t.Errorf("deliveries on a new org: %+v", none)
	}

	// One delivery with two attempts, as the dispatcher records them.
	store, err := sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	at := time.Now().UTC().Truncate(time.Millisecond)
	dl := &webhook.Delivery{ID: "dlv1abc", OrgID: org.ID, DeviceID: "dev1", Event: webhook.EventSignal, URL: "https://hooks.example.com/s",
		Body: []byte(`{"event":"serial.signal"}`), NextAttemptAt: at, CreatedAt: at}
	ws := sqlite.NewWebhookStore(store)
	if err := ws.WriteOutbox(ctx, []*webhook.Delivery{dl}, nil); err != nil {
		t.Fatal(err)
	}
	if err := ws.WriteOutbox(ctx, nil, []webhook.Attempt{
		{DeliveryID: dl.ID, Number: 1, At: at, StatusCode: 503, Duration: 12 * time.Millisecond, State: webhook.StatePending, NextAttemptAt: at.Add(5 * time.Second)},
		{DeliveryID: dl.ID, Number: 2, At: at.Add(5 * time.Second), Error: "timeout after 10s", Duration: 10 * time.Second, State: webhook.StatePending, NextAttemptAt: at.Add(40 * time.Second)},
	}); err != nil {
		t.Fatal(err)
	}
	var ds []cloud.DeliveryInfo
	mustJSON(t, &ds, "webhook", "deliveries", "--db", db, "--org", org.ID)
	if len(ds) != 1 || ds[0].ID != dl.ID || ds[0].State != "pending" || len(ds[0].Attempts) != 2 ||
		ds[0].Attempts[0].StatusCode != 503 || ds[0].Attempts[1].Error != "timeout after 10s" || ds[0].NextAttemptAt == nil {
		t.Errorf("deliveries: %+v", ds)
	}
	out, _, code := cli(t, "webhook", "deliveries", "--db", db, "--org", org.ID)
	if code != 0 || !strings.Contains(out, dl.ID) || !strings.Contains(out, "attempt 1") || !strings.Contains(out, "503") || !strings.Contains(out, "timeout after 10s") {
		t.Errorf("deliveries (text):\n%s", out)
	}
	var other struct{ ID string }
	mustJSON(t, &other, "org", "create", "--db", db, "--name", "Other")
	mustJSON(t, &none, "webhook", "deliveries", "--db", db, "--org", other.ID)
	if len(none) != 0 {
		t.Errorf("another organization sees %d deliveries", len(none))
	}

	var re struct{ ID, RedeliveryOf string }
	mustJSON(t, &re, "webhook", "redeliver", "--db", db, "--id", dl.ID)
	if re.RedeliveryOf != dl.ID || re.ID == "" || re.ID == dl.ID {
		t.Errorf("redeliver printed %+v", re)
	}
	mustJSON(t, &ds, "webhook", "deliveries", "--db", db, "--org", org.ID)
	if len(ds) != 2 || ds[0].ID != re.ID || ds[0].State != "pending" || len(ds[0].Attempts) != 0 || ds[0].RedeliveryOf != dl.ID {
		t.Errorf("after redeliver: %+v", ds)
	}
	if _, errOut, code := cli(t, "webhook", "redeliver", "--db", db, "--id", "nosuchdelivery"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("redeliver unknown: exit %d %q", code, errOut)
	}
}

// fakeProc is a procfs root for the real agent whose CPU counters advance
// busy (97 % busy) while busy is set, idle otherwise.
type fakeProc struct {
	dir  string
	mu   sync.Mutex
	busy bool
	user int64
	idle int64
}

func newFakeProc(t *testing.T) *fakeProc {
	t.Helper()
	p := &fakeProc{dir: t.TempDir(), user: 10000, idle: 80000}
	os.WriteFile(filepath.Join(p.dir, "meminfo"), []byte("MemTotal:        1000000 kB\nMemFree:          600000 kB\nMemAvailable:     700000 kB\n"), 0o644)
	os.WriteFile(filepath.Join(p.dir, "loadavg"), []byte("0.42 0.30 0.25 1/123 4567\n"), 0o644)
	p.tick()
	done := make(chan struct{})
	go func() {
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-tk.C:
				p.tick()
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() { close(done) })
	return p
}

func (p *fakeProc) setBusy(b bool) {
	p.mu.Lock()
	p.busy = b
	p.mu.Unlock()
}

func (p *fakeProc) tick() {
	p.mu.Lock()
	if p.busy {
		p.user += 97
		p.idle += 3
	} else {
		p.user += 5
		p.idle += 95
	}
	line := fmt.Sprintf("cpu  %d 0 0 %d 0 0 0 0 0 0\ncpu0 %d 0 0 %d 0 0 0 0 0 0\n", p.user, p.idle, p.user, p.idle)
	p.mu.Unlock()
	tmp := filepath.Join(p.dir, "stat.tmp")
	os.WriteFile(tmp, []byte(line), 0o644)
	os.Rename(tmp, filepath.Join(p.dir, "stat"))
}

// fastCPURule makes the organization's high_cpu open on 2 s over 90 %
// (its default for, 10m, is longer than a test), through the store of the
// relay's file before the relay starts.
func fastCPURule(t *testing.T, db, orgID string) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rules, err := st.Stores().Engine.Rules(ctx, orgID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if r.Name == "high_cpu" {
			c := r.Resource().Condition
			c.For = "2s"
			if _, err := st.Rules().UpdateRule(ctx, orgID, r.ID, cloud.RulePatch{Condition: &c}); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("no high_cpu rule")
}

// TestRealAgentSignalsAndAlerts runs the real relay and the real agent
// (--hw sim, whose simulated peers move the signals every second, and a fake
// /proc): signals are forwarded, a CPU spike opens and clears high_cpu, and
// an agent killed with SIGKILL opens device_offline, resolved when it is
// back; every webhook is verified on a real HTTPS receiver.
func TestRealAgentSignalsAndAlerts(t *testing.T) {
	dir := t.TempDir()
	relayBin, agentBin := goBuild(t, dir, relayPkg), goBuild(t, dir, agentPkg)
	db := filepath.Join(dir, "relay.db")
	admin := fleetproc.AdminOn(t, relayBin, db)
	ten := fleetproc.Provision(t, relayBin, []string{"FLEET_DB=" + db}, "Acme", 1)
	dev := ten.Devices[0]

	type got struct {
		path string
		body []byte
	}
	hooks := make(chan got, 10000)
	var badSig sync.Map
	rcv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ts, _ := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64)
		if !webhook.Verify(ten.WebhookSecret, body, r.Header.Get(webhook.HeaderSignature)) ||
			!webhook.VerifyStandard(ten.WebhookSecret, r.Header.Get("webhook-id"), ts, body, r.Header.Get("webhook-signature")) {
			badSig.Store(string(body), true)
		}
		hooks <- got{r.URL.Path, body}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()
	ca := caFile(t, rcv)
	admin(nil, "org", "set-alert-webhook", "--org", ten.OrgID, "--url", rcv.URL+"/alerts")
	fastCPURule(t, db, ten.OrgID)
	_, addr := startRelayBinary(t, relayBin, "--db", db, "--webhook-allow-private", "--webhook-ca", ca, "--webhook-backoff", "200ms")

	req, _ := http.NewRequest("PATCH", "http://"+addr+"/api/v1/public/devices/"+dev.ID+"/serial",
		strings.NewReader(`{"webhookUrl":"`+rcv.URL+`/signals","webhookEnabled":true}`))
	req.Header.Set("Authorization", "Bearer "+ten.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("PATCH serial: %v %v", resp, err)
	}
	resp.Body.Close()

	proc := newFakeProc(t)
	sys := t.TempDir()
	state := t.TempDir()
	startAgent := func() *exec.Cmd {
		cmd := exec.Command(agentBin, "--relay", "http://"+addr, "--token", dev.Token, "--hw", "sim", "--model", "IG-500",
			"--heartbeat", "1s", "--metrics-interval", "1s", "--proc-root", proc.dir, "--sys-root", sys, "--state-dir", state,
			"--disk-path", dir, "--passthrough-listen", "none", "--vpn-interface", "none", "--backoff-min", "100ms", "--backoff-max", "500ms",
			"--dev-root", "none", "--log-level", "warn")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	agent := startAgent()

	// wait returns the first webhook on path whose body satisfies ok.
	wait := func(what, path string, ok func(b []byte) bool) []byte {
		t.Helper()
		deadline := time.After(60 * time.Second)
		for {
			select {
			case h := <-hooks:
				if h.path == path && ok(h.body) {
					return h.body
				}
			case <-deadline:
				t.Fatalf("no %s webhook", what)
				return nil
			}
		}
	}
	alertEvent := func(event, rule string) func([]byte) bool {
		return func(b []byte) bool {
			var w resource.AlertWebhook
			json.Unmarshal(b, &w)
			return w.Event == event && w.DeviceID == dev.ID && strings.Contains(string(w.Alert.Payload), `"rule":"`+rule+`"`)
		}
	}

	var sig resource.SignalWebhook
	json.Unmarshal(wait("serial.signal", "/signals", func([]byte) bool { return true }), &sig)
	if sig.Event != "serial.signal" || sig.DeviceID != dev.ID || len(sig.Channels) == 0 {
		t.Errorf("signal webhook %+v", sig)
	}

	proc.setBusy(true)
	wait("alert.opened high_cpu", "/alerts", alertEvent("alert.opened", "high_cpu"))
	proc.setBusy(false)
	wait("alert.resolved high_cpu", "/alerts", alertEvent("alert.resolved", "high_cpu"))

	agent.Process.Signal(syscall.SIGKILL)
	agent.Wait()
	wait("alert.opened device_offline", "/alerts", alertEvent("alert.opened", "device_offline")) // silent for 30 s (after)
	startAgent()
	wait("alert.resolved device_offline", "/alerts", alertEvent("alert.resolved", "device_offline"))

	n := 0
	badSig.Range(func(k, _ any) bool { n++; return true })
	if n > 0 {
		t.Errorf("%d webhooks with a bad signature", n)
	}
}
