package agent

import (
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/test/rig/relaystub"
)

// scrapeAgent reads the agent's /metrics; nil when it does not answer.
func scrapeAgent(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// one returns the value of a family's series whose labels include label
// ("k=v", or "" for any), -1 when there is none.
func one(fams map[string]*dto.MetricFamily, name, label string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
	for _, m := range f.Metric {
		if label != "" {
			k, v, _ := strings.Cut(label, "=")
			found := false
			for _, l := range m.Label {
				found = found || (l.GetName() == k && l.GetValue() == v)
			}
			if !found {
				continue
			}
		}
		return m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue()
	}
	return -1
}

// TestAgentMetrics runs the agent (simulated hardware) against the stub
// relay with --metrics-listen 127.0.0.1:0 and scrapes what an operator
// would check: the link is up, heartbeats go out, the spool drains, the
// pushed configuration is applied; then the link goes down.
func TestAgentMetrics(t *testing.T) {
	r := relaystub.Start("tok-123")
	defer r.Close()
	cfg := testConfig(t, r.URL, t.TempDir())
	cfg.MetricsListen = "127.0.0.1:0"
	cfg.BackoffMin, cfg.BackoffMax = 50*time.Millisecond, 100*time.Millisecond
	// Errors only: the link logs every failed reconnect below.
	a, stop := startAgent(t, cfg, slog.LevelError)
	waitFor(t, "the metrics address", func() bool { return a.MetricsAddr() != "" })
	addr := a.MetricsAddr()

	var fams map[string]*dto.MetricFamily
	waitFor(t, "link up and a heartbeat sent", func() bool {
		fams = scrapeAgent(t, addr)
		return one(fams, "fleet_agent_link_connected", "") == 1 && one(fams, "fleet_agent_heartbeats_sent_total", "") >= 1
	})
	if v := one(fams, "fleet_agent_build_info", "version="+Version); v != 1 {
		t.Errorf("build info %v", v)
	}
	if v := one(fams, "fleet_agent_link_sessions_total", ""); v != 1 {
		t.Errorf("sessions %v, want 1", v)
	}
	for _, ch := range []string{"rs485-1", "uart-1"} {
		if v := one(fams, "fleet_agent_channel_error", "channel="+ch); v != 0 {
			t.Errorf("channel_error{%s} = %v, want 0 (simulated channels work)", ch, v)
		}
		if v := one(fams, "fleet_agent_channel_errors_total", "channel="+ch); v != 0 {
			t.Errorf("channel_errors_total{%s} = %v, want 0", ch, v)
		}
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "fleet_agent_spool_bytes"} {
		if one(fams, name, "") < 0 {
			t.Errorf("no %s", name)
		}
	}

	// agent.started and the first samples are spooled and acknowledged.
	waitFor(t, "records acknowledged", func() bool {
		fams = scrapeAgent(t, addr)
		spooled := one(fams, "fleet_agent_spool_records_total", "")
		return spooled >= 1 && one(fams, "fleet_agent_spool_acknowledged_records_total", "") == spooled &&
			one(fams, "fleet_agent_spool_pending_records", "") == 0
	})
	if v := one(fams, "fleet_agent_spool_oldest_pending_age_seconds", ""); v != 0 {
		t.Errorf("oldest pending age %v with nothing pending", v)
	}

	// A configuration pushed by the relay is applied.
	if err := r.Push(protocol.Config{Version: 7, Enabled: true, Mode: "managed"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "config version 7 applied", func() bool {
		return one(scrapeAgent(t, addr), "fleet_agent_config_version_applied", "") == 7
	})

	// The relay goes away: the link is down, reconnects are counted and
	// records wait in the spool with their age.
	r.Close()
	waitFor(t, "link down with reconnects and pending records", func() bool {
		fams = scrapeAgent(t, addr)
		return one(fams, "fleet_agent_link_connected", "") == 0 && one(fams, "fleet_agent_link_reconnects_total", "") >= 1 &&
			one(fams, "fleet_agent_spool_pending_records", "") >= 1
	})
	if age := one(fams, "fleet_agent_spool_oldest_pending_age_seconds", ""); age < 0 || age > 60 {
		t.Errorf("oldest pending age %v s", age)
	}

	stop()
	if scrapeAgent(t, addr) != nil {
		t.Error("the metrics server still answers after the agent stopped")
	}
}

// TestAgentMetricsOffByDefault: without --metrics-listen nothing is served.
func TestAgentMetricsOffByDefault(t *testing.T) {
	r := relaystub.Start("tok-123")
	defer r.Close()
	cfg := testConfig(t, r.URL, t.TempDir())
	if cfg.MetricsListen != "" {
		t.Fatalf("default --metrics-listen %q", cfg.MetricsListen)
	}
	a, err := New(cfg, slog.New(slog.DiscardHandler), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a.prom != nil {
		t.Error("metrics built without --metrics-listen")
	}
	a.closeParts()
}

// TestMetricsListenConfig: --metrics-listen from the config file key and
// the environment; a value that is not HOST:PORT is refused, and so is one
// that listens on every interface (empty or unspecified host), while loopback,
// localhost and specific addresses are accepted.
func TestMetricsListenConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(file, []byte("relay: http://r:8080\ntoken: t\nmetrics-listen: 10.8.0.12:9465\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig([]string{"--config", file}, io.Discard)
	if err != nil || c.MetricsListen != "10.8.0.12:9465" {
		t.Fatalf("from the file: %q %v", c.MetricsListen, err)
	}
	t.Setenv("FLEET_METRICS_LISTEN", "127.0.0.1:9465")
	if c, err = ParseConfig([]string{"--config", file}, io.Discard); err != nil || c.MetricsListen != "127.0.0.1:9465" {
		t.Fatalf("from the environment: %q %v", c.MetricsListen, err)
	}
	if !strings.Contains(c.String(), `metrics-listen="127.0.0.1:9465"`) {
		t.Errorf("startup line %q", c.String())
	}
	if _, err = ParseConfig([]string{"--config", file, "--metrics-listen", "9465"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--metrics-listen") {
		t.Errorf("--metrics-listen 9465: %v", err)
	}
	for _, addr := range []string{":9465", "0.0.0.0:9465", "[::]:9465", "[::ffff:0.0.0.0]:9465"} {
		_, err = ParseConfig([]string{"--config", file, "--metrics-listen", addr}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--metrics-listen") || !strings.Contains(err.Error(), "127.0.0.1:9465 or the VPN address") {
			t.Errorf("--metrics-listen %s: %v, want a refusal naming a local address", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:9465", "[::1]:9465", "localhost:9465", "10.8.0.12:9465", "127.0.0.1:0"} {
		if c, err = ParseConfig([]string{"--config", file, "--metrics-listen", addr}, io.Discard); err != nil || c.MetricsListen != addr {
			t.Errorf("--metrics-listen %s: %q %v", addr, c.MetricsListen, err)
		}
	}
}
