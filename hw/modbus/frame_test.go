package modbus

import (
	"bytes"
	"testing"
)

func TestCRCKnownFrames(t *testing.T) {
	for _, tc := range []struct {
		body []byte
		want []byte
	}{
		// Read 10 holding registers from 0 of slave 1: the textbook frame.
		{[]byte{0x01, 0x03, 0x00, 0x00, 0x00, 0x0A}, []byte{0xC5, 0xCD}},
		// Write 3 to register 1 of slave 17.
		{[]byte{0x11, 0x06, 0x00, 0x01, 0x00, 0x03}, []byte{0x9A, 0x9B}},
	} {
		got := AppendCRC(append([]byte(nil), tc.body...))
		if !bytes.Equal(got[len(tc.body):], tc.want) {
			t.Errorf("CRC of % x = % x, want % x", tc.body, got[len(tc.body):], tc.want)
		}
		if !CheckCRC(got) {
			t.Errorf("CheckCRC(% x) false", got)
		}
		got[2] ^= 1
		if CheckCRC(got) {
			t.Errorf("CheckCRC accepted a corrupted frame % x", got)
		}
	}
}

func TestCutRequest(t *testing.T) {
	read := AppendCRC([]byte{1, 3, 0, 0, 0, 2})
	write16 := AppendCRC([]byte{1, 16, 0, 0, 0, 2, 4, 0, 1, 0, 2})
	for _, tc := range []struct {
		name string
		buf  []byte
		want int
	}{
		{"empty", nil, 0},
		{"one byte", []byte{1}, 0},
		{"partial read", read[:5], 0},
		{"whole read", read, 8},
		{"read and more", append(append([]byte(nil), read...), 1, 3), 8},
		{"fc16 before its byte count", write16[:6], 0},
		{"fc16 partial", write16[:10], 0},
		{"fc16 whole", write16, 13},
		{"unknown function taken as it came", []byte{1, 0x41, 9, 9, 9}, 5},
	} {
		if got := cutRequest(tc.buf); got != tc.want {
			t.Errorf("%s: cutRequest = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestResponseLength(t *testing.T) {
	for _, tc := range []struct {
		fc   byte
		b    []byte
		want int
	}{
		{3, []byte{1, 3, 20}, 25},
		{4, []byte{1, 4}, 0},
		{3, []byte{1, 0x83, 2}, 5},
		{6, []byte{1, 6}, 8},
		{16, []byte{1, 16}, 8},
		{0x41, []byte{1, 0x41, 1}, 0},
	} {
		if got := ResponseLength(tc.fc, tc.b); got != tc.want {
			t.Errorf("ResponseLength(%d, % x) = %d, want %d", tc.fc, tc.b, got, tc.want)
		}
	}
}
