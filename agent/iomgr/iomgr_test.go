package iomgr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/hw/sim"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/serialcfg"
)

// backend is hw/sim with devices that can be unplugged and plugged back in
// while the manager runs, and a count of open ports.
type backend struct {
	sim sim.Backend

	mu      sync.Mutex
	missing map[string]bool
	open    map[string]int
}

func newBackend(missing ...string) *backend {
	b := &backend{missing: map[string]bool{}, open: map[string]int{}}
	for _, d := range missing {
		b.missing[d] = true
	}
	return b
}

func (b *backend) setMissing(dev string, v bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.missing[dev] = v
}

func (b *backend) openPorts() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, v := range b.open {
		n += v
	}
	return n
}

func (b *backend) Present(ch catalog.Channel, dev string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.missing[dev]
}

func (b *backend) Open(ctx context.Context, ch catalog.Channel, dev string, cfg serialcfg.Config) (hw.Port, error) {
	if !b.Present(ch, dev) {
		return nil, hw.ErrDeviceMissing
	}
	p, err := b.sim.Open(ctx, ch, dev, cfg)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.open[ch.ID]++
	b.mu.Unlock()
	return &countedPort{Port: p, b: b, id: ch.ID}, nil
}

type countedPort struct {
	hw.Port
	b    *backend
	id   string
	once sync.Once
}

func (p *countedPort) Close() error {
	p.once.Do(func() {
		p.b.mu.Lock()
		p.b.open[p.id]--
		p.b.mu.Unlock()
	})
	return p.Port.Close()
}

type events struct {
	mu sync.Mutex
	ev []Event
}

func (e *events) emit(ev Event) { e.mu.Lock(); e.ev = append(e.ev, ev); e.mu.Unlock() }
func (e *events) types() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.ev {
		out = append(out, ev.Type)
	}
	return out
}
func (e *events) reset() { e.mu.Lock(); e.ev = nil; e.mu.Unlock() }

func mustManager(tb testing.TB, opts Options) *Manager {
	tb.Helper()
	if opts.Model.Name == "" {
		opts.Model = catalog.MustLookup("IG-500")
	}
	if opts.RecheckInterval == 0 {
		opts.RecheckInterval = time.Hour // tests call Recheck themselves
	}
	m, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	m.Start(context.Background())
	tb.Cleanup(func() { m.Close() })
	return m
}

func state(tb testing.TB, m *Manager, id string) protocol.ChannelState {
	tb.Helper()
	for _, s := range m.States() {
		if s.ID == id {
			return s
		}
	}
	tb.Fatalf("no channel %s", id)
	return protocol.ChannelState{}
}

func TestOpensEveryChannel(t *testing.T) {
	b := newBackend()
	m := mustManager(t, Options{Backend: b})
	st := m.States()
	if len(st) != 8 {
		t.Fatalf("%d channels, want 8", len(st))
	}
	for _, s := range st {
		if !s.Available || s.Error != "" || s.Live == "" {
			t.Errorf("%s: %+v", s.ID, s)
		}
	}
	// rs485 default: poll 2 registers.
	if n := len(strings.Fields(state(t, m, "rs485-1").Live)); n != 2 {
		t.Errorf("rs485-1 live %q", state(t, m, "rs485-1").Live)
	}
	if b.openPorts() != 8 {
		t.Fatalf("%d ports open", b.openPorts())
	}
	m.Close()
	if b.openPorts() != 0 {
		t.Fatalf("%d ports open after Close", b.openPorts())
	}
}

func TestMissingDeviceComesAndGoes(t *testing.T) {
	b := newBackend("/dev/ttyUSB3")
	var ev events
	m := mustManager(t, Options{Backend: b, Devices: map[string]string{"rs485-2": "/dev/ttyUSB3"}, Emit: ev.emit})
	s := state(t, m, "rs485-2")
	if s.Available || s.Error != "device missing" || s.Live != "" {
		t.Fatalf("missing device: %+v", s)
	}
	if s := state(t, m, "rs485-1"); !s.Available || s.Live == "" {
		t.Fatalf("other channel hurt: %+v", s)
	}
	m.Recheck(context.Background())
	if len(ev.types()) != 0 {
		t.Fatalf("events while still missing: %v", ev.types())
	}
	b.setMissing("/dev/ttyUSB3", false)
	m.Recheck(context.Background())
	if s := state(t, m, "rs485-2"); !s.Available || s.Error != "" || s.Live == "" {
		t.Fatalf("after plug-in: %+v", s)
	}
	if got := ev.types(); len(got) != 1 || got[0] != protocol.EventChannelAvailable {
		t.Fatalf("events = %v", got)
	}
	ev.reset()
	b.setMissing("/dev/ttyUSB3", true)
	m.Recheck(context.Background())
	if s := state(t, m, "rs485-2"); s.Available || s.Error != "device missing" {
		t.Fatalf("after unplug: %+v", s)
	}
	if got := ev.types(); len(got) != 1 || got[0] != protocol.EventChannelUnavailable {
		t.Fatalf("events = %v", got)
	}
	if b.openPorts() != 7 {
		t.Fatalf("%d ports open, want 7", b.openPorts())
	}
}

func TestRecheckLoopFindsDevice(t *testing.T) {
	b := newBackend("can0")
	var ev events
	m := mustManager(t, Options{Backend: b, Emit: ev.emit, RecheckInterval: 20 * time.Millisecond})
	b.setMissing("can0", false)
	deadline := time.Now().Add(5 * time.Second)
	for !state(t, m, "canfd-1").Available {
		if time.Now().After(deadline) {
			t.Fatal("canfd-1 never came up")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func rs485(t *testing.T, count int, baud int) serialcfg.Config {
	t.Helper()
	js := `{"kind":"rs485","baudRate":` + itoa(baud) + `,"dataBits":8,"parity":"none","stopBits":1,"mode":"modbus_rtu_master","slaveId":7,
	  "tx":{"enabled":false,"intervalMs":0,"register":0,"value":0},
	  "poll":{"enabled":true,"intervalMs":1000,"register":100,"count":` + itoa(count) + `,"function":"holding"}}`
	var c serialcfg.Config
	if err := json.Unmarshal([]byte(js), &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestApplyLive(t *testing.T) {
	b := newBackend()
	var ev events
	m := mustManager(t, Options{Backend: b, Emit: ev.emit})
	err := m.Apply(context.Background(), protocol.Config{Version: 3, Enabled: true, Mode: "managed",
		Channels: []protocol.ChannelConfig{{ID: "rs485-1", Config: rs485(t, 4, 19200)}}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(state(t, m, "rs485-1").Live)); n != 4 {
		t.Fatalf("rs485-1 live after apply: %q", state(t, m, "rs485-1").Live)
	}
	if m.Version() != 3 {
		t.Fatalf("version %d", m.Version())
	}
	if got := ev.types(); len(got) != 1 || got[0] != protocol.EventConfigApplied {
		t.Fatalf("events = %v", got)
	}
	if b.openPorts() != 8 {
		t.Fatalf("ports reopened instead of applied live: %d", b.openPorts())
	}
	b.mu.Lock()
	opened := b.open["rs485-1"]
	b.mu.Unlock()
	if opened != 1 {
		t.Fatalf("rs485-1 opened %d times", opened)
	}
}

func TestApplyFailureIsolated(t *testing.T) {
	b := newBackend()
	var ev events
	m := mustManager(t, Options{Backend: b, Emit: ev.emit})
	gpio := catalog.MustLookup("IG-500").Channels[4].DefaultConfig()
	err := m.Apply(context.Background(), protocol.Config{Version: 4, Enabled: true, Mode: "managed",
		Channels: []protocol.ChannelConfig{
			{ID: "rs485-1", Config: rs485(t, 3, 1234)}, // baud not allowed: the port refuses it
			{ID: "rs485-2", Config: rs485(t, 5, 9600)},
			{ID: "uart-1", Config: gpio}, // wrong kind
		}})
	if err == nil || !strings.Contains(err.Error(), "rs485-1") || !strings.Contains(err.Error(), "uart-1") || strings.Contains(err.Error(), "rs485-2") {
		t.Fatalf("apply error = %v", err)
	}
	s1 := state(t, m, "rs485-1")
	if !s1.Available || s1.Error == "" || len(strings.Fields(s1.Live)) != 2 {
		t.Fatalf("rs485-1 should keep its previous config and show the error: %+v", s1)
	}
	if s2 := state(t, m, "rs485-2"); s2.Error != "" || len(strings.Fields(s2.Live)) != 5 {
		t.Fatalf("rs485-2 should have applied: %+v", s2)
	}
	if s := state(t, m, "uart-1"); s.Error == "" || !s.Available {
		t.Fatalf("uart-1: %+v", s)
	}
	var serialErrors, applied int
	for _, ty := range ev.types() {
		switch ty {
		case protocol.EventSerialError:
			serialErrors++
		case protocol.EventConfigApplied:
			applied++
		}
	}
	if serialErrors != 2 || applied != 1 {
		t.Fatalf("events = %v", ev.types())
	}
	// A later good config clears the error.
	if err := m.Apply(context.Background(), protocol.Config{Version: 5, Enabled: true, Mode: "managed"}); err != nil {
		t.Fatal(err)
	}
	if s := state(t, m, "rs485-1"); s.Error != "" {
		t.Fatalf("error not cleared: %+v", s)
	}
}

// TestDisableClosesPorts: the serial I/O switch off closes every port,
// keeps them closed through rechecks (a device plugged back in included),
// reports every channel's error as "disabled" and hands the sampler no
// point; on again, every port opens with its configuration and the points
// come back.
func TestDisableClosesPorts(t *testing.T) {
	b := newBackend("/dev/ttyS1")
	pt := &fakePassthrough{}
	m := mustManager(t, Options{Backend: b, Passthrough: pt})
	cfg := pointsConfig(t, true)
	if err := m.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if len(m.Points()) == 0 {
		t.Fatal("no points while enabled")
	}
	cfg.Version, cfg.Enabled, cfg.Mode = 2, false, "both"
	if err := m.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		if b.openPorts() != 0 {
			t.Fatalf("%s: %d ports open while disabled", when, b.openPorts())
		}
		for _, s := range m.States() {
			if s.Live != "" || s.TxOn || s.Error != Disabled || s.PassthroughAddress != "" {
				t.Fatalf("%s: disabled channel reports %+v", when, s)
			}
		}
		if p := m.Points(); len(p) != 0 {
			t.Fatalf("%s: points while disabled: %+v", when, p)
		}
		if pt.ports != 0 {
			t.Fatalf("%s: %d ports passed through while disabled", when, pt.ports)
		}
	}
	check("applied")
	b.setMissing("/dev/ttyS1", false) // rs485-2's adapter plugged in
	m.Recheck(context.Background())
	check("after a recheck")

	cfg.Version, cfg.Enabled = 3, true
	if err := m.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if b.openPorts() != 8 {
		t.Fatalf("%d ports open after re-enable", b.openPorts())
	}
	for _, s := range m.States() {
		if s.Error != "" {
			t.Fatalf("re-enabled channel reports %+v", s)
		}
	}
	if p := m.Points(); len(p) == 0 || p[0].ChannelID != "rs485-1" || len(p[0].Defs) != 2 {
		t.Fatalf("points after re-enable: %+v", p)
	}
}

// pointsConfig is a configuration with two Modbus points on rs485-1.
func pointsConfig(tb testing.TB, enabled bool) protocol.Config {
	tb.Helper()
	var cfg protocol.Config
	if err := json.Unmarshal([]byte(`{"version":1,"mode":"managed","channels":[{"id":"rs485-1","config":
	  {"kind":"rs485","baudRate":19200,"dataBits":8,"parity":"even","stopBits":1,"mode":"modbus_rtu_master","slaveId":3,
	   "points":[{"name":"counter","function":"holding","register":0,"type":"u32"},
	             {"name":"temp","function":"input","register":10,"type":"f32","intervalMs":500,"deadband":0.1}]}}]}`), &cfg); err != nil {
		tb.Fatal(err)
	}
	cfg.Enabled = enabled
	return cfg
}

type fakePassthrough struct {
	mu    sync.Mutex
	mode  string
	ports int
}

func (f *fakePassthrough) Sync(ctx context.Context, mode string, enabled bool, bs []Binding) map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode, f.ports = mode, 0
	out := map[string]string{}
	if mode == "managed" || !enabled {
		return out
	}
	for i, b := range bs {
		if b.Port != nil {
			f.ports++
			out[b.Channel.ID] = "10.8.0.2:" + itoa(7000+i)
		}
	}
	return out
}

func TestPassthroughSeam(t *testing.T) {
	pt := &fakePassthrough{}
	m := mustManager(t, Options{Backend: newBackend(), Passthrough: pt})
	if s := state(t, m, "uart-1"); s.PassthroughAddress != "" {
		t.Fatalf("managed mode exposes %q", s.PassthroughAddress)
	}
	m.Apply(context.Background(), protocol.Config{Version: 2, Enabled: true, Mode: "both"})
	if s := state(t, m, "uart-1"); s.PassthroughAddress != "10.8.0.2:7000" {
		t.Fatalf("passthroughAddress %q", s.PassthroughAddress)
	}
	if pt.mode != "both" || pt.ports != 8 {
		t.Fatalf("passthrough got mode %q with %d ports", pt.mode, pt.ports)
	}
}

func TestUnknownPortOverride(t *testing.T) {
	_, err := New(Options{Backend: newBackend(), Model: catalog.MustLookup("IG-500"), Devices: map[string]string{"rs485-9": "/dev/x"}})
	if err == nil || !strings.Contains(err.Error(), "rs485-9") {
		t.Fatalf("err = %v", err)
	}
}

func TestUSBWatcher(t *testing.T) {
	dev := t.TempDir()
	touch := func(name string) {
		if err := os.WriteFile(filepath.Join(dev, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	touch("ttyUSB0")
	touch("ttyS0")
	var ev events
	w := NewUSBWatcher(dev, ev.emit, testLogger())
	w.Scan()
	if len(ev.types()) != 0 {
		t.Fatalf("events on first scan: %v", ev.types())
	}
	touch("ttyACM1")
	touch("ttyS5")
	w.Scan()
	os.Remove(filepath.Join(dev, "ttyUSB0"))
	w.Scan()
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if len(ev.ev) != 2 || ev.ev[0].Type != protocol.EventUSBAttached || ev.ev[0].Data["device"] != filepath.Join(dev, "ttyACM1") ||
		ev.ev[1].Type != protocol.EventUSBDetached || ev.ev[1].Data["device"] != filepath.Join(dev, "ttyUSB0") {
		t.Fatalf("events = %+v", ev.ev)
	}
}

// flaky fails the first opens of one channel with a busy error.
type flaky struct {
	*backend
	mu    sync.Mutex
	fails int
}

func (f *flaky) Open(ctx context.Context, ch catalog.Channel, dev string, cfg serialcfg.Config) (hw.Port, error) {
	f.mu.Lock()
	if ch.ID == "uart-1" && f.fails > 0 {
		f.fails--
		f.mu.Unlock()
		return nil, errors.New("open /dev/ttyS1: device or resource busy")
	}
	f.mu.Unlock()
	return f.backend.Open(ctx, ch, dev, cfg)
}

// A device that is there but fails to open is retried on every recheck and
// reported once, not on every attempt.
func TestOpenFailureRetriedQuietly(t *testing.T) {
	b := &flaky{backend: newBackend(), fails: 3} // fails at start and on two rechecks
	var ev events
	m := mustManager(t, Options{Backend: b, Emit: ev.emit})
	s := state(t, m, "uart-1")
	if s.Error == "" || !strings.Contains(s.Error, "busy") || !s.Available {
		t.Fatalf("busy uart-1: %+v", s)
	}
	if s := state(t, m, "rs485-1"); s.Error != "" || s.Live == "" {
		t.Fatalf("rs485-1 hurt: %+v", s)
	}
	for i := 0; i < 5; i++ {
		m.Recheck(context.Background())
	}
	if s := state(t, m, "uart-1"); s.Error != "" || s.Live == "" {
		t.Fatalf("uart-1 after the device freed up: %+v", s)
	}
	if got := ev.types(); len(got) != 1 || got[0] != protocol.EventSerialError {
		t.Fatalf("events = %v", got)
	}
}

// TestPoints: the sampler's view of the channels: each channel whose
// configuration names points, with the points of the configuration its
// port runs and the port's readings; a channel whose device is missing
// still lists its points, with no readings (they go stale).
func TestPoints(t *testing.T) {
	m := mustManager(t, Options{Backend: &sim.Backend{Missing: map[string]bool{"gpiochip0:6": true}}})
	if err := m.Apply(context.Background(), pointsConfig(t, true)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range m.Points() {
		var names []string
		for _, d := range c.Defs {
			names = append(names, d.ID)
		}
		got = append(got, fmt.Sprintf("%s %s %d readings", c.ChannelID, strings.Join(names, ","), len(c.Readings)))
		for i, r := range c.Readings {
			if r.Name != c.Defs[i].Name || r.At.IsZero() || r.Err != "" {
				t.Errorf("%s: reading %+v", c.ChannelID, r)
			}
		}
	}
	want := []string{"rs485-1 rs485-1.counter,rs485-1.temp 2 readings", "gpio-1 gpio-1.level 1 readings", "gpio-2 gpio-2.level 0 readings",
		"gpio-3 gpio-3.level 1 readings", "gpio-4 gpio-4.level 1 readings"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("points:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
