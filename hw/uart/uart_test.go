package uart_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleet/fleet/hw/serialport"
	"github.com/fleet/fleet/hw/uart"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/test/rig/testwait"
)

type peer struct {
	ctl  *os.File
	link string
}

func newPeer(t *testing.T) *peer {
	t.Helper()
	p := &peer{link: filepath.Join(t.TempDir(), "ttyUART")}
	p.plug(t)
	t.Cleanup(func() {
		if p.ctl != nil {
			p.ctl.Close()
		}
	})
	return p
}

func (p *peer) plug(t *testing.T) {
	t.Helper()
	ctl, path, err := serialport.OpenPTY()
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(p.link)
	if err := os.Symlink(path, p.link); err != nil {
		t.Fatal(err)
	}
	p.ctl = ctl
}

func (p *peer) unplug() {
	p.ctl.Close()
	p.ctl = nil
	os.Remove(p.link)
}

func (p *peer) send(t *testing.T, s string) {
	t.Helper()
	if _, err := p.ctl.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

// expect reads from the peer until it has received want.
func (p *peer) expect(t *testing.T, want []byte) {
	t.Helper()
	var got []byte
	buf := make([]byte, 1024)
	p.ctl.SetReadDeadline(time.Now().Add(5 * time.Second))
	for !bytes.Contains(got, want) {
		n, err := p.ctl.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("peer read: got % x, want % x: %v", got, want, err)
		}
	}
}

func cfg(mut func(c *serialcfg.UART)) serialcfg.Config {
	c := &serialcfg.UART{Kind: "uart", BaudRate: 115200, DataBits: 8, Parity: "none", StopBits: 1, FlowControl: "none"}
	if mut != nil {
		mut(c)
	}
	return serialcfg.Config{Kind: "uart", UART: c}
}

func open(t *testing.T, pe *peer, c serialcfg.Config) *uart.Port {
	t.Helper()
	p, err := uart.OpenWith(context.Background(), pe.link, c, nil, uart.Options{ReopenMin: 20 * time.Millisecond, ReopenMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func waitFor(t *testing.T, p *uart.Port, what string, ok func(serialcfg.Telemetry) bool) {
	t.Helper()
	testwait.Value(t, what, 5*time.Second, 10*time.Millisecond, p.Telemetry, ok)
}

func TestLiveIsLastLine(t *testing.T) {
	long := strings.Repeat("x", 300)
	for _, tc := range []struct {
		name   string
		chunks []string
		want   string
	}{
		{"lf", []string{"first\nsecond\n"}, "second"},
		{"crlf", []string{"temp=21.5\r\n"}, "temp=21.5"},
		{"split across reads", []string{"hel", "lo wor", "ld\n"}, "hello world"},
		{"unterminated tail waits", []string{"done\npartial"}, "done"},
		{"control characters dropped", []string{"a\x00b\x07c\x1b[0m\n"}, "abc[0m"},
		{"utf-8 kept", []string{"Grüße 25°C\n"}, "Grüße 25°C"},
		{"at most 256 characters", []string{long + "\n"}, long[:256]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pe := newPeer(t)
			p := open(t, pe, cfg(nil))
			for _, c := range tc.chunks {
				pe.send(t, c)
				time.Sleep(20 * time.Millisecond)
			}
			waitFor(t, p, "live "+tc.want, func(tel serialcfg.Telemetry) bool { return tel.Live == tc.want })
		})
	}
}

func TestTx(t *testing.T) {
	pe := newPeer(t)
	p := open(t, pe, cfg(func(c *serialcfg.UART) {
		c.Tx = serialcfg.UARTTx{Enabled: true, IntervalMs: 0, DataHex: "48 49 0A"}
	}))
	pe.expect(t, []byte("HI\n"))
	waitFor(t, p, "single send done", func(tel serialcfg.Telemetry) bool { return !tel.TxOn })

	if err := p.Apply(context.Background(), cfg(func(c *serialcfg.UART) {
		c.Tx = serialcfg.UARTTx{Enabled: true, IntervalMs: 100, DataHex: "01020304"}
	})); err != nil {
		t.Fatal(err)
	}
	if !p.Telemetry().TxOn {
		t.Fatal("periodic tx: txOn false")
	}
	pe.expect(t, []byte{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4})
}

func TestFlowControlAppliedLive(t *testing.T) {
	pe := newPeer(t)
	fd, err := unix.Open(pe.link, unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	p := open(t, pe, cfg(nil))
	cflag := func() uint32 {
		tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		return tio.Cflag
	}
	if cflag()&unix.CRTSCTS != 0 {
		t.Fatal("rtscts set with flowControl none")
	}
	if err := p.Apply(context.Background(), cfg(func(c *serialcfg.UART) { c.FlowControl = "rtscts"; c.BaudRate = 230400 })); err != nil {
		t.Fatal(err)
	}
	if c := cflag(); c&unix.CRTSCTS == 0 || c&unix.CBAUD != unix.B230400 {
		t.Fatalf("cflag %#o: want rtscts and 230400 baud", c)
	}
	pe.send(t, "still here\n")
	waitFor(t, p, "line after change", func(tel serialcfg.Telemetry) bool { return tel.Live == "still here" })
}

func TestPortClosedAndReopened(t *testing.T) {
	pe := newPeer(t)
	p := open(t, pe, cfg(nil))
	pe.send(t, "one\n")
	waitFor(t, p, "first line", func(tel serialcfg.Telemetry) bool { return tel.Live == "one" })
	pe.unplug()
	waitFor(t, p, "port closed", func(tel serialcfg.Telemetry) bool { return tel.Error == "port closed" })
	time.Sleep(150 * time.Millisecond)
	pe.plug(t)
	waitFor(t, p, "reopened", func(tel serialcfg.Telemetry) bool { return tel.Error == "" })
	time.Sleep(50 * time.Millisecond)
	pe.send(t, "two\n")
	waitFor(t, p, "line after reopen", func(tel serialcfg.Telemetry) bool { return tel.Live == "two" })
}

func TestServeRawOneClient(t *testing.T) {
	pe := newPeer(t)
	p := open(t, pe, cfg(nil))
	a, b := net.Pipe()
	defer a.Close()
	done := make(chan error, 1)
	go func() { done <- p.ServeRaw(context.Background(), b) }()
	if _, err := a.Write([]byte("to device")); err != nil {
		t.Fatal(err)
	}
	pe.expect(t, []byte("to device"))
	pe.send(t, "from device\n")
	got := make([]byte, 12)
	a.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(a, got); err != nil || string(got) != "from device\n" {
		t.Fatalf("client got %q, %v", got, err)
	}
	// The line also reached live.
	waitFor(t, p, "live", func(tel serialcfg.Telemetry) bool { return tel.Live == "from device" })
	// A second client is refused while the first is attached.
	c, d := net.Pipe()
	defer c.Close()
	if err := p.ServeRaw(context.Background(), d); err != uart.ErrBusy {
		t.Fatalf("second client: %v, want ErrBusy", err)
	}
	a.Close()
	if err := <-done; err != nil && err != io.ErrClosedPipe {
		t.Fatalf("ServeRaw after client close: %v", err)
	}
}
