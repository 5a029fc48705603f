package canfd_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.einride.tech/can"

	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/hw/canfd"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/test/rig/testwait"
)

// reference decodes the signal's raw bits with einride's can.Data (the
// reference implementation of DBC bit numbering, 8 bytes only) from the
// 8-byte window of data that starts at byte off, start being relative to
// it.
func reference(data []byte, off int, start, length int, big, signed bool) uint64 {
	var d can.Data
	copy(d[:], data[off:off+8])
	s, l := uint8(start), uint8(length)
	switch {
	case big && signed:
		return uint64(d.SignedBitsBigEndian(s, l))
	case big:
		return d.UnsignedBitsBigEndian(s, l)
	case signed:
		return uint64(d.SignedBitsLittleEndian(s, l))
	}
	return d.UnsignedBitsLittleEndian(s, l)
}

// checkAgainstReference compares Signal.Raw with einride's decoder for a
// signal at start (relative to a window of 8 bytes at byte off of a
// 64-byte payload); it returns false when the signal does not fit the
// window (nothing to compare).
func checkAgainstReference(t *testing.T, data []byte, off, start, length int, big, signed bool) bool {
	t.Helper()
	order := "little"
	if big {
		order = "big"
	}
	s, err := canfd.CompileSignal(serialcfg.CANPoint{Name: "x", CanID: "0x1", StartBit: start + 8*off, Length: length, ByteOrder: order, Signed: signed})
	if err != nil || s.Bytes() > off+8 || s.Bytes() <= off {
		return false
	}
	// The window must hold the whole signal: its first byte at off or after.
	first := (start + 8*off) / 8
	if first < off {
		return false
	}
	got, ok := s.Raw(data)
	want := reference(data, off, start, length, big, signed)
	if !ok || got != want {
		t.Fatalf("%s signed=%v start %d (window at byte %d) length %d in % X: got %#x, einride %#x", order, signed, start+8*off, off, length, data[off:off+8], got, want)
	}
	return true
}

// TestSignalAgainstEinride checks every start bit and length of both byte
// orders, signed and unsigned, against einride's can.Data accessors: in
// the first 8 bytes and in 8-byte windows deep into a 64-byte FD payload.
func TestSignalAgainstEinride(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 64)
	compared := 0
	for _, off := range []int{0, 7, 31, 56} {
		for round := 0; round < 3; round++ {
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			for start := 0; start < 64; start++ {
				for length := 1; length <= 64; length++ {
					for _, big := range []bool{false, true} {
						for _, signed := range []bool{false, true} {
							if checkAgainstReference(t, data, off, start, length, big, signed) {
								compared++
							}
						}
					}
				}
			}
		}
	}
	if compared < 20000 {
		t.Errorf("only %d signals compared", compared)
	}
}

func FuzzSignal(f *testing.F) {
	f.Add(make([]byte, 64), uint8(0), uint8(7), uint8(16), true, true)
	f.Add([]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8}, uint8(2), uint8(3), uint8(64), false, true)
	f.Fuzz(func(t *testing.T, data []byte, off, start, length uint8, big, signed bool) {
		if len(data) < 8 {
			return
		}
		data = data[:min(len(data), 64)]
		o := int(off) % (len(data) - 7)
		checkAgainstReference(t, data, o, int(start)%64, int(length)%64+1, big, signed)
	})
}

// TestSignalValues decodes the signals of cloud/dbcimport's test file from
// hand-made payloads: scale, offset, sign and both byte orders, classic
// and FD.
func TestSignalValues(t *testing.T) {
	fd := make([]byte, 64)
	fd[31], fd[32] = 0xFF, 0x38 // PackCurrent 255|16@0-: -200 × 0.1
	fd[62], fd[63] = 0x74, 0x0E // Cell32Voltage 496|16@1+: 3700 × 0.001
	classic := []byte{0x40, 0x1F, 0x7D, 0x00, 0xAB, 0xC0, 0x34, 0x82}
	for _, c := range []struct {
		p    serialcfg.CANPoint
		data []byte
		want float64
	}{
		{serialcfg.CANPoint{CanID: "0x100", StartBit: 0, Length: 16, ByteOrder: "little", Scale: 0.25}, classic, 2000},
		{serialcfg.CANPoint{CanID: "0x100", StartBit: 23, Length: 8, ByteOrder: "big", Signed: true, Scale: 1, Offset: -40}, classic, 85},
		{serialcfg.CANPoint{CanID: "0x100", StartBit: 23, Length: 8, ByteOrder: "big", Signed: true, Offset: -40}, []byte{0, 0, 0xF6}, -50},
		{serialcfg.CANPoint{CanID: "0x100", StartBit: 39, Length: 12, ByteOrder: "big", Scale: 0.1}, classic, 274.8},
		// TorqueDemand 48|12@1-: bytes 6,7 = 0x8234, low 12 bits 0x234 = 564 × 0.5.
		{serialcfg.CANPoint{CanID: "0x100", StartBit: 48, Length: 12, ByteOrder: "little", Signed: true, Scale: 0.5}, classic, 282},
		{serialcfg.CANPoint{CanID: "0x100", StartBit: 63, Length: 1, ByteOrder: "little"}, classic, 1},
		{serialcfg.CANPoint{CanID: "0x200", StartBit: 255, Length: 16, ByteOrder: "big", Signed: true, Scale: 0.1}, fd, -20},
		{serialcfg.CANPoint{CanID: "0x200", StartBit: 496, Length: 16, ByteOrder: "little", Scale: 0.001}, fd, 3.7},
	} {
		s, err := canfd.CompileSignal(c.p)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := s.Decode(c.data)
		if !ok || !near(got, c.want) {
			t.Errorf("%+v on % X: %v %v, want %v", c.p, c.data, got, ok, c.want)
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestCompileSignalErrors(t *testing.T) {
	for _, c := range []struct {
		p    serialcfg.CANPoint
		want string
	}{
		{serialcfg.CANPoint{CanID: "0xZZ", Length: 8}, "canId"},
		{serialcfg.CANPoint{CanID: "0x1", Length: 0}, "length"},
		{serialcfg.CANPoint{CanID: "0x1", Length: 8, ByteOrder: "middle"}, "byteOrder"},
		{serialcfg.CANPoint{CanID: "0x1", Length: 16, StartBit: 504}, "do not fit a 64-byte frame"},
		{serialcfg.CANPoint{CanID: "0x1", Length: 16, StartBit: 504, ByteOrder: "big"}, "do not fit a 64-byte frame"},
	} {
		if _, err := canfd.CompileSignal(c.p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.p, err, c.want)
		}
	}
	for in, ext := range map[string]bool{"0x100": false, "0x00000100": true, "18FEF100": true, "7FF": false} {
		if _, e, err := canfd.ParsePointCANID(in); err != nil || e != ext {
			t.Errorf("ParsePointCANID(%s): extended %v, %v", in, e, err)
		}
	}
}

func readings(t *testing.T, p *canfd.Port, what string, cond func(map[string]hw.PointReading) bool) map[string]hw.PointReading {
	t.Helper()
	byName := func() map[string]hw.PointReading {
		m := map[string]hw.PointReading{}
		for _, r := range p.ReadPoints() {
			m[r.Name] = r
		}
		return m
	}
	return testwait.Value(t, what, 3*time.Second, 2*time.Millisecond, byName, cond)
}

// TestPointsFromFrames: the port decodes the points of frames a peer sends
// on the virtual bus (classic, 64-byte FD, extended id), reports a frame
// too short for a signal as that point's error, keeps the readings of
// unchanged points across an apply, and refuses a bad point naming it.
func TestPointsFromFrames(t *testing.T) {
	pts := []serialcfg.CANPoint{
		{Name: "engine_speed", CanID: "0x100", StartBit: 0, Length: 16, ByteOrder: "little", Scale: 0.25, Unit: "rpm"},
		{Name: "coolant_temp", CanID: "0x100", StartBit: 23, Length: 8, ByteOrder: "big", Signed: true, Scale: 1, Offset: -40, Unit: "degC"},
		{Name: "pack_current", CanID: "0x200", StartBit: 255, Length: 16, ByteOrder: "big", Signed: true, Scale: 0.1, Unit: "A"},
		{Name: "vehicle_speed", CanID: "0x18FEF100", StartBit: 8, Length: 16, ByteOrder: "little", Scale: 0.00390625},
		{Name: "ext_low", CanID: "0x00000100", StartBit: 0, Length: 8, ByteOrder: "little"},
		{Name: "never_sent", CanID: "0x7FF", StartBit: 0, Length: 8},
	}
	r := newRig(t, cfg(func(c *serialcfg.CANFD) { c.Points = pts }))
	if got := r.port.ReadPoints(); len(got) != len(pts) || got[0].Name != "engine_speed" || !got[0].At.IsZero() {
		t.Fatalf("before any frame: %+v", got)
	}
	before := time.Now()
	fd := make([]byte, 64)
	fd[31], fd[32] = 0xFF, 0x38
	for _, f := range []canfd.Frame{
		{ID: 0x100, Data: []byte{0x40, 0x1F, 0x7D, 0, 0, 0, 0, 0}},
		{ID: 0x200, FD: true, BRS: true, Data: fd},
		{ID: 0x18FEF100, Extended: true, Data: []byte{0, 0x00, 0x19, 0, 0, 0, 0, 0}}, // 0x1900/256 = 25 km/h
		{ID: 0x100, Extended: true, Data: []byte{42}},
	} {
		if err := r.peer.Send(f); err != nil {
			t.Fatal(err)
		}
	}
	got := readings(t, r.port, "every frame decoded", func(m map[string]hw.PointReading) bool { return !m["ext_low"].At.IsZero() })
	for name, want := range map[string]float64{"engine_speed": 2000, "coolant_temp": 85, "pack_current": -20, "vehicle_speed": 25, "ext_low": 42} {
		g := got[name]
		if g.Err != "" || !near(g.Value, want) || g.At.Before(before) {
			t.Errorf("%s: %+v, want %v", name, g, want)
		}
	}
	if n := got["never_sent"]; !n.At.IsZero() || n.Err != "" {
		t.Errorf("a point whose frame never came: %+v", n)
	}

	// A frame too short for coolant_temp (byte 2) still carries engine_speed.
	if err := r.peer.Send(canfd.Frame{ID: 0x100, Data: []byte{0x80, 0x0C}}); err != nil {
		t.Fatal(err)
	}
	got = readings(t, r.port, "short frame", func(m map[string]hw.PointReading) bool { return m["coolant_temp"].Err != "" })
	if c := got["coolant_temp"]; c.Err != "frame 0x100 too short for signal (2 bytes)" || c.Value != 0 {
		t.Errorf("coolant_temp from a 2-byte frame: %+v", c)
	}
	if e := got["engine_speed"]; e.Err != "" || e.Value != 800 {
		t.Errorf("engine_speed from a 2-byte frame: %+v", e)
	}
	if ext := got["ext_low"]; ext.Value != 42 {
		t.Errorf("a standard 0x100 frame changed the extended 0x00000100 point: %+v", ext)
	}

	// A new point list: unchanged points keep their readings.
	next := append([]serialcfg.CANPoint{{Name: "added", CanID: "0x300", StartBit: 0, Length: 8}}, pts[:3]...)
	next[3].Scale = 0.2 // pack_current changed
	if err := r.port.Apply(context.Background(), cfg(func(c *serialcfg.CANFD) { c.Points = next })); err != nil {
		t.Fatal(err)
	}
	after := r.port.ReadPoints()
	if len(after) != 4 || after[0].Name != "added" || !after[0].At.IsZero() || after[1].Value != 800 || !after[3].At.IsZero() {
		t.Errorf("after apply: %+v", after)
	}

	bad := append([]serialcfg.CANPoint(nil), next...)
	bad[1].ByteOrder = "middle"
	if err := r.port.Apply(context.Background(), cfg(func(c *serialcfg.CANFD) { c.Points = bad })); err == nil || !strings.Contains(err.Error(), "points[1].byteOrder") {
		t.Errorf("a bad point applied: %v", err)
	}
	if len(r.port.ReadPoints()) != 4 {
		t.Error("a refused apply changed the points")
	}
}

// BenchmarkSignalDecode decodes one signal of a 64-byte FD payload: a
// 16-bit Motorola signal and a 64-bit Intel one.
func BenchmarkSignalDecode(b *testing.B) {
	data := make([]byte, 64)
	for i := range data {
		data[i] = byte(i * 37)
	}
	for _, p := range []serialcfg.CANPoint{
		{CanID: "0x200", StartBit: 255, Length: 16, ByteOrder: "big", Signed: true, Scale: 0.1},
		{CanID: "0x200", StartBit: 448, Length: 64, ByteOrder: "little"},
	} {
		s, err := canfd.CompileSignal(p)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%s-%dbit", p.ByteOrder, p.Length), func(b *testing.B) {
			for b.Loop() {
				if _, ok := s.Decode(data); !ok {
					b.Fatal("too short")
				}
			}
		})
	}
}
