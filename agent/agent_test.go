package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/relaystub"
	"github.com/fleet/fleet/test/rig/testwait"
)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, what, 15*time.Second, cond)
}

func testConfig(t *testing.T, relayURL, stateDir string) Config {
	c, err := ParseConfig([]string{
		"--relay", relayURL, "--token", "tok-123", "--hw", "sim", "--model", "IG-500",
		"--state-dir", stateDir, "--heartbeat", "1s", "--metrics-interval", "1s",
		"--proc-root", "metrics/testdata/normal/proc", "--sys-root", "metrics/testdata/normal/sys",
		"--name", "gw-test", "--location", "Hall 2", "--timezone", "Europe/Berlin", "--firmware-version", "fw-9",
		"--dev-root", "none", "--passthrough-listen", "none",
	}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func runAgent(t *testing.T, cfg Config) (stop func()) {
	t.Helper()
	_, stop = startAgent(t, cfg, slog.LevelWarn)
	return stop
}

// startAgent runs the agent cfg describes, logging from level up, until
// stop or the end of the test.
func startAgent(t *testing.T, cfg Config, level slog.Level) (a *Agent, stop func()) {
	t.Helper()
	return startAgentOpts(t, cfg, level, Options{})
}

// startAgentOpts is startAgent with opts.
func startAgentOpts(t *testing.T, cfg Config, level slog.Level, opts Options) (a *Agent, stop func()) {
	t.Helper()
	a, err := New(cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Error("agent did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return a, stop
}

func rs485Config(count int) json.RawMessage {
	return json.RawMessage(`{"kind":"rs485","baudRate":19200,"dataBits":8,"parity":"even","stopBits":1,"mode":"modbus_rtu_master","slaveId":3,
	  "tx":{"enabled":false,"intervalMs":0,"register":0,"value":0},
	  "poll":{"enabled":true,"intervalMs":1000,"register":10,"count":` + string(rune('0'+count)) + `,"function":"input"}}`)
}

func TestAgentEndToEndWithStubRelay(t *testing.T) {
	r := relaystub.Start("tok-123")
	defer r.Close()
	state := t.TempDir()
	cfg := testConfig(t, r.URL, state)
	stop := runAgent(t, cfg)

	waitFor(t, "hello and heartbeat", func() bool { return r.LastHeartbeat().Status != "" })
	r.Mu.Lock()
	h := r.Hellos[0]
	r.Mu.Unlock()
	if h.AgentVersion != Version || h.Model != "IG-500" || h.DeviceName != "gw-test" || h.DeviceLocation != "Hall 2" ||
		h.Timezone != "Europe/Berlin" || h.FirmwareVersion != "fw-9" || h.HeartbeatInterval.Duration != time.Second ||
		h.MetricsInterval.Duration != time.Second || h.AppliedVersion != 0 {
		t.Fatalf("hello = %+v", h)
	}
	hb := r.LastHeartbeat()
	if hb.Status != resource.StatusOnline || len(hb.Channels) != 8 || hb.VPN != nil {
		t.Fatalf("heartbeat = %+v", hb)
	}
	for _, ch := range hb.Channels {
		if !ch.Available || ch.Live == "" {
			t.Fatalf("channel %+v", ch)
		}
	}
	waitFor(t, "agent.started", func() bool { return len(r.Events(protocol.EventAgentStarted)) == 1 })
	var started map[string]any
	json.Unmarshal(r.Events(protocol.EventAgentStarted)[0].Data, &started)
	if started["version"] != Version {
		t.Fatalf("agent.started data %v", started)
	}
	waitFor(t, "two metric samples", func() bool { return r.Metrics() >= 2 })
	r.Mu.Lock()
	for _, rec := range r.Records {
		// The fixture tree: memPct 61.25, tempCpu 47.25, loadAvg1 0.42.
		if rec.Metric != nil && (rec.Metric.MemPct != 61.25 || rec.Metric.TempCPU != 47.25 || rec.Metric.LoadAvg1 != 0.42) {
			t.Errorf("metric %+v", rec.Metric)
		}
	}
	r.Mu.Unlock()

	// A configuration is applied live and reported.
	var cc protocol.ChannelConfig
	json.Unmarshal([]byte(`{"id":"rs485-1","config":`+string(rs485Config(5))+`}`), &cc)
	if err := r.Push(protocol.Config{Version: 5, Enabled: true, Mode: "managed", Channels: []protocol.ChannelConfig{cc}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "config applied", func() bool { r.Mu.Lock(); defer r.Mu.Unlock(); return len(r.Applied) == 1 })
	r.Mu.Lock()
	if r.Applied[0].Version != 5 || r.Applied[0].Error != "" {
		t.Fatalf("applied %+v", r.Applied[0])
	}
	r.Mu.Unlock()
	waitFor(t, "heartbeat with new config", func() bool {
		hb := r.LastHeartbeat()
		return hb.AppliedVersion == 5 && len(hb.Channels) == 8 && len(strings.Fields(hb.Channels[1].Live)) == 5
	})
	waitFor(t, "serial.config_applied event", func() bool { return len(r.Events(protocol.EventConfigApplied)) == 1 })

	// The status file changes what the heartbeat reports.
	os.WriteFile(filepath.Join(state, "status"), []byte("UPDATING\n"), 0o600)
	waitFor(t, "UPDATING heartbeat", func() bool { return r.LastHeartbeat().Status == resource.StatusUpdating })
	os.Remove(filepath.Join(state, "status"))

	// Graceful stop: agent.stopped reaches the relay before Run returns.
	stop()
	if n := len(r.Events(protocol.EventAgentStopped)); n != 1 {
		t.Fatalf("%d agent.stopped events stored", n)
	}

	// A restart runs the saved configuration and says so in Hello; nothing
	// already stored is sent again.
	before := len(r.Records)
	stop2 := runAgent(t, cfg)
	waitFor(t, "second hello", func() bool { r.Mu.Lock(); defer r.Mu.Unlock(); return len(r.Hellos) == 2 })
	r.Mu.Lock()
	if r.Hellos[1].AppliedVersion != 5 {
		t.Fatalf("hello after restart: appliedVersion %d", r.Hellos[1].AppliedVersion)
	}
	r.Mu.Unlock()
	waitFor(t, "second agent.started", func() bool { return len(r.Events(protocol.EventAgentStarted)) == 2 })
	if n := len(r.Events(protocol.EventConfigApplied)); n != 1 {
		t.Fatalf("restoring the saved config announced it again: %d serial.config_applied events", n)
	}
	stop2()
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if len(r.Records) <= before {
		t.Fatal("no new records after restart")
	}
	for seq := uint64(1); seq <= uint64(len(r.Records)); seq++ {
		if _, ok := r.Records[seq]; !ok {
			t.Fatalf("gap at seq %d of %d", seq, len(r.Records))
		}
	}
}

// With --vpn-interface the heartbeat carries the tunnel state and a missing
// tunnel raises alert.vpn_down (agent/vpnwatch).
func TestAgentReportsVPN(t *testing.T) {
	r := relaystub.Start("tok-123")
	defer r.Close()
	cfg := testConfig(t, r.URL, t.TempDir())
	cfg.VPNInterface = "wgmissing0"
	runAgent(t, cfg)
	waitFor(t, "heartbeat with VPN state", func() bool {
		v := r.LastHeartbeat().VPN
		return v != nil && v.InterfaceName == "wgmissing0" && !v.Up
	})
	waitFor(t, "alert.vpn_down", func() bool { return len(r.Events(protocol.EventVPNDown)) == 1 })
}

// Records dropped by the spool's size bound are reported as spool.dropped
// with their count, and the report itself reaches the relay.
func TestSpoolDroppedEvent(t *testing.T) {
	r := relaystub.Start("tok-123")
	defer r.Close()
	cfg := testConfig(t, r.URL, t.TempDir())
	cfg.SpoolMaxBytes = 64 << 10
	a, err := New(cfg, slog.New(slog.DiscardHandler), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2000; i++ { // ~300 KiB of events, offline
		a.event(protocol.EventSerialError, resource.SeverityError, strings.Repeat("x", 100), map[string]any{"i": i})
	}
	a.reportDropped()
	a.closeParts()
	runAgent(t, cfg)
	// Every event is either stored or counted in a spool.dropped report.
	accounted := func() (kept, dropped uint64) {
		for _, ev := range r.Events(protocol.EventSpoolDropped) {
			var data map[string]uint64
			json.Unmarshal(ev.Data, &data)
			dropped += data["count"]
		}
		return uint64(len(r.Events(protocol.EventSerialError))), dropped
	}
	waitFor(t, "every event stored or counted as dropped", func() bool { k, d := accounted(); return k+d == 2000 })
	kept, dropped := accounted()
	if dropped == 0 || kept == 0 {
		t.Fatalf("kept %d, dropped %d", kept, dropped)
	}
	// The newest survive, the oldest went.
	evs := r.Events(protocol.EventSerialError)
	var last map[string]int
	json.Unmarshal(evs[len(evs)-1].Data, &last)
	if last["i"] != 1999 {
		t.Fatalf("newest kept event is %v", last)
	}
}

// A spool segment tampered with while the agent was stopped (records
// repeating earlier numbers) is repaired at start and reported as
// spool.quarantined; every original record reaches the relay once.
func TestSpoolQuarantinedEvent(t *testing.T) {
	r := relaystub.Start("tok-123")
	defer r.Close()
	cfg := testConfig(t, r.URL, t.TempDir())
	a, err := New(cfg, slog.New(slog.DiscardHandler), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		a.event(protocol.EventSerialError, resource.SeverityError, "offline", map[string]any{"i": i})
	}
	a.closeParts()
	dir := filepath.Join(cfg.StateDir, "spool")
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(segs) != 1 {
		t.Fatalf("segments %v", segs)
	}
	b, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	// A later segment holding a copy of the same records (the same
	// numbers): Read would return each twice.
	if err := os.WriteFile(filepath.Join(dir, "00000000000000000100.seg"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	runAgent(t, cfg)
	waitFor(t, "spool.quarantined", func() bool { return len(r.Events(protocol.EventSpoolQuarantined)) == 1 })
	var data map[string]any
	json.Unmarshal(r.Events(protocol.EventSpoolQuarantined)[0].Data, &data)
	if data["disordered"] != float64(5) || data["segment"] != "00000000000000000100.seg" {
		t.Errorf("spool.quarantined data %v", data)
	}
	waitFor(t, "the five events", func() bool { return len(r.Events(protocol.EventSerialError)) >= 5 })
	time.Sleep(200 * time.Millisecond)
	if n := len(r.Events(protocol.EventSerialError)); n != 5 {
		t.Errorf("%d serial.error events stored, want 5", n)
	}
}

// TestHeartbeatCarriesPointStates: the heartbeat's channels carry their
// points' latest state from the sampler: on the simulator, each gpio
// input's level, read (good, 0 or 1, stamped) within a heartbeat or two.
func TestHeartbeatCarriesPointStates(t *testing.T) {
	r := relaystub.Start("tok-123")
	defer r.Close()
	runAgent(t, testConfig(t, r.URL, t.TempDir()))
	waitFor(t, "the gpio inputs' levels in a heartbeat", func() bool {
		good := 0
		for _, ch := range r.LastHeartbeat().Channels {
			for _, p := range ch.Points {
				if strings.HasPrefix(ch.ID, "gpio-") && p.Name == "level" && p.Quality == "good" && !p.At.IsZero() && (p.Value == 0 || p.Value == 1) {
					good++
				}
			}
		}
		return good == 4
	})
	for _, ch := range r.LastHeartbeat().Channels {
		if !strings.HasPrefix(ch.ID, "gpio-") && len(ch.Points) != 0 {
			t.Errorf("channel %s without configured points reports %+v", ch.ID, ch.Points)
		}
	}
}

// TestSerialSwitchOff: a configuration with enabled false (the serial I/O
// switch off) leaves every channel reporting "disabled" with nothing live
// and no point in the heartbeat, and no point sample recorded; enabled
// true brings the channels and the points back.
func TestSerialSwitchOff(t *testing.T) {
	r := relaystub.Start("tok-123")
	defer r.Close()
	runAgent(t, testConfig(t, r.URL, t.TempDir()))
	waitFor(t, "a heartbeat with points", func() bool { hb := r.LastHeartbeat(); return len(hb.Channels) == 8 && len(hb.Channels[4].Points) == 1 })
	if err := r.Push(protocol.Config{Version: 2, Enabled: false, Mode: "managed"}); err != nil {
		t.Fatal(err)
	}
	off := func(hb protocol.Heartbeat) bool {
		if hb.AppliedVersion != 2 || len(hb.Channels) != 8 {
			return false
		}
		for _, ch := range hb.Channels {
			if ch.Error != "disabled" || ch.Live != "" || ch.TxOn || len(ch.Points) != 0 {
				return false
			}
		}
		return true
	}
	waitFor(t, "every channel disabled in a heartbeat", func() bool { return off(r.LastHeartbeat()) })
	samples := func() int {
		r.Mu.Lock()
		defer r.Mu.Unlock()
		n := 0
		for _, rec := range r.Records {
			if rec.Points != nil {
				n += len(rec.Points.Samples)
			}
		}
		return n
	}
	before := samples()
	time.Sleep(2500 * time.Millisecond) // more than two heartbeats and a gpio point's interval
	if hb := r.LastHeartbeat(); !off(hb) {
		t.Fatalf("heartbeat while disabled: %+v", hb.Channels)
	}
	if n := samples(); n != before {
		t.Errorf("%d point samples recorded while disabled", n-before)
	}
	if err := r.Push(protocol.Config{Version: 3, Enabled: true, Mode: "managed"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "channels and points back", func() bool {
		hb := r.LastHeartbeat()
		return hb.AppliedVersion == 3 && len(hb.Channels) == 8 && hb.Channels[1].Error == "" && hb.Channels[1].Live != "" && len(hb.Channels[4].Points) == 1
	})
}
