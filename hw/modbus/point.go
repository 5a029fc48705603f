package modbus

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/fleet/fleet/shared/serialcfg"
)

// DecodeRaw decodes regs, the registers of one value in the order they
// came off the wire (the first from the lowest address), as typ (one of
// serialcfg.PointTypes) in byte order (one of serialcfg.ByteOrders; ""
// is ABCD) exactly as libmodbus's getters (modbus_get_float_abcd and its
// siblings) decode a float: ABCD big-endian, CDAB the 16-bit words
// swapped, BADC the bytes swapped within each word, DCBA little-endian.
// A 64-bit type applies the same rule over its four words (CDAB reverses
// their order); a 16-bit one keeps ABCD and CDAB as they are and swaps
// the bytes for BADC and DCBA. A "bool" is 1 when its register is
// non-zero. regs must hold at least the type's registers (1, 2 or 4).
func DecodeRaw(typ, order string, regs []uint16) (float64, error) {
	n := registersOf(typ)
	if n == 0 {
		return 0, fmt.Errorf("unknown point type %q", typ)
	}
	if len(regs) < n {
		return 0, fmt.Errorf("%s needs %d registers, got %d", typ, n, len(regs))
	}
	var words [4]uint16
	copy(words[:n], regs[:n])
	swapWords, swapBytes := false, false
	switch order {
	case "", "ABCD":
	case "CDAB":
		swapWords = true
	case "BADC":
		swapBytes = true
	case "DCBA":
		swapWords, swapBytes = true, true
	default:
		return 0, fmt.Errorf("unknown byte order %q", order)
	}
	var b [8]byte
	for i := range n {
		w := words[i]
		if swapWords {
			w = words[n-1-i]
		}
		if swapBytes {
			w = w>>8 | w<<8
		}
		binary.BigEndian.PutUint16(b[2*i:], w)
	}
	switch typ {
	case "u16":
		return float64(binary.BigEndian.Uint16(b[:])), nil
	case "i16":
		return float64(int16(binary.BigEndian.Uint16(b[:]))), nil
	case "bool":
		return b2f(binary.BigEndian.Uint16(b[:]) != 0), nil
	case "u32":
		return float64(binary.BigEndian.Uint32(b[:])), nil
	case "i32":
		return float64(int32(binary.BigEndian.Uint32(b[:]))), nil
	case "f32":
		return float64(math.Float32frombits(binary.BigEndian.Uint32(b[:]))), nil
	case "u64":
		return float64(binary.BigEndian.Uint64(b[:])), nil
	case "i64":
		return float64(int64(binary.BigEndian.Uint64(b[:]))), nil
	default: // f64
		return math.Float64frombits(binary.BigEndian.Uint64(b[:])), nil
	}
}

func registersOf(typ string) int {
	return serialcfg.RS485Point{Function: "holding", Type: typ}.Registers()
}

func b2f(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

// DecodePoint returns the value of point p (with its defaults filled or
// not) from what was read for it: for a holding or input point its
// registers from p.Register on (p.Registers() of them, as on the wire),
// for a coil or discrete input one word, 0 or 1. A "bool" is 0 or 1: the
// coil, the bit p.Bit of the register (0 its least significant), or the
// register being non-zero; scale and offset do not apply to it. Any other
// value is raw × scale + offset (scale 0 meaning 1). A value that is not
// a finite number (a NaN in a float register) is an error.
func DecodePoint(p serialcfg.RS485Point, regs []uint16) (float64, error) {
	switch {
	case p.Function == "coil" || p.Function == "discrete":
		if len(regs) < 1 {
			return 0, fmt.Errorf("no bit read")
		}
		return b2f(regs[0] != 0), nil
	case p.Type == "bool" && p.Bit != nil:
		if len(regs) < 1 {
			return 0, fmt.Errorf("bool needs 1 register, got 0")
		}
		w, err := DecodeRaw("u16", p.Order, regs)
		if err != nil {
			return 0, err
		}
		return b2f(uint16(w)>>uint(*p.Bit&15)&1 != 0), nil
	}
	raw, err := DecodeRaw(p.Type, p.Order, regs)
	if err != nil || p.Type == "bool" {
		return raw, err
	}
	scale := p.Scale
	if scale == 0 {
		scale = 1
	}
	v := raw*scale + p.Offset
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%s value is not a finite number (%v)", p.Type, v)
	}
	return v, nil
}
