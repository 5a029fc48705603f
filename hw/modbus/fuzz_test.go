package modbus_test

import (
	"testing"

	"github.com/fleet/fleet/hw/modbus"
)

// FuzzRTUFrame checks the RTU framing helpers on arbitrary bytes: a frame
// with its CRC appended passes CheckCRC and every single-bit error in it is
// caught (CRC-16 detects them all); the length a request or reply frame is
// judged to have is 0 (cannot tell) or a whole frame's (at least the
// address, function code and CRC; at most 256 bytes plus the header bytes
// that announce the count), whatever the bytes say.
func FuzzRTUFrame(f *testing.F) {
	f.Add([]byte{0x07, 0x03, 0x00, 0x0a, 0x00, 0x02}, uint8(3))
	f.Add([]byte{0x07, 0x83, 0x02}, uint8(3))
	f.Add([]byte{0x01, 0x10, 0x00, 0x01, 0x00, 0x02, 0x04, 0, 1, 0, 2}, uint8(16))
	f.Add([]byte{0x01, 0x17, 0, 0, 0, 1, 0, 0, 0, 1, 0xff}, uint8(23))
	f.Fuzz(func(t *testing.T, b []byte, fc uint8) {
		if len(b) >= 2 && len(b) <= 254 {
			frame := modbus.AppendCRC(append([]byte(nil), b...))
			if !modbus.CheckCRC(frame) {
				t.Fatalf("CheckCRC refuses its own frame % x", frame)
			}
			for i := range len(frame) * 8 {
				bad := append([]byte(nil), frame...)
				bad[i/8] ^= 1 << (i % 8)
				if modbus.CheckCRC(bad) {
					t.Fatalf("bit %d flipped in % x passes CheckCRC", i, frame)
				}
			}
		}
		modbus.CheckCRC(b)
		if n := modbus.RequestLength(b); n != 0 && (n < 4 || n > 13+255) {
			t.Fatalf("RequestLength(% x) = %d", b, n)
		}
		if n := modbus.ResponseLength(fc, b); n != 0 && (n < 4 || n > 5+255) {
			t.Fatalf("ResponseLength(%d, % x) = %d", fc, b, n)
		}
	})
}
