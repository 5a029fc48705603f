package modbus

// CRC returns the Modbus RTU CRC-16 (polynomial 0xA001, initial 0xFFFF) of b.
func CRC(b []byte) uint16 {
	crc := uint16(0xFFFF)
	for _, c := range b {
		crc ^= uint16(c)
		for range 8 {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0xA001
			} else {
				crc >>= 1
			}
		}
	}
	return crc
}

// AppendCRC appends the CRC of b to b, low byte first as RTU sends it.
func AppendCRC(b []byte) []byte {
	c := CRC(b)
	return append(b, byte(c), byte(c>>8))
}

// CheckCRC reports whether frame ends with the valid CRC of its other bytes.
func CheckCRC(frame []byte) bool {
	if len(frame) < 4 {
		return false
	}
	n := len(frame) - 2
	c := CRC(frame[:n])
	return frame[n] == byte(c) && frame[n+1] == byte(c>>8)
}

// Function codes this package reads and writes.
const (
	FuncReadCoils     = 1
	FuncReadDiscrete  = 2
	FuncReadHolding   = 3
	FuncReadInput     = 4
	FuncWriteRegister = 6
)

// RequestLength returns the length of the RTU request frame that starts
// b, judging by its function code, or 0 when b is too short to tell or the
// function code has no fixed layout.
func RequestLength(b []byte) int {
	if len(b) < 2 {
		return 0
	}
	switch b[1] {
	case 1, 2, 3, 4, 5, 6:
		return 8
	case 15, 16:
		if len(b) < 7 {
			return 0
		}
		return 9 + int(b[6])
	case 22:
		return 10
	case 23:
		if len(b) < 11 {
			return 0
		}
		return 13 + int(b[10])
	}
	return 0
}

// ResponseLength returns the length of the RTU reply frame that starts b
// for a request with function code fc, or 0 when b is too short to tell or
// the function has no fixed layout.
func ResponseLength(fc byte, b []byte) int {
	if len(b) < 2 {
		return 0
	}
	if b[1]&0x80 != 0 {
		return 5
	}
	switch fc {
	case 1, 2, 3, 4, 23:
		if len(b) < 3 {
			return 0
		}
		return 5 + int(b[2])
	case 5, 6, 15, 16:
		return 8
	case 22:
		return 10
	}
	return 0
}
