package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// stubRelay is an in-test relay speaking shared/protocol on loopback: it
// stores records by seq, acks every batch, and can push a Config.
type stubRelay struct {
	srv *httptest.Server

	mu         sync.Mutex
	hellos     []protocol.Hello
	heartbeats []protocol.Heartbeat
	records    map[uint64]protocol.Record
	applied    []protocol.ConfigApplied
	conns      []*websocket.Conn
}

func newStubRelay(t *testing.T) *stubRelay {
	r := &stubRelay{records: map[uint64]protocol.Record{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *stubRelay) serve(w http.ResponseWriter, req *http.Request) {
	if req.Header.Get("Authorization") != "Bearer tok-123" {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	c, err := websocket.Accept(w, req, &websocket.AcceptOptions{Subprotocols: []string{protocol.Subprotocol}})
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx := req.Context()
	r.mu.Lock()
	r.conns = append(r.conns, c)
	r.mu.Unlock()
	var last uint64
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		var m protocol.Message
		if err := json.Unmarshal(b, &m); err != nil {
			return
		}
		var reply *protocol.Message
		r.mu.Lock()
		switch m.Type {
		case protocol.TypeHello:
			r.hellos = append(r.hellos, *m.Hello)
			for s := range r.records {
				last = max(last, s)
			}
			reply = &protocol.Message{Type: protocol.TypeWelcome, Welcome: &protocol.Welcome{DeviceID: "dev-1", LastSeq: last}}
		case protocol.TypeHeartbeat:
			r.heartbeats = append(r.heartbeats, *m.Heartbeat)
		case protocol.TypeConfigApplied:
			r.applied = append(r.applied, *m.ConfigApplied)
		case protocol.TypeRecords:
			for _, it := range m.Records.Items {
				r.records[it.Seq] = it
			}
			reply = &protocol.Message{Type: protocol.TypeAck, Ack: &protocol.Ack{Seq: m.Records.Items[len(m.Records.Items)-1].Seq}}
		}
		r.mu.Unlock()
		if reply != nil {
			b, _ := json.Marshal(reply)
			if c.Write(ctx, websocket.MessageText, b) != nil {
				return
			}
		}
	}
}

func (r *stubRelay) push(t *testing.T, cfg protocol.Config) {
	t.Helper()
	r.mu.Lock()
	c := r.conns[len(r.conns)-1]
	r.mu.Unlock()
	b, _ := json.Marshal(protocol.Message{Type: protocol.TypeConfig, Config: &cfg})
	if err := c.Write(context.Background(), websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
}

func (r *stubRelay) events(typ string) []protocol.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []protocol.Event
	for seq := uint64(1); seq <= uint64(len(r.records))+100; seq++ {
		if rec, ok := r.records[seq]; ok && rec.Event != nil && rec.Event.Type == typ {
			out = append(out, *rec.Event)
		}
	}
	return out
}

func (r *stubRelay) metrics() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.records {
		if rec.Metric != nil {
			n++
		}
	}
	return n
}

func (r *stubRelay) lastHeartbeat() protocol.Heartbeat {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.heartbeats) == 0 {
		return protocol.Heartbeat{}
	}
	return r.heartbeats[len(r.heartbeats)-1]
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
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
	a, err := New(cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), Options{})
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
	return stop
}

func rs485Config(count int) json.RawMessage {
	return json.RawMessage(`{"kind":"rs485","baudRate":19200,"dataBits":8,"parity":"even","stopBits":1,"mode":"modbus_rtu_master","slaveId":3,
	  "tx":{"enabled":false,"intervalMs":0,"register":0,"value":0},
	  "poll":{"enabled":true,"intervalMs":1000,"register":10,"count":` + string(rune('0'+count)) + `,"function":"input"}}`)
}

func TestAgentEndToEndWithStubRelay(t *testing.T) {
	r := newStubRelay(t)
	state := t.TempDir()
	cfg := testConfig(t, r.srv.URL, state)
	stop := runAgent(t, cfg)

	waitFor(t, "hello and heartbeat", func() bool { return r.lastHeartbeat().Status != "" })
	r.mu.Lock()
	h := r.hellos[0]
	r.mu.Unlock()
	if h.AgentVersion != Version || h.Model != "IG-500" || h.DeviceName != "gw-test" || h.DeviceLocation != "Hall 2" ||
		h.Timezone != "Europe/Berlin" || h.FirmwareVersion != "fw-9" || h.HeartbeatInterval.Duration != time.Second ||
		h.MetricsInterval.Duration != time.Second || h.AppliedVersion != 0 {
		t.Fatalf("hello = %+v", h)
	}
	hb := r.lastHeartbeat()
	if hb.Status != resource.StatusOnline || len(hb.Channels) != 8 || hb.VPN != nil {
		t.Fatalf("heartbeat = %+v", hb)
	}
	for _, ch := range hb.Channels {
		if !ch.Available || ch.Live == "" {
			t.Fatalf("channel %+v", ch)
		}
	}
	waitFor(t, "agent.started", func() bool { return len(r.events(protocol.EventAgentStarted)) == 1 })
	var started map[string]any
	json.Unmarshal(r.events(protocol.EventAgentStarted)[0].Data, &started)
	if started["version"] != Version {
		t.Fatalf("agent.started data %v", started)
	}
	waitFor(t, "two metric samples", func() bool { return r.metrics() >= 2 })
	r.mu.Lock()
	for _, rec := range r.records {
		// The fixture tree: memPct 61.25, tempCpu 47.25, loadAvg1 0.42.
		if rec.Metric != nil && (rec.Metric.MemPct != 61.25 || rec.Metric.TempCPU != 47.25 || rec.Metric.LoadAvg1 != 0.42) {
			t.Errorf("metric %+v", rec.Metric)
		}
	}
	r.mu.Unlock()

	// A configuration is applied live and reported.
	var cc protocol.ChannelConfig
	json.Unmarshal([]byte(`{"id":"rs485-1","config":`+string(rs485Config(5))+`}`), &cc)
	r.push(t, protocol.Config{Version: 5, Enabled: true, Mode: "managed", Channels: []protocol.ChannelConfig{cc}})
	waitFor(t, "config applied", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.applied) == 1 })
	r.mu.Lock()
	if r.applied[0].Version != 5 || r.applied[0].Error != "" {
		t.Fatalf("applied %+v", r.applied[0])
	}
	r.mu.Unlock()
	waitFor(t, "heartbeat with new config", func() bool {
		hb := r.lastHeartbeat()
		return hb.AppliedVersion == 5 && len(hb.Channels) == 8 && len(strings.Fields(hb.Channels[1].Live)) == 5
	})
	waitFor(t, "serial.config_applied event", func() bool { return len(r.events(protocol.EventConfigApplied)) == 1 })

	// The status file changes what the heartbeat reports.
	os.WriteFile(filepath.Join(state, "status"), []byte("UPDATING\n"), 0o600)
	waitFor(t, "UPDATING heartbeat", func() bool { return r.lastHeartbeat().Status == resource.StatusUpdating })
	os.Remove(filepath.Join(state, "status"))

	// Graceful stop: agent.stopped reaches the relay before Run returns.
	stop()
	if n := len(r.events(protocol.EventAgentStopped)); n != 1 {
		t.Fatalf("%d agent.stopped events stored", n)
	}

	// A restart runs the saved configuration and says so in Hello; nothing
	// already stored is sent again.
	before := len(r.records)
	stop2 := runAgent(t, cfg)
	waitFor(t, "second hello", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.hellos) == 2 })
	r.mu.Lock()
	if r.hellos[1].AppliedVersion != 5 {
		t.Fatalf("hello after restart: appliedVersion %d", r.hellos[1].AppliedVersion)
	}
	r.mu.Unlock()
	waitFor(t, "second agent.started", func() bool { return len(r.events(protocol.EventAgentStarted)) == 2 })
	stop2()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.records) <= before {
		t.Fatal("no new records after restart")
	}
	for seq := uint64(1); seq <= uint64(len(r.records)); seq++ {
		if _, ok := r.records[seq]; !ok {
			t.Fatalf("gap at seq %d of %d", seq, len(r.records))
		}
	}
}
