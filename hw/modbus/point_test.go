package modbus_test

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/fleet/fleet/hw/modbus"
	"github.com/fleet/fleet/shared/serialcfg"
)

// wireLayouts say, per byte order and width, which byte of the value
// (A its most significant) travels in each position on the wire, as
// libmodbus names the orders; 64-bit values as Telegraf spells them.
var wireLayouts = map[string]map[int]string{
	"ABCD": {2: "AB", 4: "ABCD", 8: "ABCDEFGH"},
	"CDAB": {2: "AB", 4: "CDAB", 8: "GHEFCDAB"},
	"BADC": {2: "BA", 4: "BADC", 8: "BADCFEHG"},
	"DCBA": {2: "BA", 4: "DCBA", 8: "HGFEDCBA"},
}

// onWire lays out the big-endian bytes of a value as registers in order.
func onWire(be []byte, order string) []uint16 {
	layout := wireLayouts[order][len(be)]
	wire := make([]byte, len(be))
	for i, c := range layout {
		wire[i] = be[c-'A']
	}
	regs := make([]uint16, len(be)/2)
	for i := range regs {
		regs[i] = binary.BigEndian.Uint16(wire[2*i:])
	}
	return regs
}

// TestDecodeLibmodbusVectors: libmodbus's unit tests (tests/unit-test.h)
// read 123456.0 as a float from these registers with
// modbus_get_float_abcd, _dcba, _badc and _cdab.
func TestDecodeLibmodbusVectors(t *testing.T) {
	for _, tc := range []struct {
		order string
		regs  []uint16
	}{
		{"ABCD", []uint16{0x47F1, 0x2000}},
		{"DCBA", []uint16{0x0020, 0xF147}},
		{"BADC", []uint16{0xF147, 0x0020}},
		{"CDAB", []uint16{0x2000, 0x47F1}},
	} {
		got, err := modbus.DecodeRaw("f32", tc.order, tc.regs)
		if err != nil || got != 123456.0 {
			t.Errorf("f32 %s %04X = %v, %v; want 123456", tc.order, tc.regs, got, err)
		}
	}
}

func TestDecodeTypes(t *testing.T) {
	bit := func(n int) *int { return &n }
	for _, tc := range []struct {
		name string
		p    serialcfg.RS485Point
		regs []uint16
		want float64
	}{
		{"u16", serialcfg.RS485Point{Type: "u16", Function: "holding"}, []uint16{0xFFFE}, 65534},
		{"i16", serialcfg.RS485Point{Type: "i16", Function: "holding"}, []uint16{0xFFFE}, -2},
		{"i16 BADC", serialcfg.RS485Point{Type: "i16", Function: "holding", Order: "BADC"}, []uint16{0xFEFF}, -2},
		{"u16 CDAB as is", serialcfg.RS485Point{Type: "u16", Function: "input", Order: "CDAB"}, []uint16{0x0102}, 258},
		{"u16 DCBA swapped", serialcfg.RS485Point{Type: "u16", Function: "input", Order: "DCBA"}, []uint16{0x0102}, 513},
		{"u32", serialcfg.RS485Point{Type: "u32", Function: "holding"}, []uint16{0x0001, 0x0002}, 65538},
		{"u32 CDAB", serialcfg.RS485Point{Type: "u32", Function: "holding", Order: "CDAB"}, []uint16{0x0002, 0x0001}, 65538},
		{"i32", serialcfg.RS485Point{Type: "i32", Function: "holding"}, []uint16{0xFFFF, 0xFFFF}, -1},
		{"u64", serialcfg.RS485Point{Type: "u64", Function: "holding"}, []uint16{0, 0, 1, 0}, 65536},
		{"i64 DCBA", serialcfg.RS485Point{Type: "i64", Function: "holding", Order: "DCBA"}, []uint16{0xFEFF, 0xFFFF, 0xFFFF, 0xFFFF}, -2},
		{"f64", serialcfg.RS485Point{Type: "f64", Function: "holding"}, []uint16{0x4035, 0x8000, 0, 0}, 21.5},
		{"f64 CDAB", serialcfg.RS485Point{Type: "f64", Function: "holding", Order: "CDAB"}, []uint16{0, 0, 0x8000, 0x4035}, 21.5},
		{"f32 scaled", serialcfg.RS485Point{Type: "f32", Function: "holding", Scale: 2, Offset: -1}, []uint16{0x41AC, 0x0000}, 42},
		{"u16 scaled", serialcfg.RS485Point{Type: "u16", Function: "input", Scale: 0.1, Offset: -40}, []uint16{615}, 21.5},
		{"scale 0 is 1", serialcfg.RS485Point{Type: "u16", Function: "input"}, []uint16{7}, 7},
		{"bool register", serialcfg.RS485Point{Type: "bool", Function: "holding", Scale: 5}, []uint16{0x0100}, 1},
		{"bool register 0", serialcfg.RS485Point{Type: "bool", Function: "holding"}, []uint16{0}, 0},
		{"bool bit 0", serialcfg.RS485Point{Type: "bool", Function: "holding", Bit: bit(0)}, []uint16{0x0001}, 1},
		{"bool bit 15", serialcfg.RS485Point{Type: "bool", Function: "input", Bit: bit(15)}, []uint16{0x8000}, 1},
		{"bool bit 3 clear", serialcfg.RS485Point{Type: "bool", Function: "input", Bit: bit(3)}, []uint16{0xFFF7}, 0},
		{"coil", serialcfg.RS485Point{Type: "bool", Function: "coil"}, []uint16{1}, 1},
		{"discrete off", serialcfg.RS485Point{Type: "bool", Function: "discrete"}, []uint16{0}, 0},
	} {
		got, err := modbus.DecodePoint(tc.p, tc.regs)
		if err != nil || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: %04X = %v, %v; want %v", tc.name, tc.regs, got, err, tc.want)
		}
	}
	nan := []uint16{0x7FC0, 0}
	if _, err := modbus.DecodePoint(serialcfg.RS485Point{Type: "f32", Function: "holding"}, nan); err == nil {
		t.Error("a NaN register read as a value")
	}
	if _, err := modbus.DecodePoint(serialcfg.RS485Point{Type: "f32", Function: "holding"}, []uint16{1}); err == nil {
		t.Error("an f32 from one register decoded")
	}
}

// FuzzDecodePoint decodes arbitrary register contents as every type in
// every byte order: no panic, and the value is the one encoding/binary
// reads from the bytes the order puts on the wire (the independent
// layout table above).
func FuzzDecodePoint(f *testing.F) {
	f.Add([]byte{0x47, 0xF1, 0x20, 0x00, 0, 0, 0, 0}, uint8(6), uint8(0), 1.0, 0.0)
	f.Add([]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE}, uint8(5), uint8(3), 0.5, 10.0)
	f.Add([]byte{0x7F, 0xF8, 0, 0, 0, 0, 0, 1}, uint8(7), uint8(1), 1.0, 0.0)
	f.Fuzz(func(t *testing.T, be []byte, ti, oi uint8, scale, offset float64) {
		if len(be) < 8 {
			return
		}
		typ := serialcfg.PointTypes[int(ti)%len(serialcfg.PointTypes)]
		order := serialcfg.ByteOrders[int(oi)%len(serialcfg.ByteOrders)]
		p := serialcfg.RS485Point{Function: "holding", Type: typ, Order: order, Scale: scale, Offset: offset}
		width := 2 * p.Registers()
		be = be[:width]
		regs := onWire(be, order)
		raw, err := modbus.DecodeRaw(typ, order, regs)
		if err != nil {
			t.Fatalf("%s %s % x: %v", typ, order, regs, err)
		}
		var want float64
		switch typ {
		case "u16":
			want = float64(binary.BigEndian.Uint16(be))
		case "i16":
			want = float64(int16(binary.BigEndian.Uint16(be)))
		case "bool":
			want = 0
			if binary.BigEndian.Uint16(be) != 0 {
				want = 1
			}
		case "u32":
			want = float64(binary.BigEndian.Uint32(be))
		case "i32":
			want = float64(int32(binary.BigEndian.Uint32(be)))
		case "f32":
			want = float64(math.Float32frombits(binary.BigEndian.Uint32(be)))
		case "u64":
			want = float64(binary.BigEndian.Uint64(be))
		case "i64":
			want = float64(int64(binary.BigEndian.Uint64(be)))
		case "f64":
			want = math.Float64frombits(binary.BigEndian.Uint64(be))
		}
		if !(raw == want || math.IsNaN(raw) && math.IsNaN(want)) {
			t.Fatalf("%s %s: % x on the wire as %04X decoded %v, want %v", typ, order, be, regs, raw, want)
		}
		v, err := modbus.DecodePoint(p, regs)
		if err == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
			t.Fatalf("DecodePoint returned %v without an error", v)
		}
		if typ == "bool" && err == nil && v != raw {
			t.Fatalf("bool %v scaled to %v", raw, v)
		}
	})
}
