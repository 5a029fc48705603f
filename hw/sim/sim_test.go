package sim_test

import (
	"context"
	"math"
	"os"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/dbcimport"
	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/hw/sim"
	"github.com/fleet/fleet/shared/serialcfg"
)

// clock is a settable time for the simulator.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func open(t *testing.T, c *clock, channel string, cfg serialcfg.Config) (hw.Port, hw.PointReader) {
	t.Helper()
	m, _ := catalog.Lookup("IG-500")
	ch, ok := m.Channel(channel)
	if !ok {
		t.Fatalf("IG-500 has no %s", channel)
	}
	b := &sim.Backend{Now: c.now}
	p, err := b.Open(context.Background(), ch, ch.Device, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	r, ok := p.(hw.PointReader)
	if !ok {
		t.Fatal("a simulated port is no hw.PointReader")
	}
	return p, r
}

func byName(rs []hw.PointReading) map[string]hw.PointReading {
	m := map[string]hw.PointReading{}
	for _, r := range rs {
		m[r.Name] = r
	}
	return m
}

// TestRS485Points: a float point is a room temperature moving slowly, the
// same for the same name and time; a counter counts up once a second with
// scale and offset applied; a bool toggles slowly; live is as before.
func TestRS485Points(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
	cfg := serialcfg.Config{Kind: serialcfg.KindRS485, RS485: &serialcfg.RS485{Kind: "rs485", BaudRate: 9600, DataBits: 8, Parity: "none", StopBits: 1,
		Mode: "modbus_rtu_master", SlaveID: 1,
		Poll: &serialcfg.ModbusPoll{Enabled: true, IntervalMs: 1000, Register: 0, Count: 2, Function: "holding"},
		Points: []serialcfg.RS485Point{
			{Name: "boiler_temp", Function: "holding", Register: 0, Type: "f32", Unit: "°C"},
			{Name: "parts_made", Function: "holding", Register: 2, Type: "u32"},
			{Name: "flow", Function: "input", Register: 4, Type: "i16", Scale: 0.5, Offset: 10},
			{Name: "running", Function: "coil", Register: 0, Type: "bool"},
		}}}
	port, r := open(t, c, "rs485-1", cfg)
	_, twin := open(t, c, "rs485-2", cfg)
	liveBefore := port.Telemetry().Live

	first := byName(r.ReadPoints())
	if got := r.ReadPoints(); len(got) != 4 || got[0].Name != "boiler_temp" || got[3].Name != "running" {
		t.Fatalf("points out of configuration order: %+v", got)
	}
	if v := first["boiler_temp"].Value; v < 20 || v > 23 || float64(float32(v)) != v || first["boiler_temp"].At != c.t {
		t.Errorf("boiler_temp %+v, want about 21.5 as an f32, read now", first["boiler_temp"])
	}
	if byName(twin.ReadPoints())["boiler_temp"].Value != first["boiler_temp"].Value {
		t.Error("the same point name at the same time reads differently")
	}

	temps := map[float64]bool{}
	bools := map[float64]bool{}
	prev := first
	for i := 1; i <= 120; i++ {
		c.t = c.t.Add(time.Second)
		now := byName(r.ReadPoints())
		if d := math.Abs(now["boiler_temp"].Value - prev["boiler_temp"].Value); d > 0.05 {
			t.Fatalf("boiler_temp jumped by %v in a second", d)
		}
		if d := now["parts_made"].Value - prev["parts_made"].Value; d != 1 {
			t.Fatalf("parts_made moved by %v in a second, want 1", d)
		}
		if d := now["flow"].Value - prev["flow"].Value; d != 0.5 && now["flow"].Value != 10 {
			t.Fatalf("flow (i16 × 0.5 + 10) moved by %v in a second", d)
		}
		temps[math.Round(now["boiler_temp"].Value*10)] = true
		bools[now["running"].Value] = true
		prev = now
	}
	if len(temps) < 3 {
		t.Errorf("boiler_temp took %d values (to 0.1) in two minutes, want it moving", len(temps))
	}
	if len(bools) != 2 || !bools[0] || !bools[1] {
		t.Errorf("running took values %v in two minutes, want 0 and 1", bools)
	}
	c.t = c.t.Add(-120 * time.Second)
	if port.Telemetry().Live != liveBefore {
		t.Errorf("live changed with points configured: %q, was %q", port.Telemetry().Live, liveBefore)
	}
}

// TestCANPointsFromDemoDBC imports deploy/demo/demo.dbc as make run does:
// the simulated peer's frames carry every one of its signals, moving
// smoothly within their ranges; a point of an id the peer never sends is
// never read; live is the 0x018 frame as before.
func TestCANPointsFromDemoDBC(t *testing.T) {
	src, err := os.ReadFile("../../deploy/demo/demo.dbc")
	if err != nil {
		t.Fatal(err)
	}
	pts, err := dbcimport.Points("demo.dbc", src, nil)
	if err != nil {
		t.Fatal(err)
	}
	pts = append(pts,
		serialcfg.CANPoint{Name: "other", CanID: "0x321", StartBit: 0, Length: 8},
		serialcfg.CANPoint{Name: "beyond", CanID: "0x100", StartBit: 64, Length: 8})
	c := &clock{t: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
	cfg := serialcfg.Config{Kind: serialcfg.KindCANFD, CANFD: &serialcfg.CANFD{Kind: "canfd", NominalBitrate: 500000, DataBitrate: 2000000, SamplePoint: 0.875, Points: pts}}
	port, r := open(t, c, "canfd-1", cfg)

	ranges := map[string][2]float64{"engine_speed": {800, 3000}, "coolant_temp": {72, 84}, "vehicle_speed": {20, 80}}
	seen := map[string]map[int]bool{}
	var prev map[string]hw.PointReading
	for i := 0; i < 600; i++ {
		got := byName(r.ReadPoints())
		for name, rg := range ranges {
			g := got[name]
			if g.Err != "" || g.At.IsZero() || g.Value < rg[0] || g.Value > rg[1] {
				t.Fatalf("t+%ds %s = %+v, want %v..%v", i, name, g, rg[0], rg[1])
			}
			if prev != nil && math.Abs(g.Value-prev[name].Value) > (rg[1]-rg[0])/10 {
				t.Fatalf("%s jumped from %v to %v in a second", name, prev[name].Value, g.Value)
			}
			if seen[name] == nil {
				seen[name] = map[int]bool{}
			}
			seen[name][int(g.Value)] = true
		}
		if o := got["other"]; !o.At.IsZero() {
			t.Fatalf("a point of an id the peer never sends was read: %+v", o)
		}
		if b := got["beyond"]; b.Err != "frame 0x100 too short for signal (8 bytes)" {
			t.Fatalf("a signal beyond the 8-byte frame: %+v", b)
		}
		if i == 0 && port.Telemetry().Live != "018#"+liveHex(c.t) {
			t.Errorf("live %q", port.Telemetry().Live)
		}
		prev = got
		c.t = c.t.Add(time.Second)
	}
	for name, vs := range seen {
		if len(vs) < 5 {
			t.Errorf("%s took only %d whole values in ten minutes", name, len(vs))
		}
	}
}

func liveHex(t time.Time) string {
	s := t.Unix()
	const hex = "0123456789ABCDEF"
	b := []byte{byte(s >> 8), byte(s)}
	return string([]byte{hex[b[0]>>4], hex[b[0]&15], hex[b[1]>>4], hex[b[1]&15]})
}

// TestGPIOLevelPoint: an input's level point is the level live shows; an
// output has none.
func TestGPIOLevelPoint(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_001, 0)}
	in, r := open(t, c, "gpio-1", serialcfg.Config{Kind: serialcfg.KindGPIO, GPIO: &serialcfg.GPIO{Kind: "gpio", Direction: "in", Pull: "up"}})
	for i := 0; i < 3; i++ {
		got := r.ReadPoints()
		want := 0.0
		if in.Telemetry().Live == "1" {
			want = 1
		}
		if len(got) != 1 || got[0].Name != "level" || got[0].Value != want || got[0].At != c.t {
			t.Fatalf("level point %+v, live %q", got, in.Telemetry().Live)
		}
		c.t = c.t.Add(time.Second)
	}
	_, out := open(t, c, "gpio-2", serialcfg.Config{Kind: serialcfg.KindGPIO, GPIO: &serialcfg.GPIO{Kind: "gpio", Direction: "out", Pull: "none"}})
	if got := out.ReadPoints(); len(got) != 0 {
		t.Errorf("an output reads %+v", got)
	}
}
