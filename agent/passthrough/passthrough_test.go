package passthrough_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/fleet/fleet/agent/passthrough"
	"github.com/fleet/fleet/hw/modbus"
	"github.com/fleet/fleet/hw/modbus/modbustest"
	"github.com/fleet/fleet/hw/uart"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/test/rig/ptytest"
	"github.com/fleet/fleet/test/rig/testwait"
)

// modbusChannel opens an rs485 port on a pty whose far end is sim.
func modbusChannel(t *testing.T, sim *modbustest.Sim, cfg *serialcfg.RS485) *modbus.Port {
	t.Helper()
	path := ptytest.Serve(t, func(ctx context.Context, f *os.File) { sim.Serve(ctx, modbustest.FileLine{F: f}) })
	// No test here is about a slow slave: a response timeout far above the
	// simulator's delays keeps a loaded machine's scheduling from turning
	// an in-time reply into a timeout.
	p, err := modbus.OpenWith(context.Background(), path, serialcfg.Config{Kind: "rs485", RS485: cfg}, nil,
		modbus.Options{ResponseTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func uartChannel(t *testing.T) (*uart.Port, *os.File) {
	t.Helper()
	ctl, path := ptytest.Open(t)
	p, err := uart.Open(context.Background(), path, serialcfg.Config{Kind: "uart", UART: &serialcfg.UART{
		Kind: "uart", BaudRate: 115200, DataBits: 8, Parity: "none", StopBits: 1, FlowControl: "none"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, ctl
}

func rs485(slave int) *serialcfg.RS485 {
	return &serialcfg.RS485{Kind: "rs485", BaudRate: 115200, DataBits: 8, Parity: "even", StopBits: 1,
		Mode: "modbus_rtu_master", SlaveID: slave}
}

// freeBase returns a base port with n free consecutive ports on 127.0.0.1.
func freeBase(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		ok := base+n <= 65535
		for i := 1; ok && i < n; i++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+i))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

func newServer(t *testing.T, cfg passthrough.Config) *passthrough.Server {
	t.Helper()
	s, err := passthrough.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// apply applies mode and channels to s, failing the test on an error.
func apply(t *testing.T, s *passthrough.Server, mode string, channels []passthrough.Channel) {
	t.Helper()
	if err := s.Apply(mode, channels); err != nil {
		t.Fatal(err)
	}
}

// dial connects a TCP client to addr, closed when the test ends.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func readReq(slave byte, fc byte, reg, count uint16) []byte {
	b := []byte{slave, fc}
	b = binary.BigEndian.AppendUint16(b, reg)
	b = binary.BigEndian.AppendUint16(b, count)
	return modbus.AppendCRC(b)
}

// transact sends one request and reads the reply, expecting want bytes.
// The deadline leaves room for the managed transactions ahead of it on the
// bus, each up to the response timeout.
func transact(c net.Conn, req []byte, want int) ([]byte, error) {
	if _, err := c.Write(req); err != nil {
		return nil, err
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	reply := make([]byte, want)
	_, err := io.ReadFull(c, reply)
	return reply, err
}

func TestBothModeRawClientAndPollingShareTheBus(t *testing.T) {
	// The slave takes 3 ms to answer, so transactions last a while and the
	// two owners contend for the bus all the time.
	sim := modbustest.New(modbustest.Options{IDs: []int{1, 2}})
	sim.SetFault(0, modbustest.Fault{Delay: 3 * time.Millisecond})
	cfg := rs485(1)
	cfg.Polls = []serialcfg.ModbusPoll{
		{Enabled: true, IntervalMs: 100, Register: 0, Count: 10, Function: "holding", SlaveID: 1},
		{Enabled: true, IntervalMs: 100, Register: 5, Count: 3, Function: "input", SlaveID: 2},
	}
	cfg.Tx = serialcfg.RS485Tx{Enabled: true, IntervalMs: 100, Register: 100, Value: 9}
	port := modbusChannel(t, sim, cfg)

	base := freeBase(t, 2)
	s := newServer(t, passthrough.Config{Listen: "127.0.0.1:" + strconv.Itoa(base)})
	apply(t, s, passthrough.ModeBoth, []passthrough.Channel{{ID: "uart-1"}, {ID: "rs485-1", Raw: port}})
	addr := s.PassthroughAddress("rs485-1")
	if addr != "127.0.0.1:"+strconv.Itoa(base+1) {
		t.Fatalf("rs485-1 address %q, want the second port of the range", addr)
	}
	c := dial(t, addr)

	deadline := time.Now().Add(1500 * time.Millisecond)
	n := 0
	for ; time.Now().Before(deadline) || n < 100; n++ {
		slave := byte(1 + n%2)
		reg := uint16(n % 50)
		count := uint16(1 + n%8)
		fc := byte(modbus.FuncReadHolding)
		if n%3 == 0 {
			fc = modbus.FuncReadInput
		}
		reply, err := transact(c, readReq(slave, fc, reg, count), 5+2*int(count))
		if err != nil {
			t.Fatalf("request %d: %v", n, err)
		}
		if !modbus.CheckCRC(reply) || reply[0] != slave || reply[1] != fc || int(reply[2]) != 2*int(count) {
			t.Fatalf("request %d (slave %d fc %d reg %d count %d): corrupted reply % x", n, slave, fc, reg, count, reply)
		}
		for i := range int(count) {
			want := uint16(slave)*100 + reg + uint16(i)
			if fc == modbus.FuncReadInput {
				want += 10000
			}
			if got := binary.BigEndian.Uint16(reply[3+2*i:]); got != want {
				t.Fatalf("request %d: register %d = %d, want %d", n, reg+uint16(i), got, want)
			}
		}
	}
	// Managed polling ran meanwhile and every frame on the bus was intact.
	tel := port.Telemetry()
	if tel.Error != "" || tel.Live == "" {
		t.Fatalf("managed telemetry during passthrough: %+v", tel)
	}
	st := sim.Stats()
	if st.BadFrames != 0 {
		t.Fatalf("slave saw %d corrupted frames", st.BadFrames)
	}
	if managed := st.Requests - n; managed < 10 {
		t.Fatalf("only %d managed transactions ran beside %d raw ones", managed, n)
	}
	if v := sim.Holding(1, 100); v != 9 {
		t.Fatalf("managed tx did not reach the slave: register 100 = %d", v)
	}
}

func TestPassthroughModePausesManagedTraffic(t *testing.T) {
	sim := modbustest.New(modbustest.Options{IDs: []int{1}})
	cfg := rs485(1)
	cfg.Poll = &serialcfg.ModbusPoll{Enabled: true, IntervalMs: 100, Register: 0, Count: 1, Function: "holding"}
	port := modbusChannel(t, sim, cfg)
	s := newServer(t, passthrough.Config{Listen: "127.0.0.1:" + strconv.Itoa(freeBase(t, 1))})
	apply(t, s, passthrough.ModePassthrough, []passthrough.Channel{{ID: "rs485-1", Raw: port}})
	// A poll already under way when the mode changed may still reach the
	// slave: wait for the count to settle, then no poll may follow.
	before := settled(t, sim)
	time.Sleep(400 * time.Millisecond)
	if after := sim.Stats().Requests; after != before {
		t.Fatalf("managed polling ran in mode passthrough: %d -> %d requests", before, after)
	}
	c := dial(t, s.PassthroughAddress("rs485-1"))
	reply, err := transact(c, readReq(1, 3, 7, 1), 7)
	if err != nil || !modbus.CheckCRC(reply) || binary.BigEndian.Uint16(reply[3:]) != 107 {
		t.Fatalf("raw reply % x, %v", reply, err)
	}
	// Back to both: polling resumes.
	apply(t, s, passthrough.ModeBoth, []passthrough.Channel{{ID: "rs485-1", Raw: port}})
	before = sim.Stats().Requests
	testwait.Value(t, "managed polling to resume (requests)", 10*time.Second, 20*time.Millisecond,
		func() int { return sim.Stats().Requests }, func(n int) bool { return n >= before+2 })
}

// settled returns the slave's request count once it has not moved for
// 150 ms (a poll interval and a half); polling that goes on fails t.
func settled(t *testing.T, sim *modbustest.Sim) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	n := sim.Stats().Requests
	for {
		time.Sleep(150 * time.Millisecond)
		m := sim.Stats().Requests
		if m == n {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("managed polling ran in mode passthrough: %d requests in the last 150 ms", m-n)
		}
		n = m
	}
}

func TestSecondClientRefused(t *testing.T) {
	port, ctl := uartChannel(t)
	s := newServer(t, passthrough.Config{Listen: "127.0.0.1:" + strconv.Itoa(freeBase(t, 1))})
	apply(t, s, passthrough.ModePassthrough, []passthrough.Channel{{ID: "uart-1", Raw: port}})
	addr := s.PassthroughAddress("uart-1")
	first := dial(t, addr)
	// Make sure the first client is attached before the second arrives.
	echo(t, first, ctl, "ping")

	second := dial(t, addr)
	second.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := second.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("second client: read %d, %v; want an immediate close (EOF)", n, err)
	}
	// The first keeps working.
	echo(t, first, ctl, "still mine")

	// Once the first leaves, a new client gets the port.
	first.Close()
	testwait.For(t, "a client accepted after the first left", 30*time.Second, func() bool {
		third, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer third.Close()
		return tryEcho(third, ctl, "third")
	})
}

// echo sends msg from the client to the device and back from the device.
func echo(t *testing.T, c net.Conn, ctl *os.File, msg string) {
	t.Helper()
	if !tryEcho(c, ctl, msg) {
		t.Fatalf("echo %q through the passthrough failed", msg)
	}
}

func tryEcho(c net.Conn, ctl *os.File, msg string) bool {
	if _, err := c.Write([]byte(msg)); err != nil {
		return false
	}
	buf := make([]byte, len(msg))
	ctl.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(ctl, buf); err != nil || string(buf) != msg {
		return false
	}
	if _, err := ctl.Write([]byte(msg)); err != nil {
		return false
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
		return false
	}
	return true
}

func TestIdleClientDisconnected(t *testing.T) {
	port, ctl := uartChannel(t)
	s := newServer(t, passthrough.Config{Listen: "127.0.0.1:" + strconv.Itoa(freeBase(t, 1)), IdleTimeout: 200 * time.Millisecond})
	apply(t, s, passthrough.ModePassthrough, []passthrough.Channel{{ID: "uart-1", Raw: port}})
	c := dial(t, s.PassthroughAddress("uart-1"))
	echo(t, c, ctl, "hello")
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("idle client: %v, want EOF", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("closed after %v, before the idle timeout", d)
	}
}

func TestListenerBoundToHostOnly(t *testing.T) {
	port, _ := uartChannel(t)
	base := freeBase(t, 1)
	s := newServer(t, passthrough.Config{Listen: "127.0.0.1:" + strconv.Itoa(base)})
	apply(t, s, passthrough.ModePassthrough, []passthrough.Channel{{ID: "uart-1", Raw: port}})
	if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(base)); err != nil {
		t.Fatal(err)
	} else {
		c.Close()
	}
	// Another loopback address reaches the same machine but not the
	// listener: it is bound to 127.0.0.1 only, not to all interfaces.
	if c, err := net.DialTimeout("tcp", "127.0.0.2:"+strconv.Itoa(base), time.Second); err == nil {
		c.Close()
		t.Fatal("listener answered on 127.0.0.2: bound to more than the given host")
	}
}

func TestEmptyHostUsesInterfaceAddress(t *testing.T) {
	port, _ := uartChannel(t)
	base := freeBase(t, 1)
	s := newServer(t, passthrough.Config{Listen: ":" + strconv.Itoa(base), Interface: "lo"})
	apply(t, s, passthrough.ModeBoth, []passthrough.Channel{{ID: "uart-1", Raw: port}})
	if got, want := s.PassthroughAddress("uart-1"), "127.0.0.1:"+strconv.Itoa(base); got != want {
		t.Fatalf("address %q, want %q (lo's IPv4 address)", got, want)
	}

	missing := newServer(t, passthrough.Config{Listen: ":" + strconv.Itoa(base+1), Interface: "fleet-nope0"})
	err := missing.Apply(passthrough.ModeBoth, []passthrough.Channel{{ID: "uart-1", Raw: port}})
	if !errors.Is(err, passthrough.ErrNoVPNAddress) {
		t.Fatalf("missing VPN interface: %v, want ErrNoVPNAddress", err)
	}
	if a := missing.PassthroughAddress("uart-1"); a != "" {
		t.Fatalf("listening at %q without a VPN address", a)
	}
}

func TestManagedModeClosesListeners(t *testing.T) {
	port, ctl := uartChannel(t)
	base := freeBase(t, 1)
	s := newServer(t, passthrough.Config{Listen: "127.0.0.1:" + strconv.Itoa(base)})
	chs := []passthrough.Channel{{ID: "uart-1", Raw: port}}
	apply(t, s, passthrough.ModePassthrough, chs)
	c := dial(t, s.PassthroughAddress("uart-1"))
	// Dial returns once the connection is queued; the echo proves the
	// client is attached (one still queued is reset when the listener
	// closes, not served and closed).
	echo(t, c, ctl, "ping")
	apply(t, s, passthrough.ModeManaged, chs)
	if a := s.PassthroughAddress("uart-1"); a != "" {
		t.Fatalf("address %q in mode managed", a)
	}
	if c2, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(base)); err == nil {
		c2.Close()
		t.Fatal("port still open in mode managed")
	}
	// The attached client was disconnected too.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("client after managed: %v, want EOF", err)
	}
}

func TestNewRejectsBadListen(t *testing.T) {
	for _, l := range []string{"", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000", "wg.example:4000"} {
		if _, err := passthrough.New(passthrough.Config{Listen: l}, nil); err == nil {
			t.Errorf("Listen %q accepted", l)
		}
	}
}
