package relay

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/logbuf"
)

// scrape is one parsed /metrics response.
type scrape map[string]*dto.MetricFamily

func mustScrape(t *testing.T, url string) scrape {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// value returns the value of the series of name whose labels include the
// "k=v" pairs: a counter's or gauge's value, a histogram's sample count;
// -1 when there is no such series.
func (s scrape) value(name string, labels ...string) float64 {
	f := s[name]
	if f == nil {
		return -1
	}
	want := map[string]string{}
	for _, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		want[k] = v
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, lp := range m.Label {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			return m.Untyped.GetValue()
		}
	}
	return -1
}

// delta is after - before for a series (a missing series counts 0).
func delta(before, after scrape, name string, labels ...string) float64 {
	return max(after.value(name, labels...), 0) - max(before.value(name, labels...), 0)
}

// waitMetric scrapes until the series has the value.
func waitMetric(t *testing.T, url string, want float64, name string, labels ...string) scrape {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		s := mustScrape(t, url)
		if s.value(name, labels...) == want {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v = %v, want %v", name, labels, s.value(name, labels...), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dialAgent connects a simulated agent to the relay at addr and returns its
// connection (closed at the end of the test) and a function that sends one
// message. What the relay sends is read and discarded.
func dialAgent(t *testing.T, addr, token string) (*websocket.Conn, func(protocol.Message)) {
	t.Helper()
	ctx := context.Background()
	ws := dialRelay(t, addr, token)
	go func() {
		for {
			if _, _, err := ws.Read(ctx); err != nil {
				return
			}
		}
	}()
	return ws, func(m protocol.Message) {
		b, _ := json.Marshal(m)
		if err := ws.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMetrics runs the relay in process with a real SQLite file, makes real
// API requests, connects a websocket agent that sends a heartbeat whose
// signal goes to a real HTTPS receiver (which fails the first attempt),
// and checks what /metrics says about each.
func TestMetrics(t *testing.T) {
	dir := t.TempDir()
	var hits atomic.Int64
	rcv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if hits.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()
	ca := caFile(t, rcv)

	m := NewMain(io.Discard)
	if err := m.ParseFlags([]string{"--db", filepath.Join(dir, "relay.db"), "--listen", "127.0.0.1:0", "--metrics-listen", "api", "--rate-limit", "100000",
		"--webhook-allow-private", "--webhook-ca", ca, "--webhook-backoff", "200ms"}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	org, err := m.DB.CreateOrg(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	keyInfo, key, err := m.DB.CreateKey(ctx, org.ID, "k", cloud.AllScopes, 0)
	if err != nil {
		t.Fatal(err)
	}
	dev, token, err := m.DB.AddDevice(ctx, sqlite.NewDevice{OrgID: org.ID, Name: "gw", SerialNumber: "S1", Model: "IG-500"})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + m.Addr()
	metricsURL := base + "/metrics"
	api := base + "/api/v1/public"
	call := func(method, path, key, body string) int {
		t.Helper()
		code, _ := apiCall(t, method, api+path, key, body)
		return code
	}

	before := mustScrape(t, metricsURL)
	if v := before.value("fleet_relay_build_info"); v != 1 {
		t.Errorf("fleet_relay_build_info = %v", v)
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "fleet_relay_webhook_queue_depth"} {
		if before.value(name) < 0 {
			t.Errorf("no %s", name)
		}
	}
	if v := before.value("fleet_relay_agents_connected"); v != 0 {
		t.Errorf("agents connected before any agent: %v", v)
	}

	// API requests: one 200, one 404, one 401 on the same route; an
	// unknown path; forwarding turned on.
	const route = "/api/v1/public/devices/{id}"
	for _, c := range []struct {
		path, key string
		want      int
	}{{"/devices/" + dev.ID, key, 200}, {"/devices/dev_unknown", key, 404}, {"/devices/" + dev.ID, "", 401}, {"/no/such/route", key, 404}} {
		if got := call("GET", c.path, c.key, ""); got != c.want {
			t.Fatalf("GET %s: %d, want %d", c.path, got, c.want)
		}
	}
	if got := call("PATCH", "/devices/"+dev.ID+"/serial", key, `{"webhookUrl":"`+rcv.URL+`/signals","webhookEnabled":true}`); got != 200 {
		t.Fatalf("PATCH serial: %d", got)
	}
	after := mustScrape(t, metricsURL)
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"route=" + route, "method=GET", "code=200"}, 1},
		{[]string{"route=" + route, "method=GET", "code=404"}, 1},
		{[]string{"route=" + route, "method=GET", "code=401"}, 1},
		{[]string{"route=unmatched", "method=GET", "code=404"}, 1},
		{[]string{"route=" + route + "/serial", "method=PATCH", "code=200"}, 1},
	} {
		if d := delta(before, after, "fleet_relay_http_requests_total", c.labels...); d != c.want {
			t.Errorf("fleet_relay_http_requests_total%v went up by %v, want %v", c.labels, d, c.want)
		}
	}
	if d := delta(before, after, "fleet_relay_http_request_duration_seconds", "route="+route, "method=GET"); d != 3 {
		t.Errorf("latency histogram of GET %s counted %v requests, want 3", route, d)
	}
	// Routes are patterns: no raw path (and so no device id) in any label.
	for _, m := range after["fleet_relay_http_requests_total"].Metric {
		for _, l := range m.Label {
			if strings.Contains(l.GetValue(), dev.ID) || strings.Contains(l.GetValue(), "no/such") {
				t.Errorf("label %s=%q carries a raw path", l.GetName(), l.GetValue())
			}
		}
	}

	// An agent connects and sends one heartbeat with a changed signal.
	ws, send := dialAgent(t, m.Addr(), token)
	send(protocol.Message{Type: protocol.TypeHello, Hello: &protocol.Hello{AgentVersion: "test", Model: "IG-500", HeartbeatInterval: protocol.Duration{Duration: time.Minute}}})
	waitMetric(t, metricsURL, 1, "fleet_relay_agents_connected")
	send(protocol.Message{Type: protocol.TypeHeartbeat, Heartbeat: &protocol.Heartbeat{At: resource.T(time.Now()), Status: resource.StatusOnline,
		Channels: []protocol.ChannelState{{ID: "uart-1", Available: true, Live: "n=1"}}}})
	s := waitMetric(t, metricsURL, 1, "fleet_relay_heartbeats_stored_total")
	if v := s.value("fleet_relay_heartbeat_store_latency_seconds"); v != 1 {
		t.Errorf("heartbeat latency histogram count %v, want 1", v)
	}
	if h := s["fleet_relay_heartbeat_store_latency_seconds"].Metric[0].Histogram; h.GetSampleSum() <= 0 || h.GetSampleSum() > 10 {
		t.Errorf("heartbeat latency sum %v s", h.GetSampleSum())
	}
	if v := s.value("fleet_relay_agent_connections_total"); v != 1 {
		t.Errorf("agent connections accepted %v, want 1", v)
	}

	// The signal webhook: the first attempt gets a 503, the retry a 204.
	s = waitMetric(t, metricsURL, 1, "fleet_relay_webhook_attempts_total", "kind=signal", "outcome=delivered")
	for outcome, want := range map[string]float64{"retry": 1, "failed": 0, "exhausted": 0} {
		if v := s.value("fleet_relay_webhook_attempts_total", "kind=signal", "outcome="+outcome); v != want {
			t.Errorf("signal attempts %s: %v, want %v", outcome, v, want)
		}
	}
	if v := s.value("fleet_relay_webhook_attempts_total", "kind=alert", "outcome=delivered"); v != 0 {
		t.Errorf("alert attempts delivered: %v", v)
	}
	if v := s.value("fleet_relay_webhook_attempt_duration_seconds", "kind=signal"); v != 2 {
		t.Errorf("attempt duration histogram count %v, want 2", v)
	}
	if v := s.value("fleet_relay_webhook_delivery_latency_seconds", "kind=signal"); v != 1 {
		t.Errorf("delivery latency histogram count %v, want 1", v)
	}
	if v := s.value("fleet_relay_webhook_enqueued_total"); v != 1 {
		t.Errorf("enqueued %v, want 1", v)
	}
	waitMetric(t, metricsURL, 0, "fleet_relay_webhook_queue_depth")

	// The agent goes away.
	ws.Close(websocket.StatusNormalClosure, "bye")
	s = waitMetric(t, metricsURL, 0, "fleet_relay_agents_connected")
	waitMetric(t, metricsURL, 1, "fleet_relay_agent_disconnections_total", "reason=peer_gone")

	// The scrape tells no secret: no API key or its id, no device token,
	// no webhook secret.
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	secret, err := m.DB.Outbox.OrgSecrets(ctx, org.ID)
	if err != nil {
		t.Fatal(err)
	}
	for what, v := range map[string]string{"API key": key, "API key id": keyInfo.ID, "device token": token, "webhook secret": secret.Current, "org id": org.ID} {
		if strings.Contains(string(body), v) {
			t.Errorf("/metrics shows the %s", what)
		}
	}
	if !strings.Contains(resp.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("Content-Type %q", resp.Header.Get("Content-Type"))
	}
	// Every relay metric has its help text.
	var names []string
	for name, f := range s {
		if strings.HasPrefix(name, "fleet_relay_") {
			names = append(names, name)
			if f.GetHelp() == "" {
				t.Errorf("%s has no HELP", name)
			}
		}
	}
	sort.Strings(names)
	t.Logf("relay metrics: %s", strings.Join(names, " "))
}

// TestMetricsOutsideTheAPI: /metrics takes no key, does not count against
// the rate limit, and is not in the OpenAPI document.
func TestMetricsOutsideTheAPI(t *testing.T) {
	m := NewMain(io.Discard)
	if err := m.ParseFlags([]string{"--db", filepath.Join(t.TempDir(), "relay.db"), "--listen", "127.0.0.1:0", "--metrics-listen", "api", "--rate-limit", "2"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	base := "http://" + m.Addr()
	for i := 0; i < 5; i++ {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "" {
			t.Fatalf("scrape %d: %d, X-RateLimit-Limit %q", i, resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"))
		}
	}
	// The budget of 2 per minute is untouched by the scrapes.
	for i := 0; i < 2; i++ {
		code, b := get(t, base+"/api/v1/public/openapi.json", "")
		if code != 200 {
			t.Fatalf("API request %d after 5 scrapes: %d %s", i, code, b)
		}
		var doc struct{ Paths map[string]json.RawMessage }
		if err := json.Unmarshal(b, &doc); err != nil || len(doc.Paths) == 0 {
			t.Fatalf("OpenAPI document: %v", err)
		}
		for p := range doc.Paths {
			if p == "/metrics" || strings.HasPrefix(p, "/metrics/") {
				t.Errorf("the OpenAPI document has path %s", p)
			}
		}
	}
	if code, _ := get(t, base+"/api/v1/public/openapi.json", ""); code != http.StatusTooManyRequests {
		t.Errorf("third API request: %d, want 429 (the limit works)", code)
	}
	// The limiter answers before routing: its 429 has no route.
	sc := mustScrape(t, base+"/metrics")
	if v := sc.value("fleet_relay_http_requests_total", "route=unmatched", "method=GET", "code=429"); v != 1 {
		t.Errorf("429 counted %v times as unmatched, want 1", v)
	}
	if v := sc.value("fleet_relay_http_requests_total", "route=/api/v1/public/openapi.json", "method=GET", "code=200"); v != 2 {
		t.Errorf("openapi.json 200s counted %v, want 2", v)
	}
}

// TestMetricsListen: with --metrics-listen the metrics are served there and
// the relay's listener answers 404 at /metrics.
func TestMetricsListen(t *testing.T) {
	t.Setenv("FLEET_METRICS_LISTEN", "127.0.0.1:0")
	m := NewMain(io.Discard)
	if err := m.ParseFlags([]string{"--db", filepath.Join(t.TempDir(), "relay.db"), "--listen", "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if m.MetricsAddr() == "" || m.MetricsAddr() == m.Addr() {
		t.Fatalf("metrics address %q, relay %q", m.MetricsAddr(), m.Addr())
	}
	s := mustScrape(t, "http://"+m.MetricsAddr()+"/metrics")
	if v := s.value("fleet_relay_build_info"); v != 1 {
		t.Errorf("fleet_relay_build_info = %v on the metrics listener", v)
	}
	code, b := get(t, "http://"+m.Addr()+"/metrics", "")
	if code != 404 || errorCode(b) != "not_found" {
		t.Errorf("/metrics on the relay's listener: %d %s, want 404", code, b)
	}
	if code, _ := get(t, "http://"+m.MetricsAddr()+"/api/v1/public/devices", "x"); code != 404 {
		t.Errorf("the API on the metrics listener: %d, want 404", code)
	}
	if code, _ := get(t, "http://"+m.Addr()+"/healthz", ""); code != 200 {
		t.Errorf("healthz: %d", code)
	}
	// Requests to the relay are counted on the other listener.
	s = mustScrape(t, "http://"+m.MetricsAddr()+"/metrics")
	if v := s.value("fleet_relay_http_requests_total", "route=/healthz", "method=GET", "code=200"); v != 1 {
		t.Errorf("healthz requests counted %v, want 1", v)
	}
}

// TestAgentMetricsWithTheRelay runs the real fleet-agent binary (--hw sim)
// against the relay with --metrics-listen 127.0.0.1:0, finds the bound
// address in its log, and checks both sides: the agent's link is up and its
// heartbeats go out, the relay counts the agent and its heartbeats; after
// SIGTERM the relay's gauge goes back to 0.
func TestAgentMetricsWithTheRelay(t *testing.T) {
	dir := t.TempDir()
	agentBin := goBuild(t, dir, agentPkg)
	m := startMain(t, filepath.Join(dir, "relay.db"))
	ctx := context.Background()
	org, err := m.DB.CreateOrg(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	_, token, err := m.DB.AddDevice(ctx, sqlite.NewDevice{OrgID: org.ID, Name: "gw", SerialNumber: "S1", Model: "IG-500"})
	if err != nil {
		t.Fatal(err)
	}
	relayMetrics := "http://" + m.MetricsAddr() + "/metrics"

	proc := newFakeProc(t)
	cmd := exec.Command(agentBin, "--relay", "http://"+m.Addr(), "--token", token, "--hw", "sim", "--model", "IG-500",
		"--heartbeat", "1s", "--metrics-interval", "1s", "--proc-root", proc.dir, "--sys-root", t.TempDir(), "--state-dir", t.TempDir(),
		"--disk-path", dir, "--passthrough-listen", "none", "--vpn-interface", "none", "--dev-root", "none",
		"--log-format", "json", "--metrics-listen", "127.0.0.1:0")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addrs := make(chan string, 1)
	go func() {
		logs := bufio.NewScanner(stderr)
		for logs.Scan() {
			var line struct{ Msg, Addr string }
			json.Unmarshal(logs.Bytes(), &line)
			if line.Msg == "agent metrics listening" {
				addrs <- line.Addr
			}
		}
	}()
	var agentMetrics string
	select {
	case a := <-addrs:
		agentMetrics = "http://" + a + "/metrics"
	case <-time.After(15 * time.Second):
		t.Fatal("no 'agent metrics listening' log line")
	}

	waitMetric(t, agentMetrics, 1, "fleet_agent_link_connected")
	deadline := time.Now().Add(15 * time.Second)
	for mustScrape(t, agentMetrics).value("fleet_agent_heartbeats_sent_total") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the agent sent fewer than 2 heartbeats")
		}
		time.Sleep(50 * time.Millisecond)
	}
	rs := waitMetric(t, relayMetrics, 1, "fleet_relay_agents_connected")
	for rs.value("fleet_relay_heartbeats_stored_total") < 1 || rs.value("fleet_relay_records_stored_total") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("relay: heartbeats %v, records %v", rs.value("fleet_relay_heartbeats_stored_total"), rs.value("fleet_relay_records_stored_total"))
		}
		time.Sleep(50 * time.Millisecond)
		rs = mustScrape(t, relayMetrics)
	}
	as := mustScrape(t, agentMetrics)
	if v := as.value("fleet_agent_spool_records_total"); v < 1 {
		t.Errorf("agent spooled %v records", v)
	}
	if v := as.value("fleet_agent_channel_error", "channel=uart-1"); v != 0 {
		t.Errorf("uart-1 in error: %v", v)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	waitMetric(t, relayMetrics, 0, "fleet_relay_agents_connected")
	if v := mustScrape(t, relayMetrics).value("fleet_relay_agent_connections_total"); v != 1 {
		t.Errorf("relay accepted %v agent sessions, want 1", v)
	}
}

// TestMetricsNotOnTheAPIByDefault: without --metrics-listen the relay's
// listener answers 404 at /metrics; the metrics are on 127.0.0.1:9464 (or,
// when another process holds that address, not served, with a warning);
// --metrics-listen none serves them nowhere.
func TestMetricsNotOnTheAPIByDefault(t *testing.T) {
	var logs logbuf.Buffer
	m := NewMain(&logs)
	if err := m.ParseFlags([]string{"--db", filepath.Join(t.TempDir(), "relay.db"), "--listen", "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if code, b := get(t, "http://"+m.Addr()+"/metrics", ""); code != 404 {
		t.Errorf("/metrics on the relay's listener by default: %d %s, want 404", code, b)
	}
	switch m.MetricsAddr() {
	case DefaultMetricsListen:
		if v := mustScrape(t, "http://"+m.MetricsAddr()+"/metrics").value("fleet_relay_build_info"); v != 1 {
			t.Errorf("fleet_relay_build_info = %v on %s", v, DefaultMetricsListen)
		}
	case "":
		if !strings.Contains(logs.String(), "default metrics address is taken") {
			t.Errorf("%s taken, and no warning:\n%s", DefaultMetricsListen, logs.String())
		}
	default:
		t.Errorf("metrics on %s by default, want %s", m.MetricsAddr(), DefaultMetricsListen)
	}

	n := NewMain(io.Discard)
	if err := n.ParseFlags([]string{"--db", filepath.Join(t.TempDir(), "relay.db"), "--listen", "127.0.0.1:0", "--metrics-listen", "none"}); err != nil {
		t.Fatal(err)
	}
	if err := n.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	if code, _ := get(t, "http://"+n.Addr()+"/metrics", ""); code != 404 || n.MetricsAddr() != "" {
		t.Errorf("--metrics-listen none: /metrics %d, metrics address %q", code, n.MetricsAddr())
	}
}
