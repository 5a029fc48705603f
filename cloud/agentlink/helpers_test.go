package agentlink_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/dialects"
	"github.com/fleet/fleet/test/rig/linktest"
	"github.com/fleet/fleet/test/rig/logbuf"
	"github.com/fleet/fleet/test/rig/testwait"
)

// recorder is a cloud.Observer that keeps every call.
type recorder struct {
	mu         sync.Mutex
	metrics    map[string][]resource.MetricSample
	events     map[string][]resource.Event
	heartbeats map[string][]cloud.Heartbeat
	statuses   map[string][]string // "FROM>TO"
	points     map[string][]protocol.PointSample
}

func newRecorder() *recorder {
	return &recorder{metrics: map[string][]resource.MetricSample{}, events: map[string][]resource.Event{},
		heartbeats: map[string][]cloud.Heartbeat{}, statuses: map[string][]string{}, points: map[string][]protocol.PointSample{}}
}

// PointsStored makes the recorder a cloud.PointObserver.
func (r *recorder) PointsStored(_ context.Context, d cloud.DeviceRef, s []protocol.PointSample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.points[d.ID] = append(r.points[d.ID], s...)
}

func (r *recorder) MetricsStored(_ context.Context, d cloud.DeviceRef, s []resource.MetricSample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.metrics[d.ID] = append(r.metrics[d.ID], s...)
}

func (r *recorder) HeartbeatStored(_ context.Context, d cloud.DeviceRef, hb cloud.Heartbeat) {
	// Kept as it is: an Observer owns what it is given.
	r.mu.Lock()
	defer r.mu.Unlock()
	r.heartbeats[d.ID] = append(r.heartbeats[d.ID], hb)
}

func (r *recorder) EventsStored(_ context.Context, d cloud.DeviceRef, evs []resource.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events[d.ID] = append(r.events[d.ID], evs...)
}

func (r *recorder) StatusChanged(_ context.Context, d cloud.DeviceRef, from, to resource.DeviceStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.statuses[d.ID] = append(r.statuses[d.ID], string(from)+">"+string(to))
}

func (r *recorder) statusList(id string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.statuses[id]...)
}

func (r *recorder) eventsOf(id string) []resource.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events[id])
}

func (r *recorder) eventTypes(id string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events[id] {
		out = append(out, e.Type)
	}
	return out
}

// env is a relay's agent endpoint on a real store (each test runs on
// SQLite and on PostgreSQL, see stores) and a loopback HTTP server.
type env struct {
	t    *testing.T
	s    storetest.Stores
	srv  *agentlink.Server
	base string // the loopback server's http://host:port
	obs  *recorder
	logs *logbuf.Buffer
	org  cloud.Org
	// serial is the store's serial service, observed by the endpoint.
	serial cloud.SerialService
	// codec is what connect's agents offer in their hello: JSON (none, as
	// agents from before CBOR) unless a test sets it.
	codec protocol.Codec
	// otherSeq is the last seq closedAlone's other agent sent.
	otherSeq uint64
}

// stores are the dialects every test of the endpoint runs on.
var stores dialects.Each

func TestMain(m *testing.M) { stores.Main(m) }

// codecs are the codecs the tests that run once per codec use: JSON, as an
// agent from before CBOR speaks it, and CBOR.
var codecs = []protocol.Codec{protocol.JSON, protocol.CBOR}

// forCodecs runs test once per codec and store, on an endpoint of its own.
func forCodecs(t *testing.T, test func(t *testing.T, e *env)) {
	stores.Run(t, func(t *testing.T, open storetest.Opener) {
		for _, c := range codecs {
			t.Run(string(c), func(t *testing.T) {
				e := newEnv(t, open, nil)
				e.codec = c
				test(t, e)
			})
		}
	})
}

func newEnv(t *testing.T, open storetest.Opener, tweak func(*agentlink.Config)) *env {
	t.Helper()
	return newEnvOn(t, open(t, nil), tweak) // the store closes last
}

// newEnvOn is newEnv on stores s.
func newEnvOn(t *testing.T, s storetest.Stores, tweak func(*agentlink.Config)) *env {
	t.Helper()
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	org := storetest.Org(t, s.Store, "Acme")
	obs := newRecorder()
	cfg := agentlink.Config{Store: s.Agent, Observers: []cloud.Observer{obs}, Commands: s.Commands, Logger: log, SweepInterval: 20 * time.Millisecond}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, base := linktest.Serve(t, cfg)
	s.Store.Observe(srv, nil)
	s.Store.ObserveCommands(srv)
	return &env{t: t, s: s, srv: srv, base: base, obs: obs, logs: logs, org: org, serial: s.Store.Serial()}
}

// addDevice registers a device and returns its id and token.
func (e *env) addDevice(model string) (string, string) {
	e.t.Helper()
	d, tok := storetest.Device(e.t, e.s.Store, cloud.NewDevice{OrgID: e.org.ID, Name: "gw", SerialNumber: "SN-" + time.Now().Format("150405.000000000"), Model: model})
	return d.ID, tok
}

func (e *env) url() string { return "ws" + strings.TrimPrefix(e.base, "http") + protocol.Path }

// agent is a minimal in-test agent speaking shared/protocol: JSON until
// the welcome, then the codec it names.
type agent struct {
	t     *testing.T
	ws    *websocket.Conn
	codec protocol.Codec
}

func (e *env) dial(token string) (*agent, *http.Response, error) {
	ws, resp, err := linktest.Dial(e.t, e.base, token)
	if err != nil {
		return nil, resp, err
	}
	return &agent{t: e.t, ws: ws}, resp, nil
}

func (e *env) mustDial(token string) *agent {
	e.t.Helper()
	a, _, err := e.dial(token)
	if err != nil {
		e.t.Fatalf("dial: %v", err)
	}
	return a
}

// connect dials and runs the hello/welcome handshake, offering e.codec
// when the hello offers nothing; the agent then speaks the welcome's codec.
func (e *env) connect(token string, h protocol.Hello) (*agent, protocol.Welcome) {
	e.t.Helper()
	a := e.mustDial(token)
	if h.Codecs == nil && e.codec != "" && e.codec != protocol.JSON {
		h.Codecs = []protocol.Codec{e.codec}
	}
	a.send(protocol.Message{Type: protocol.TypeHello, Hello: &h})
	m := a.recv()
	if m.Type != protocol.TypeWelcome || m.Welcome == nil {
		e.t.Fatalf("want welcome, got %+v", m)
	}
	if want := protocol.ChooseCodec(h.Codecs); m.Welcome.Codec.String() != string(want) {
		e.t.Fatalf("welcome names codec %q for a hello offering %v", m.Welcome.Codec, h.Codecs)
	}
	a.codec = m.Welcome.Codec
	return a, *m.Welcome
}

// send sends m in the agent's codec.
func (a *agent) send(m protocol.Message) {
	a.t.Helper()
	b, err := a.codec.Marshal(&m)
	if err != nil {
		a.t.Fatal(err)
	}
	a.sendFrame(a.codec, b)
}

// sendRaw sends b in a text frame (JSON).
func (a *agent) sendRaw(b []byte) {
	a.t.Helper()
	a.sendFrame(protocol.JSON, b)
}

// sendFrame sends b in the frame type of codec.
func (a *agent) sendFrame(codec protocol.Codec, b []byte) {
	a.t.Helper()
	typ := websocket.MessageText
	if codec.Binary() {
		typ = websocket.MessageBinary
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.ws.Write(ctx, typ, b); err != nil {
		a.t.Fatalf("write: %v", err)
	}
}

// recvTimeout reads one message: text frames are JSON, binary ones CBOR,
// which only a connection speaking CBOR may carry.
func (a *agent) recvTimeout(d time.Duration) (protocol.Message, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	typ, b, err := a.ws.Read(ctx)
	if err != nil {
		return protocol.Message{}, err
	}
	codec := protocol.JSON
	if typ == websocket.MessageBinary {
		codec = protocol.CBOR
	}
	if codec != protocol.JSON && codec != a.codec {
		return protocol.Message{}, fmt.Errorf("a %s message on a connection speaking %s", codec, a.codec)
	}
	var m protocol.Message
	if err := codec.Unmarshal(b, &m); err != nil {
		return protocol.Message{}, err
	}
	if m.Type != protocol.TypeWelcome && codec.String() != a.codec.String() {
		return protocol.Message{}, fmt.Errorf("a %s message %s on a connection speaking %s", codec, m.Type, a.codec)
	}
	return m, nil
}

func (a *agent) recv() protocol.Message {
	a.t.Helper()
	m, err := a.recvTimeout(5 * time.Second)
	if err != nil {
		a.t.Fatalf("read: %v", err)
	}
	return m
}

// expectClose reads until the relay closes and returns the close error.
func (a *agent) expectClose(d time.Duration) websocket.CloseError {
	a.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		_, err := a.recvTimeout(time.Until(deadline))
		if err == nil {
			continue
		}
		var ce websocket.CloseError
		if errors.As(err, &ce) {
			return ce
		}
		a.t.Fatalf("connection ended without a close frame: %v", err)
	}
	a.t.Fatalf("relay did not close within %s", d)
	return websocket.CloseError{}
}

func (a *agent) heartbeat(hb protocol.Heartbeat) {
	a.t.Helper()
	if hb.Status == "" {
		hb.Status = resource.StatusOnline
	}
	if hb.At.IsZero() {
		hb.At = resource.T(time.Now())
	}
	a.send(protocol.Message{Type: protocol.TypeHeartbeat, Heartbeat: &hb})
}

// records sends a batch and returns the acknowledged sequence.
func (a *agent) records(items ...protocol.Record) uint64 {
	a.t.Helper()
	a.send(protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: items}})
	m := a.recv()
	if m.Type != protocol.TypeAck || m.Ack == nil {
		a.t.Fatalf("want ack, got %+v", m)
	}
	return m.Ack.Seq
}

func metricRec(seq uint64, at time.Time, cpu float64) protocol.Record {
	return protocol.Record{Seq: seq, Metric: &resource.MetricSample{CapturedAt: resource.T(at), CPUPct: cpu, MemPct: 40, DiskUsedPct: 50, TempCPU: 45, LoadAvg1: 0.5}}
}

func eventRec(seq uint64, id, typ string, at time.Time) protocol.Record {
	return protocol.Record{Seq: seq, Event: &protocol.Event{ID: id, Type: typ, Severity: resource.SeverityInfo, Message: typ, Data: json.RawMessage(`{"k": 1}`), CreatedAt: resource.T(at)}}
}

func hello() protocol.Hello {
	return protocol.Hello{AgentVersion: "1.0.0", FirmwareVersion: "fw-2.1", Model: "IG-500", DeviceName: "gw-hall-3",
		DeviceLocation: "Hall 3", Timezone: "Europe/Berlin", HeartbeatInterval: protocol.Duration{Duration: time.Hour}}
}

// deviceRow reads what the public API shows of a device.
type deviceRow struct {
	Status, Firmware, IP, AgentName, AgentLocation, AgentTZ string
	LastSeen                                                int64
}

func (e *env) device(id string) deviceRow {
	e.t.Helper()
	d, err := e.s.Store.Devices().Device(context.Background(), e.org.ID, id)
	if err != nil {
		e.t.Fatal(err)
	}
	r := deviceRow{Status: string(d.Status), Firmware: d.FirmwareVersion, IP: d.IPAddress, AgentName: d.AgentDeviceName,
		AgentLocation: d.AgentDeviceLocation, AgentTZ: d.AgentTimezone}
	if d.LastSeen != nil {
		r.LastSeen = d.LastSeen.UnixMilli()
	}
	return r
}

// events returns the device's events of type typ ("" for all), newest
// first, as the public API lists them.
func (e *env) events(id, typ string) []resource.Event {
	e.t.Helper()
	var all []resource.Event
	f := cloud.EventFilter{Page: cloud.Page{Limit: 200}, Type: typ}
	for {
		l, err := e.s.Store.Devices().Events(context.Background(), e.org.ID, id, f)
		if err != nil {
			e.t.Fatal(err)
		}
		all = append(all, l.Data...)
		if !l.Pagination.HasMore {
			return all
		}
		f.Cursor = *l.Pagination.NextCursor
	}
}

// countEvents counts the device's events of type typ for which match (nil:
// any) holds.
func (e *env) countEvents(id, typ string, match func(resource.Event) bool) int {
	e.t.Helper()
	n := 0
	for _, ev := range e.events(id, typ) {
		if match == nil || match(ev) {
			n++
		}
	}
	return n
}

// metrics counts the device's stored samples.
func (e *env) metrics(id string) int {
	e.t.Helper()
	m, err := e.s.Store.Devices().Metrics(context.Background(), e.org.ID, id, cloud.MetricsQuery{From: time.Unix(0, 0), To: time.Now().Add(24 * time.Hour), Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	return len(m.Data)
}

// appliedVersion is the configuration version the store holds as applied
// by the device's agent: no reader of the contract shows it.
func (e *env) appliedVersion(id string) int64 {
	e.t.Helper()
	var v int64
	dialects.QueryRow(e.t, e.s.Store, `SELECT applied_version FROM serial_state WHERE device_id = ?`, []any{id}, &v)
	return v
}

// eventually retries f until it returns "" or d passes.
func eventually(t *testing.T, d time.Duration, f func() string) {
	t.Helper()
	testwait.Until(t, d, f)
}
