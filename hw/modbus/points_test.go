package modbus_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"math"
	"testing"
	"time"

	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/hw/modbus"
	"github.com/fleet/fleet/hw/modbus/modbustest"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/test/rig/testwait"
)

func pt(name, fn string, reg int, typ string, mut ...func(*serialcfg.RS485Point)) serialcfg.RS485Point {
	p := serialcfg.RS485Point{Name: name, Function: fn, Register: reg, Type: typ, IntervalMs: 100}
	for _, m := range mut {
		m(&p)
	}
	return p
}

func order(o string) func(*serialcfg.RS485Point) {
	return func(p *serialcfg.RS485Point) { p.Order = o }
}
func slave(id int) func(*serialcfg.RS485Point) {
	return func(p *serialcfg.RS485Point) { p.SlaveID = id }
}
func every(ms int) func(*serialcfg.RS485Point) {
	return func(p *serialcfg.RS485Point) { p.IntervalMs = ms }
}

func openWith(t *testing.T, path string, cfg serialcfg.Config, opts modbus.Options) *modbus.Port {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}
	p, err := modbus.OpenWith(context.Background(), path, cfg, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// readings waits until ok holds for the port's point readings.
func readings(t *testing.T, p *modbus.Port, what string, ok func([]hw.PointReading) bool) []hw.PointReading {
	t.Helper()
	return testwait.Value(t, what, 20*time.Second, 10*time.Millisecond, p.ReadPoints, ok)
}

func allRead(rs []hw.PointReading) bool {
	for _, r := range rs {
		if r.At.IsZero() {
			return false
		}
	}
	return len(rs) > 0
}

// setWords sets holding registers from reg on.
func setWords(s *modbustest.Sim, slave int, reg uint16, words ...uint16) {
	for i, w := range words {
		s.SetHolding(slave, reg+uint16(i), w)
	}
}

// TestPointsPlanned: adjacent points of one slave and function share a
// transaction (a small gap bridged), a far one gets its own, each
// function its own; values decode in every byte order.
func TestPointsPlanned(t *testing.T) {
	r := newRig(t, modbustest.Options{IDs: []int{7}})
	setWords(r.sim, 7, 0, 0xFFFE)                // i16 -2
	setWords(r.sim, 7, 1, 0x47F1, 0x2000)        // f32 ABCD 123456
	setWords(r.sim, 7, 3, 0x2000, 0x47F1)        // f32 CDAB
	setWords(r.sim, 7, 5, 0xF147, 0x0020)        // f32 BADC
	setWords(r.sim, 7, 7, 0x0020, 0xF147)        // f32 DCBA
	setWords(r.sim, 7, 15, 0x0001, 0x0002)       // u32 65538 after a gap of 6
	setWords(r.sim, 7, 17, 0, 0, 0x8000, 0x4035) // f64 21.5 CDAB (words reversed)
	setWords(r.sim, 7, 21, 0x0004)               // bit 2 of register 21
	setWords(r.sim, 7, 200, 615)                 // far away: its own transaction
	r.sim.SetInput(7, 0, 0xFFFF)
	r.sim.SetInput(7, 1, 0xFFFF)
	r.sim.SetCoil(7, 3, true)
	r.sim.SetDiscrete(7, 100, true)
	cfg := rs485(func(c *serialcfg.RS485) {
		c.Points = []serialcfg.RS485Point{
			pt("a", "holding", 0, "i16", every(60000)),
			pt("b", "holding", 1, "f32", every(60000)),
			pt("c", "holding", 3, "f32", order("CDAB"), every(60000)),
			pt("d", "holding", 5, "f32", order("BADC"), every(60000)),
			pt("e", "holding", 7, "f32", order("DCBA"), every(60000)),
			pt("f", "holding", 15, "u32", every(60000)),
			pt("g", "holding", 17, "f64", order("CDAB"), every(60000)),
			pt("h", "holding", 21, "bool", every(60000), func(p *serialcfg.RS485Point) { b := 2; p.Bit = &b }),
			pt("i", "holding", 200, "u16", every(60000), func(p *serialcfg.RS485Point) { p.Scale = 0.1; p.Offset = -40 }),
			pt("j", "input", 0, "i32", every(60000)),
			pt("k", "coil", 3, "bool", every(60000)),
			pt("l", "coil", 60, "bool", every(60000)),
			pt("m", "discrete", 100, "bool", every(60000)),
		}
	})
	p := openWith(t, r.link, cfg, fast)
	rs := readings(t, p, "every point read", allRead)
	want := map[string]float64{"a": -2, "b": 123456, "c": 123456, "d": 123456, "e": 123456, "f": 65538, "g": 21.5,
		"h": 1, "i": 21.5, "j": -1, "k": 1, "l": 0, "m": 1}
	for _, rd := range rs {
		if rd.Err != "" || math.Abs(rd.Value-want[rd.Name]) > 1e-9 {
			t.Errorf("point %s = %v %q, want %v", rd.Name, rd.Value, rd.Err, want[rd.Name])
		}
	}
	// Holding: 0..21 in one transaction (gaps of 6 and 1 bridged), 200 in
	// another; input one; coils 3 and 60 one (57 bits apart); discrete one.
	for _, c := range []struct {
		fc   byte
		want int
	}{{modbus.FuncReadHolding, 2}, {modbus.FuncReadInput, 1}, {modbus.FuncReadCoils, 1}, {modbus.FuncReadDiscrete, 1}} {
		if got := r.sim.Requests(7, c.fc); got != c.want {
			t.Errorf("function %d: %d transactions, want %d", c.fc, got, c.want)
		}
	}
	var ranges [][2]uint16
	for _, f := range r.sim.Frames() {
		if len(f) == 8 && f[1] == modbus.FuncReadHolding {
			ranges = append(ranges, [2]uint16{binary.BigEndian.Uint16(f[2:]), binary.BigEndian.Uint16(f[4:])})
		}
	}
	if len(ranges) != 2 || ranges[0] != [2]uint16{0, 22} || ranges[1] != [2]uint16{200, 1} {
		t.Errorf("holding reads (start, count) = %v, want [[0 22] [200 1]]", ranges)
	}
	if tel := p.Telemetry(); tel.Error != "" || tel.Live != "" {
		t.Errorf("telemetry %+v: points alone leave live and error empty", tel)
	}
}

// TestPointsLimitsSplitTransactions: a run of registers wider than 125
// takes two transactions; different intervals take different ones.
func TestPointsLimitsSplitTransactions(t *testing.T) {
	r := newRig(t, modbustest.Options{IDs: []int{7}})
	var pts []serialcfg.RS485Point
	for i := range 33 { // 33 f64 = 132 registers
		pts = append(pts, pt("p"+string(rune('a'+i%26))+string(rune('a'+i/26)), "input", 4*i, "u64", every(60000)))
	}
	pts = append(pts, pt("fast", "input", 140, "u16", every(100)))
	p := openWith(t, r.link, rs485(func(c *serialcfg.RS485) { c.Points = pts }), fast)
	readings(t, p, "every point read", allRead)
	var big, small int
	for _, f := range r.sim.Frames() {
		if len(f) == 8 && f[1] == modbus.FuncReadInput {
			switch n := binary.BigEndian.Uint16(f[4:]); {
			case n > 1:
				big++
				if n > 125 {
					t.Errorf("a transaction of %d registers", n)
				}
			default:
				small++
			}
		}
	}
	if big != 2 || small < 1 {
		t.Errorf("%d multi-register and %d single reads, want 2 (the 60 s points) and the 100 ms point's own", big, small)
	}
}

// TestPointException2OnePoint: an unavailable register fails its own
// point only, with the Modbus cause; its neighbours in the same block
// stay good, and it recovers when the register comes back.
func TestPointException2OnePoint(t *testing.T) {
	r := newRig(t, modbustest.Options{IDs: []int{7}})
	r.sim.SetUnavailable(7, 11, true)
	p := openWith(t, r.link, rs485(func(c *serialcfg.RS485) {
		c.Points = []serialcfg.RS485Point{pt("a", "holding", 10, "u16"), pt("b", "holding", 11, "u16"), pt("c", "holding", 12, "u16")}
	}), fast)
	rs := readings(t, p, "b bad, a and c good", func(rs []hw.PointReading) bool {
		return allRead(rs) && rs[1].Err != "" && rs[0].Err == "" && rs[2].Err == ""
	})
	if rs[0].Value != 710 || rs[2].Value != 712 {
		t.Errorf("good points = %v, %v; want 710, 712", rs[0].Value, rs[2].Value)
	}
	if want := "modbus exception 2: illegal data address (slave 7)"; rs[1].Err != want || rs[1].Value != 0 {
		t.Errorf("bad point = %v %q, want %q", rs[1].Value, rs[1].Err, want)
	}
	if tel := p.Telemetry(); tel.Error != "" {
		t.Errorf("telemetry error %q: one bad address is the point's, not the channel's", tel.Error)
	}
	r.sim.SetUnavailable(7, 11, false)
	readings(t, p, "b good again", func(rs []hw.PointReading) bool { return rs[1].Err == "" && rs[1].Value == 711 })
}

// TestSilentSlaveBacksOff: a slave that does not answer is asked less and
// less often, so a good slave on the same bus keeps its interval; it is
// read again once it answers.
func TestSilentSlaveBacksOff(t *testing.T) {
	r := newRig(t, modbustest.Options{IDs: []int{1, 2}})
	r.sim.SetFault(1, modbustest.Fault{NoReply: true})
	p := openWith(t, r.link, rs485(func(c *serialcfg.RS485) {
		c.SlaveID = 2
		c.Points = []serialcfg.RS485Point{pt("dead", "holding", 0, "u16", slave(1)), pt("alive", "holding", 0, "u16", slave(2))}
	}), fast)
	// Each request to the silent slave holds the bus for the response
	// timeout (1 s); backing off from 200 ms leaves the good one 20 reads
	// after about four of them.
	testwait.For(t, "20 reads of the good slave", 30*time.Second, func() bool { return r.sim.Requests(2, modbus.FuncReadHolding) >= 20 })
	silent, good := r.sim.Requests(1, modbus.FuncReadHolding), r.sim.Requests(2, modbus.FuncReadHolding)
	t.Logf("requests: silent slave %d, good slave %d", silent, good)
	// Without backoff both are read every round (equal counts).
	if silent*3 > good {
		t.Errorf("silent slave asked %d times while the good one was read %d times: no backoff", silent, good)
	}
	rs := p.ReadPoints()
	if rs[0].Err != "modbus timeout (slave 1)" || rs[1].Err != "" || rs[1].Value != 200 {
		t.Errorf("readings %+v", rs)
	}
	if tel := p.Telemetry(); tel.Error != "modbus timeout (slave 1)" {
		t.Errorf("telemetry error %q, want the silent slave's timeout", tel.Error)
	}
	r.sim.SetFault(1, modbustest.Fault{})
	readings(t, p, "slave 1 back", func(rs []hw.PointReading) bool { return rs[0].Err == "" && rs[0].Value == 100 })
	waitFor(t, p, "no error", func(tel serialcfg.Telemetry) bool { return tel.Error == "" })
}

// TestStaleErrorAfterApply drives issue 26's defect: a transaction to
// slave 1 is in flight (slave 1 is silent) when Apply moves polling and
// points to slave 7; its timeout arrives after Apply and must not become
// the channel's error or a point's.
func TestStaleErrorAfterApply(t *testing.T) {
	r := newRig(t, modbustest.Options{IDs: []int{1, 7}})
	r.sim.SetFault(1, modbustest.Fault{NoReply: true})
	cfg := func(id int) serialcfg.Config {
		return rs485(func(c *serialcfg.RS485) {
			c.SlaveID = id
			c.Poll = poll("holding", 0, 1)
			c.Points = []serialcfg.RS485Point{pt("temp", "holding", 5, "u16")}
		})
	}
	opts := fast
	opts.ResponseTimeout = 2 * time.Second // the window in which Apply runs
	p := openWith(t, r.link, cfg(1), opts)
	testwait.For(t, "a request to slave 1 in flight", 10*time.Second, func() bool { return r.sim.Requests(1, modbus.FuncReadHolding) >= 1 })
	if err := p.Apply(context.Background(), cfg(7)); err != nil {
		t.Fatal(err)
	}
	if n := r.sim.Requests(7, modbus.FuncReadHolding); n != 0 {
		t.Fatalf("slave 7 already read %d times: the transaction to slave 1 was not in flight during Apply", n)
	}
	if tel := p.Telemetry(); tel.Error != "" {
		t.Fatalf("telemetry error %q right after Apply", tel.Error)
	}
	// Slave 7 is read only after the transaction to slave 1 has failed
	// and its result has been handled (one master, one bus).
	tel := waitFor(t, p, "live from slave 7", func(tel serialcfg.Telemetry) bool { return tel.Live == "700" })
	if tel.Error != "" {
		t.Fatalf("telemetry %+v: the old slave's error written back after Apply", tel)
	}
	rs := readings(t, p, "the point read from slave 7", allRead)
	if rs[0].Err != "" || rs[0].Value != 705 {
		t.Fatalf("point %+v, want 705 from slave 7", rs[0])
	}
	for range 20 {
		if tel := p.Telemetry(); tel.Error != "" {
			t.Fatalf("telemetry error %q after the move to slave 7", tel.Error)
		}
		if rs := p.ReadPoints(); rs[0].Err != "" {
			t.Fatalf("point error %q after the move to slave 7", rs[0].Err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPointsShareTheBusWithARawClient: in mode both, points, a poll and a
// passthrough client take turns transaction by transaction: every raw
// reply is whole and answers its request, the slave never sees an
// interleaved frame, and the points keep being read.
func TestPointsShareTheBusWithARawClient(t *testing.T) {
	r := newRig(t, modbustest.Options{IDs: []int{7, 8}})
	p := openWith(t, r.link, rs485(func(c *serialcfg.RS485) {
		c.Poll = poll("holding", 0, 2)
		c.Points = []serialcfg.RS485Point{pt("a", "holding", 10, "u32"), pt("b", "input", 0, "u16", slave(8))}
	}), fast)
	client := rawClient(t, p)
	first := p.ReadPoints()
	for i := range 50 {
		reg := uint16(i % 20)
		if _, err := client.Write(modbus.AppendCRC([]byte{8, 3, 0, byte(reg), 0, 1})); err != nil {
			t.Fatal(err)
		}
		client.SetReadDeadline(time.Now().Add(10 * time.Second))
		got := make([]byte, 7)
		if _, err := io.ReadFull(client, got); err != nil {
			t.Fatalf("raw reply %d: %v", i, err)
		}
		v := 800 + reg
		if want := modbus.AppendCRC([]byte{8, 3, 2, byte(v >> 8), byte(v)}); !bytes.Equal(got, want) {
			t.Fatalf("raw reply %d: % x, want % x", i, got, want)
		}
	}
	rs := readings(t, p, "points read again", func(rs []hw.PointReading) bool {
		return allRead(rs) && rs[0].At.After(first[0].At) && rs[1].At.After(first[1].At)
	})
	if rs[0].Value != 710<<16|711 || rs[1].Value != 10800 || rs[0].Err != "" || rs[1].Err != "" {
		t.Errorf("points %+v", rs)
	}
	if st := r.sim.Stats(); st.BadFrames != 0 {
		t.Errorf("the slave saw %d interleaved or corrupted frames", st.BadFrames)
	}
}

// TestApplyKeepsUnchangedPoints: an Apply that leaves a point as it was
// keeps its reading (it has no unread moment); a changed point is read
// anew.
func TestApplyKeepsUnchangedPoints(t *testing.T) {
	r := newRig(t, modbustest.Options{IDs: []int{7}})
	bit := func(p *serialcfg.RS485Point) { b := 1; p.Bit = &b }
	cfg := func(reg int) serialcfg.Config {
		return rs485(func(c *serialcfg.RS485) {
			c.Points = []serialcfg.RS485Point{pt("flag", "holding", 0, "bool", bit, every(60000)), pt("moved", "holding", reg, "u16", every(60000))}
		})
	}
	r.sim.SetHolding(7, 0, 2) // bit 1 set
	p := openWith(t, r.link, cfg(1), fast)
	before := readings(t, p, "both points read", allRead)
	if err := p.Apply(context.Background(), cfg(2)); err != nil {
		t.Fatal(err)
	}
	if now := p.ReadPoints()[0]; now.At.IsZero() || now.Value != 1 || before[0].Value != 1 {
		t.Errorf("unchanged point %+v became %+v across the Apply", before[0], now)
	}
	after := readings(t, p, "the moved point read", func(rs []hw.PointReading) bool { return rs[1].Value == 702 })
	if !after[1].At.After(before[1].At) || after[1].Err != "" {
		t.Errorf("moved point %+v, want 702 read after the Apply", after[1])
	}
}
