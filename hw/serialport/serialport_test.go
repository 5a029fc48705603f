package serialport

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

func openPair(t *testing.T, s Settings) (*Port, func() error, func([]byte)) {
	t.Helper()
	ctl, path, err := OpenPTY()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.Close() })
	p, err := Open(path, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, ctl.Close, func(b []byte) {
		if _, err := ctl.Write(b); err != nil {
			t.Fatal(err)
		}
	}
}

var modbus9600 = Settings{BaudRate: 9600, DataBits: 8, Parity: "even", StopBits: 1, RS485: true}

func TestSilence(t *testing.T) {
	for _, tc := range []struct {
		baud int
		want time.Duration
	}{
		{9600, 4010416 * time.Nanosecond},
		{19200, 2005208 * time.Nanosecond},
		{38400, 1750 * time.Microsecond},
		{115200, 1750 * time.Microsecond},
	} {
		if got := Silence(tc.baud); got != tc.want {
			t.Errorf("Silence(%d) = %v, want %v", tc.baud, got, tc.want)
		}
	}
	if got := modbus9600.CharTime(); got != 1145833*time.Nanosecond {
		t.Errorf("CharTime 8E1 9600 = %v", got)
	}
}

func TestReadFrameEndsOnSilence(t *testing.T) {
	p, _, write := openPair(t, modbus9600)
	// The silence of 1200 baud (32 ms) leaves room for a loaded machine's
	// scheduling delays on either side.
	silence := Silence(1200)

	// Two chunks with a gap well under t3.5 are one frame.
	go func() {
		write([]byte{1, 2, 3})
		time.Sleep(silence / 4)
		write([]byte{4, 5})
	}()
	got, err := p.ReadFrame(time.Second, silence, 256, nil, nil)
	if err != nil || !bytes.Equal(got, []byte{1, 2, 3, 4, 5}) {
		t.Fatalf("short gap: got % x, %v; want one frame 01..05", got, err)
	}

	// A gap longer than t3.5 ends the frame.
	go func() {
		write([]byte{6, 7})
		time.Sleep(3 * silence)
		write([]byte{8})
	}()
	got, err = p.ReadFrame(time.Second, silence, 256, nil, nil)
	if err != nil || !bytes.Equal(got, []byte{6, 7}) {
		t.Fatalf("long gap: got % x, %v; want 06 07", got, err)
	}
	got, err = p.ReadFrame(time.Second, silence, 256, nil, nil)
	if err != nil || !bytes.Equal(got, []byte{8}) {
		t.Fatalf("after gap: got % x, %v; want 08", got, err)
	}

	// Nothing: timeout.
	if _, err := p.ReadFrame(20*time.Millisecond, silence, 256, nil, nil); !errors.Is(err, ErrTimeout) {
		t.Fatalf("no data: err = %v, want ErrTimeout", err)
	}
}

func TestClosedPeerReportsClosed(t *testing.T) {
	p, closePeer, _ := openPair(t, modbus9600)
	closePeer()
	_, err := p.ReadFrame(time.Second, Silence(9600), 256, nil, nil)
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("read after the peer went away: %v, want ErrClosed", err)
	}
}

func TestConfigureLive(t *testing.T) {
	p, _, write := openPair(t, modbus9600)
	s := Settings{BaudRate: 115200, DataBits: 7, Parity: "odd", StopBits: 2, RTSCTS: true}
	if err := p.Configure(s); err != nil {
		t.Fatal(err)
	}
	if p.Settings() != s {
		t.Fatalf("settings = %+v", p.Settings())
	}
	write([]byte("x"))
	got, err := p.ReadFrame(time.Second, Silence(115200), 16, nil, nil)
	if err != nil || string(got) != "x" {
		t.Fatalf("read after reconfigure: %q %v", got, err)
	}
}

func TestRS485FallbackOnPTY(t *testing.T) {
	p, _, write := openPair(t, modbus9600)
	if err := p.RS485Unsupported(); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("RS485Unsupported on a pty = %v, want ErrUnsupported", err)
	}
	// The port works as a plain serial port.
	write([]byte{0x42})
	if got, err := p.ReadFrame(time.Second, Silence(9600), 4, nil, nil); err != nil || !bytes.Equal(got, []byte{0x42}) {
		t.Fatalf("read %x %v", got, err)
	}
	// Without RS485 asked for, nothing is reported.
	s := modbus9600
	s.RS485 = false
	if err := p.Configure(s); err != nil || p.RS485Unsupported() != nil {
		t.Fatalf("plain mode: %v %v", err, p.RS485Unsupported())
	}
}
