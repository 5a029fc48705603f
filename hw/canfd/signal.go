package canfd

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/fleet/fleet/shared/serialcfg"
)

// Signal is a canfd point (serialcfg.CANPoint) ready to decode: a bit
// field of the payload of frames with ID, with DBC semantics on classic
// and 64-byte FD payloads.
//
// Bits are numbered as a DBC file numbers them: bit i is bit i%8 (0 the
// least significant) of byte i/8. A little-endian (Intel, @1) signal has
// its least significant bit at Start and runs on towards higher bits and
// bytes. A big-endian (Motorola, @0) signal has its most significant bit
// at Start and runs down within a byte, then on from bit 7 of the next
// byte (the "sawtooth"). value = raw × Scale + Offset, raw being the
// two's complement of Length bits when Signed.
type Signal struct {
	Name     string
	ID       uint32
	Extended bool
	Start    int
	Length   int
	Big      bool
	Signed   bool
	Scale    float64
	Offset   float64
}

// ParsePointCANID parses a point's canId: serialcfg.ParseCANID, and an id
// written with eight hex digits ("0x00000100", as live shows an extended
// id) is extended even when it is at most 0x7FF, so that every extended
// id a DBC file holds can be named.
func ParsePointCANID(s string) (id uint32, extended bool, err error) {
	id, extended, err = serialcfg.ParseCANID(s)
	if err != nil {
		return 0, false, err
	}
	h := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	return id, extended || len(h) == 8, nil
}

// CompileSignal checks p and returns its Signal. Errors name the field.
func CompileSignal(p serialcfg.CANPoint) (Signal, error) {
	id, ext, err := ParsePointCANID(p.CanID)
	if err != nil {
		return Signal{}, fmt.Errorf("canId: %w", err)
	}
	s := Signal{Name: p.Name, ID: id, Extended: ext, Start: p.StartBit, Length: p.Length, Signed: p.Signed, Scale: p.Scale, Offset: p.Offset}
	switch p.ByteOrder {
	case "", "little":
	case "big":
		s.Big = true
	default:
		return Signal{}, fmt.Errorf("byteOrder: %q is not little or big", p.ByteOrder)
	}
	if s.Length < 1 || s.Length > 64 {
		return Signal{}, fmt.Errorf("length: %d is not 1..64", s.Length)
	}
	if s.Start < 0 || s.Start >= 8*MaxFDData {
		return Signal{}, fmt.Errorf("startBit: %d is not 0..%d", s.Start, 8*MaxFDData-1)
	}
	if s.Bytes() > MaxFDData {
		return Signal{}, fmt.Errorf("startBit: %d bits from bit %d do not fit a 64-byte frame", s.Length, s.Start)
	}
	if s.Scale == 0 {
		s.Scale = 1
	}
	return s, nil
}

// msbIndex is the position of a Motorola signal's most significant bit in
// the payload read as one big-endian bit string (bit 0 = bit 7 of byte 0).
func (s Signal) msbIndex() int { return s.Start/8*8 + 7 - s.Start%8 }

// Bytes returns how many payload bytes a frame needs to carry the signal.
func (s Signal) Bytes() int {
	if s.Big {
		return (s.msbIndex()+s.Length-1)/8 + 1
	}
	return (s.Start+s.Length-1)/8 + 1
}

// Matches reports whether f is a data frame with the signal's id.
func (s Signal) Matches(f Frame) bool {
	return !f.Err && !f.RTR && f.ID == s.ID && f.Extended == s.Extended
}

// Raw returns the signal's raw bits from data (sign-extended to 64 bits
// when Signed); ok is false when data is too short.
func (s Signal) Raw(data []byte) (raw uint64, ok bool) {
	if len(data) < s.Bytes() {
		return 0, false
	}
	// Nine bytes from the signal's first byte hold it whatever its bit
	// offset; bytes past the payload (beyond the signal) read as 0.
	var buf [9]byte
	if s.Big {
		pos := s.msbIndex()
		first, shift := pos/8, pos%8
		copy(buf[:], data[first:])
		word := binary.BigEndian.Uint64(buf[:8])
		if shift > 0 {
			word = word<<shift | uint64(buf[8])>>(8-shift)
		}
		raw = word >> (64 - s.Length)
	} else {
		first, shift := s.Start/8, s.Start%8
		copy(buf[:], data[first:])
		raw = binary.LittleEndian.Uint64(buf[:8])
		if shift > 0 {
			raw = raw>>shift | uint64(buf[8])<<(64-shift)
		}
		if s.Length < 64 {
			raw &= 1<<s.Length - 1
		}
	}
	if s.Signed && s.Length < 64 && raw>>(s.Length-1)&1 == 1 {
		raw |= ^uint64(0) << s.Length
	}
	return raw, true
}

// Decode returns the signal's physical value in data, raw × Scale +
// Offset; ok is false when data is too short for it.
func (s Signal) Decode(data []byte) (v float64, ok bool) {
	raw, ok := s.Raw(data)
	if !ok {
		return 0, false
	}
	if s.Signed {
		return float64(int64(raw))*s.Scale + s.Offset, true
	}
	return float64(raw)*s.Scale + s.Offset, true
}

// TooShort is the error of a frame of n bytes that does not carry the
// signal: "frame 0x123 too short for signal (8 bytes)".
func (s Signal) TooShort(n int) string {
	return fmt.Sprintf("frame 0x%s too short for signal (%d bytes)", serialcfg.FormatCANID(s.ID, s.Extended), n)
}
