package points

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/agent/iomgr"
	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/hw/sim"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/serialcfg"
)

// bench is one channel of points read by a test: it moves its readings
// and the sampler's clock by hand.
type bench struct {
	t    *testing.T
	s    *Sampler
	now  time.Time
	defs []serialcfg.PointDef
	read map[string]hw.PointReading
}

func newBench(t *testing.T, defs ...serialcfg.PointDef) *bench {
	return &bench{t: t, s: New(Options{}), now: time.Date(2026, 11, 26, 20, 0, 0, 0, time.UTC), defs: defs, read: map[string]hw.PointReading{}}
}

func def(name string, intervalMs int, deadband float64) serialcfg.PointDef {
	return serialcfg.PointDef{ID: serialcfg.PointID("rs485-1", name), ChannelID: "rs485-1", Name: name, Type: "f32", IntervalMs: intervalMs, Deadband: deadband}
}

// set makes the port's reading of name v (or failed with cause err), read
// at the bench's clock.
func (b *bench) set(name string, v float64, err string) {
	b.read[name] = hw.PointReading{Name: name, Value: v, Err: err, At: b.now}
}

// round moves the clock by d and samples; it returns the recorded samples
// as "name=value" or "name!error".
func (b *bench) round(d time.Duration) []string {
	b.now = b.now.Add(d)
	var rs []hw.PointReading
	for _, d := range b.defs {
		if r, ok := b.read[d.Name]; ok {
			rs = append(rs, r)
		}
	}
	var out []string
	for _, s := range b.s.Sample(b.now, []iomgr.ChannelPoints{{ChannelID: "rs485-1", Defs: b.defs, Readings: rs}}) {
		_, name, _ := serialcfg.SplitPointID(s.Point)
		if s.Error != "" {
			out = append(out, name+"!"+s.Error)
		} else {
			out = append(out, fmt.Sprintf("%s=%g", name, s.Value))
		}
	}
	return out
}

func (b *bench) want(got []string, want ...string) {
	b.t.Helper()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		b.t.Fatalf("recorded %q, want %q", got, want)
	}
}

// TestDeadband: a sample is recorded when the value moved more than the
// deadband from the last recorded one (not from the last reading), and
// the first reading always is.
func TestDeadband(t *testing.T) {
	b := newBench(t, def("temp", 1000, 0.5))
	b.set("temp", 20, "")
	b.want(b.round(time.Second), "temp=20")
	for _, v := range []float64{20.3, 20.5, 19.6} { // within 0.5 of 20
		b.set("temp", v, "")
		b.want(b.round(time.Second))
	}
	b.set("temp", 20.51, "") // creeping: 20.51 is more than 0.5 from 20
	b.want(b.round(time.Second), "temp=20.51")
	b.set("temp", 20, "") // 0.51 from 20.51
	b.want(b.round(time.Second), "temp=20")
}

// TestDeadbandZeroRecordsEveryChange: with no deadband every change is
// recorded, an unchanged value is not.
func TestDeadbandZeroRecordsEveryChange(t *testing.T) {
	b := newBench(t, def("count", 1000, 0))
	b.set("count", 7, "")
	b.want(b.round(time.Second), "count=7")
	b.set("count", 7, "")
	b.want(b.round(time.Second))
	b.set("count", 8, "")
	b.want(b.round(time.Second), "count=8")
}

// TestFlatLineOnceAMinute: a value that does not move is recorded again a
// minute after the last recorded sample, so a flat line is still seen.
func TestFlatLineOnceAMinute(t *testing.T) {
	b := newBench(t, def("level", 1000, 0))
	var recorded int
	for i := range 181 {
		b.set("level", 1, "")
		recorded += len(b.round(time.Second))
		if i == 59 && recorded != 1 {
			t.Fatalf("%d samples in the first minute of a flat line, want 1", recorded)
		}
	}
	if recorded != 4 { // at 1 s, 61 s, 121 s and 181 s
		t.Fatalf("%d samples of a flat line over 3 minutes, want 4", recorded)
	}
}

// TestQualityChangeIsRecorded: a failed read is recorded (as bad, with its
// cause) after good ones, again when the cause changes but not while it
// stays the same, and the next good reading is recorded even at the same
// value as before.
func TestQualityChangeIsRecorded(t *testing.T) {
	b := newBench(t, def("temp", 1000, 1))
	b.set("temp", 20, "")
	b.want(b.round(time.Second), "temp=20")
	b.set("temp", 0, "modbus timeout (slave 7)")
	b.want(b.round(time.Second), "temp!modbus timeout (slave 7)")
	b.set("temp", 0, "modbus timeout (slave 7)")
	b.want(b.round(time.Second))
	b.set("temp", 0, "modbus exception 2: illegal data address (slave 7)")
	b.want(b.round(time.Second), "temp!modbus exception 2: illegal data address (slave 7)")
	b.set("temp", 20, "")
	b.want(b.round(time.Second), "temp=20")
}

// TestIntervalAndNewReadingsOnly: a point is considered at most once per
// intervalMs, and only for a reading newer than the last it considered.
func TestIntervalAndNewReadingsOnly(t *testing.T) {
	b := newBench(t, def("fast", 100, 0), def("slow", 5000, 0))
	b.set("fast", 1, "")
	b.set("slow", 1, "")
	b.want(b.round(100*time.Millisecond), "fast=1", "slow=1")
	// The port has not read again: nothing new to consider.
	b.want(b.round(100 * time.Millisecond))
	for i := 2; i <= 10; i++ {
		b.set("fast", float64(i), "")
		b.set("slow", float64(i), "")
		b.want(b.round(100*time.Millisecond), fmt.Sprintf("fast=%d", i))
	}
	// 5 s after slow was considered: its newest reading is.
	for range 39 {
		b.round(100 * time.Millisecond)
	}
	b.set("slow", 42, "")
	b.want(b.round(100*time.Millisecond), "slow=42")
}

// TestStale: a point without a new reading for 3 × intervalMs is stale in
// the heartbeat's state, keeping its last value; a new reading makes it
// good again; a point never read is stale.
func TestStale(t *testing.T) {
	b := newBench(t, def("temp", 1000, 0), def("never", 1000, 0))
	b.set("temp", 21.5, "")
	at := b.now // the reading's time
	b.round(time.Second)
	state := func() protocol.PointState { return b.s.States("rs485-1", b.now)[0] }
	if st := state(); st.Quality != "good" || st.Value != 21.5 || !st.At.Equal(at) {
		t.Fatalf("state after a reading: %+v", st)
	}
	if st := b.s.States("rs485-1", b.now)[1]; st.Name != "never" || st.Quality != "stale" || !st.At.IsZero() {
		t.Fatalf("state of a point never read: %+v", st)
	}
	b.round(2999 * time.Millisecond)
	if st := state(); st.Quality != "good" {
		t.Fatalf("stale before 3 intervals: %+v", st)
	}
	b.round(time.Millisecond)
	if st := state(); st.Quality != "stale" || st.Value != 21.5 || !st.At.Equal(at) {
		t.Fatalf("state after 3 intervals without a reading: %+v", st)
	}
	b.set("temp", 0, "modbus timeout (slave 1)")
	b.round(time.Second)
	if st := state(); st.Quality != "bad" || st.Value != 0 || st.Error != "modbus timeout (slave 1)" {
		t.Fatalf("state after a failed read: %+v", st)
	}
	if b.s.States("can0", b.now) != nil {
		t.Fatal("states of a channel without points")
	}
}

// TestConfigurationChange: a point no longer configured is forgotten (no
// state); one configured again starts afresh (its first reading
// recorded); a new deadband applies at once.
func TestConfigurationChange(t *testing.T) {
	b := newBench(t, def("a", 1000, 0), def("b", 1000, 0))
	b.set("a", 1, "")
	b.set("b", 1, "")
	b.want(b.round(time.Second), "a=1", "b=1")
	b.defs = b.defs[:1]
	b.set("a", 1, "")
	b.want(b.round(time.Second))
	if st := b.s.States("rs485-1", b.now); len(st) != 1 || st[0].Name != "a" {
		t.Fatalf("states after b was removed: %+v", st)
	}
	b.defs = []serialcfg.PointDef{def("a", 1000, 10), def("b", 1000, 0)}
	b.set("a", 5, "")
	b.set("b", 1, "")
	b.want(b.round(time.Second), "b=1")
}

// TestRoundsGoOutAsRecords: one round's samples are one record; more than
// MaxPointSamples are split.
func TestRoundsGoOutAsRecords(t *testing.T) {
	var recs []protocol.Record
	s := New(Options{Record: func(r protocol.Record) { recs = append(recs, r) }})
	var chans []iomgr.ChannelPoints
	now := time.Date(2026, 11, 26, 20, 0, 0, 0, time.UTC)
	for c := range 10 {
		cp := iomgr.ChannelPoints{ChannelID: fmt.Sprintf("can%d", c)}
		for p := range serialcfg.MaxPoints {
			name := fmt.Sprintf("s%d", p)
			cp.Defs = append(cp.Defs, serialcfg.PointDef{ID: serialcfg.PointID(cp.ChannelID, name), ChannelID: cp.ChannelID, Name: name, IntervalMs: 1000})
			cp.Readings = append(cp.Readings, hw.PointReading{Name: name, Value: float64(p), At: now})
		}
		chans = append(chans, cp)
	}
	s.Record(s.Sample(now, chans))
	if len(recs) != 2 || len(recs[0].Points.Samples) != protocol.MaxPointSamples || len(recs[1].Points.Samples) != 640-protocol.MaxPointSamples {
		t.Fatalf("%d records", len(recs))
	}
	if recs[1].Points.Samples[0].Point != "can8.s0" {
		t.Fatalf("second record starts at %s", recs[1].Points.Samples[0].Point)
	}
}

// TestSerialSwitchOff: with the serial I/O switch off the channel manager
// hands the sampler no point, so a round records nothing and the
// heartbeat's point states are gone; on again, the points are sampled
// anew.
func TestSerialSwitchOff(t *testing.T) {
	m, err := iomgr.New(iomgr.Options{Backend: &sim.Backend{}, Model: catalog.MustLookup("IG-500"), RecheckInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	m.Start(context.Background())
	t.Cleanup(func() { m.Close() })
	s := New(Options{})
	now := time.Date(2026, 11, 26, 20, 0, 0, 0, time.UTC)
	apply := func(version int64, enabled bool) {
		t.Helper()
		if err := m.Apply(context.Background(), protocol.Config{Version: version, Enabled: enabled, Mode: "managed"}); err != nil {
			t.Fatal(err)
		}
	}
	apply(1, true)
	if got := s.Sample(now, m.Points()); len(got) == 0 || len(s.States("gpio-1", now)) != 1 {
		t.Fatalf("enabled: recorded %+v, gpio-1 states %+v", got, s.States("gpio-1", now))
	}
	apply(2, false)
	for i := 1; i <= 3; i++ {
		now = now.Add(time.Minute) // past every interval and the flat-line minute
		if got := s.Sample(now, m.Points()); len(got) != 0 {
			t.Fatalf("disabled: round %d recorded %+v", i, got)
		}
		if st := s.States("gpio-1", now); len(st) != 0 {
			t.Fatalf("disabled: gpio-1 states %+v", st)
		}
	}
	apply(3, true)
	now = now.Add(time.Minute)
	if got := s.Sample(now, m.Points()); len(got) == 0 {
		t.Fatal("re-enabled: nothing recorded")
	}
}
