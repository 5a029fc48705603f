package modbus_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/hw/modbus"
	"github.com/fleet/fleet/hw/modbus/modbustest"
	"github.com/fleet/fleet/hw/serialport"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/test/rig/testwait"
)

// rig is a slave simulator on the controller side of a pty pair, reached
// through a stable symlink (as udev's /dev/serial/by-id links are), so a
// test can unplug the port and plug a new one in under the same name.
type rig struct {
	t      *testing.T
	sim    *modbustest.Sim
	link   string
	ctl    *os.File
	cancel context.CancelFunc
	served chan struct{}
}

func newRig(t *testing.T, opts modbustest.Options) *rig {
	t.Helper()
	r := &rig{t: t, sim: modbustest.New(opts), link: filepath.Join(t.TempDir(), "ttyRS485")}
	r.plug()
	t.Cleanup(r.unplug)
	return r
}

func (r *rig) plug() {
	r.t.Helper()
	ctl, path, err := serialport.OpenPTY()
	if err != nil {
		r.t.Fatal(err)
	}
	os.Remove(r.link)
	if err := os.Symlink(path, r.link); err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.ctl, r.cancel, r.served = ctl, cancel, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		r.sim.Serve(ctx, modbustest.FileLine{F: ctl})
	}(r.served)
}

// unplug makes the port disappear: the pty pair is closed and its name
// removed.
func (r *rig) unplug() {
	if r.ctl == nil {
		return
	}
	r.cancel()
	<-r.served
	r.ctl.Close()
	r.ctl = nil
	os.Remove(r.link)
}

func rs485(mut func(c *serialcfg.RS485)) serialcfg.Config {
	c := &serialcfg.RS485{Kind: "rs485", BaudRate: 115200, DataBits: 8, Parity: "even", StopBits: 1,
		Mode: "modbus_rtu_master", SlaveID: 7}
	if mut != nil {
		mut(c)
	}
	return serialcfg.Config{Kind: "rs485", RS485: c}
}

func poll(fn string, reg, count int) *serialcfg.ModbusPoll {
	return &serialcfg.ModbusPoll{Enabled: true, IntervalMs: 100, Register: reg, Count: count, Function: fn}
}

// fast reopens a lost port quickly. Its response timeout is still far
// above the simulator's answer time: on a loaded machine a shorter one
// turns in-time replies into timeouts (a timed-out single tx is not sent
// again, a healthy slave reports an error).
var fast = modbus.Options{ResponseTimeout: time.Second, ReopenMin: 20 * time.Millisecond, ReopenMax: 100 * time.Millisecond}

func open(t *testing.T, r *rig, cfg serialcfg.Config) *modbus.Port {
	t.Helper()
	p, err := modbus.OpenWith(context.Background(), r.link, cfg, nil, fast)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// waitFor polls the port's telemetry until ok holds.
func waitFor(t *testing.T, p *modbus.Port, what string, ok func(serialcfg.Telemetry) bool) serialcfg.Telemetry {
	t.Helper()
	return testwait.Value(t, what, 20*time.Second, 10*time.Millisecond, p.Telemetry, ok)
}

func TestPollFeedsLive(t *testing.T) {
	for _, tc := range []struct {
		name string
		poll *serialcfg.ModbusPoll
		want string
	}{
		{"holding", poll("holding", 10, 3), "710 711 712"},
		{"input", poll("input", 0, 2), "10700 10701"},
		{"last register", poll("holding", 65535, 1), "765"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, modbustest.Options{IDs: []int{7}})
			if tc.name == "last register" {
				r.sim.SetHolding(7, 65535, 765)
			}
			p := open(t, r, rs485(func(c *serialcfg.RS485) { c.Poll = tc.poll }))
			tel := waitFor(t, p, "live "+tc.want, func(tel serialcfg.Telemetry) bool { return tel.Live == tc.want })
			if tel.Error != "" || tel.TxOn {
				t.Fatalf("telemetry %+v: want no error, txOn false", tel)
			}
			// Values follow the slave.
			if tc.name == "holding" {
				r.sim.SetHolding(7, 11, 4242)
				waitFor(t, p, "changed value", func(tel serialcfg.Telemetry) bool { return tel.Live == "710 4242 712" })
			}
		})
	}
}

func TestFaultsReportedAndCleared(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault modbustest.Fault
		want  string
	}{
		{"no reply", modbustest.Fault{NoReply: true}, "modbus timeout (slave 7)"},
		{"bad crc", modbustest.Fault{BadCRC: true}, "crc error"},
		{"illegal function", modbustest.Fault{Exception: 1}, "illegal function"},
		{"illegal data address", modbustest.Fault{Exception: 2}, "illegal data address"},
		{"illegal data value", modbustest.Fault{Exception: 3}, "illegal data value"},
		{"slave device failure", modbustest.Fault{Exception: 4}, "slave device failure"},
		{"slave too slow", modbustest.Fault{Delay: 1500 * time.Millisecond}, "modbus timeout (slave 7)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, modbustest.Options{IDs: []int{7}})
			p := open(t, r, rs485(func(c *serialcfg.RS485) { c.Poll = poll("holding", 1, 1) }))
			waitFor(t, p, "first reading", func(tel serialcfg.Telemetry) bool { return tel.Live == "701" })
			r.sim.SetFault(7, tc.fault)
			waitFor(t, p, "error "+tc.want, func(tel serialcfg.Telemetry) bool { return tel.Error == tc.want })
			r.sim.SetFault(7, modbustest.Fault{})
			r.sim.SetHolding(7, 1, 5)
			waitFor(t, p, "error cleared", func(tel serialcfg.Telemetry) bool { return tel.Error == "" && tel.Live == "5" })
		})
	}
}

func TestSlowSlaveWithinTimeout(t *testing.T) {
	r := newRig(t, modbustest.Options{IDs: []int{7}})
	r.sim.SetFault(7, modbustest.Fault{Delay: 40 * time.Millisecond})
	// A timeout far above the delay: a loaded machine's scheduling must
	// not turn the in-time reply into a timeout.
	opts := fast
	opts.ResponseTimeout = 5 * time.Second
	p, err := modbus.OpenWith(context.Background(), r.link, rs485(func(c *serialcfg.RS485) { c.Poll = poll("holding", 2, 1) }), nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitFor(t, p, "reading", func(tel serialcfg.Telemetry) bool { return tel.Live == "702" })
	time.Sleep(300 * time.Millisecond)
	if tel := p.Telemetry(); tel.Error != "" {
		t.Fatalf("slow but in-time slave: error %q", tel.Error)
	}
}

func TestReplyFramedBySilence(t *testing.T) {
	// At 1200 baud t3.5 is 32 ms: wide enough that a loaded machine's
	// scheduling delays stay well inside it. The long gap is far longer
	// still, so a reader that a busy machine keeps waiting past it does not
	// find both halves at once.
	for _, tc := range []struct {
		name string
		gap  time.Duration
		err  string
	}{
		{"gap shorter than t3.5 is one frame", 8 * time.Millisecond, ""},
		{"gap longer than t3.5 ends the frame", 500 * time.Millisecond, "crc error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, modbustest.Options{IDs: []int{7}})
			r.sim.SetFault(7, modbustest.Fault{SplitGap: tc.gap})
			p, err := modbus.OpenWith(context.Background(), r.link, rs485(func(c *serialcfg.RS485) {
				c.BaudRate = 1200
			}), nil, modbus.Options{ResponseTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			for range 3 {
				regs, err := p.ReadRegisters(context.Background(), 7, false, 20, 4)
				if tc.err == "" {
					if err != nil || fmt.Sprint(regs) != "[720 721 722 723]" {
						t.Fatalf("read %v, %v; want one frame with 720..723", regs, err)
					}
					continue
				}
				if got := modbus.Cause(err, 7); got != tc.err {
					t.Fatalf("read %v, %v (cause %q); want %q", regs, err, got, tc.err)
				}
				time.Sleep(2 * tc.gap) // let the second half go by
			}
		})
	}
}

func TestSeveralSlaves(t *testing.T) {
	r := newRig(t, modbustest.Options{IDs: []int{1, 2}})
	p := open(t, r, rs485(func(c *serialcfg.RS485) {
		c.SlaveID = 1
		c.Polls = []serialcfg.ModbusPoll{
			{Enabled: true, IntervalMs: 100, Register: 0, Count: 1, Function: "holding", SlaveID: 1},
			{Enabled: true, IntervalMs: 100, Register: 0, Count: 2, Function: "input", SlaveID: 2},
		}
	}))
	waitFor(t, p, "slave 1", func(tel serialcfg.Telemetry) bool { return tel.Live == "100" })
	waitFor(t, p, "slave 2", func(tel serialcfg.Telemetry) bool { return tel.Live == "10200 10201" })
	r.sim.SetFault(2, modbustest.Fault{NoReply: true})
	waitFor(t, p, "slave 2 timeout", func(tel serialcfg.Telemetry) bool { return tel.Error == "modbus timeout (slave 2)" })
	// Slave 1 keeps answering while slave 2 is silent.
	r.sim.SetHolding(1, 0, 99)
	waitFor(t, p, "slave 1 still read", func(tel serialcfg.Telemetry) bool { return tel.Live == "99" })
	r.sim.SetFault(2, modbustest.Fault{})
	waitFor(t, p, "slave 2 back", func(tel serialcfg.Telemetry) bool { return tel.Error == "" })
	if st := r.sim.Stats(); st.BadFrames != 0 {
		t.Fatalf("simulator saw %d bad frames", st.BadFrames)
	}
}

func TestTxSingleAndPeriodic(t *testing.T) {
	r := newRig(t, modbustest.Options{IDs: []int{7}})
	p := open(t, r, rs485(func(c *serialcfg.RS485) {
		c.Tx = serialcfg.RS485Tx{Enabled: true, IntervalMs: 0, Register: 40, Value: 1234}
	}))
	waitFor(t, p, "single send done", func(tel serialcfg.Telemetry) bool { return !tel.TxOn && tel.Live == "1234" })
	if v := r.sim.Holding(7, 40); v != 1234 {
		t.Fatalf("register 40 = %d, want 1234", v)
	}
	if n := countWrites(r.sim); n != 1 {
		t.Fatalf("%d writes for a single send", n)
	}

	if err := p.Apply(context.Background(), rs485(func(c *serialcfg.RS485) {
		c.Tx = serialcfg.RS485Tx{Enabled: true, IntervalMs: 100, Register: 41, Value: 77}
	})); err != nil {
		t.Fatal(err)
	}
	if tel := p.Telemetry(); !tel.TxOn {
		t.Fatalf("periodic tx: txOn false")
	}
	deadline := time.Now().Add(20 * time.Second)
	for countWrites(r.sim) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("periodic tx: %d writes", countWrites(r.sim))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v := r.sim.Holding(7, 41); v != 77 {
		t.Fatalf("register 41 = %d", v)
	}
	if tel := p.Telemetry(); !tel.TxOn || tel.Live != "77" {
		t.Fatalf("periodic tx telemetry %+v", tel)
	}
	// Disabling stops it.
	if err := p.Apply(context.Background(), rs485(nil)); err != nil {
		t.Fatal(err)
	}
	// A write under way when tx was disabled may still land: wait for
	// the count to settle, then none may follow.
	n := settled(t, func() int { return countWrites(r.sim) })
	time.Sleep(300 * time.Millisecond)
	if m := countWrites(r.sim); m != n || p.Telemetry().TxOn {
		t.Fatalf("after disabling tx: writes %d -> %d, telemetry %+v", n, m, p.Telemetry())
	}
}

// settled returns count() once it has not moved for 150 ms (a tx interval
// and a half); a count that keeps moving fails t.
func settled(t *testing.T, count func() int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	n := count()
	for {
		time.Sleep(150 * time.Millisecond)
		m := count()
		if m == n {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("still counting: %d more in the last 150 ms", m-n)
		}
		n = m
	}
}

func countWrites(s *modbustest.Sim) int {
	n := 0
	for _, f := range s.Frames() {
		if len(f) > 1 && f[1] == modbus.FuncWriteRegister {
			n++
		}
	}
	return n
}

func TestPortClosedAndReopened(t *testing.T) {
	r := newRig(t, modbustest.Options{IDs: []int{7}})
	p := open(t, r, rs485(func(c *serialcfg.RS485) { c.Poll = poll("holding", 3, 1) }))
	waitFor(t, p, "reading", func(tel serialcfg.Telemetry) bool { return tel.Live == "703" })

	r.unplug()
	waitFor(t, p, "port closed", func(tel serialcfg.Telemetry) bool { return tel.Error == "port closed" })
	time.Sleep(200 * time.Millisecond) // a few failed reopen attempts
	r.sim.SetHolding(7, 3, 31)
	r.plug()
	waitFor(t, p, "reopened", func(tel serialcfg.Telemetry) bool { return tel.Error == "" && tel.Live == "31" })
}

func TestSerialSettingsAppliedLive(t *testing.T) {
	r := newRig(t, modbustest.Options{IDs: []int{7}})
	// A second handle on the terminal side, opened before the port takes
	// it exclusively, shows the termios the port sets.
	fd, err := unix.Open(r.link, unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	p := open(t, r, rs485(func(c *serialcfg.RS485) { c.Poll = poll("holding", 0, 1) }))
	waitFor(t, p, "reading", func(tel serialcfg.Telemetry) bool { return tel.Live == "700" })

	cfg := rs485(func(c *serialcfg.RS485) {
		c.BaudRate, c.DataBits, c.Parity, c.StopBits = 19200, 7, "odd", 2
		c.Poll = poll("holding", 0, 1)
	})
	if err := p.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	// The Linux pty driver forces CS8 and clears PARENB on its side; the
	// baud rate, stop bits and parity sense are what it keeps.
	if tio.Cflag&unix.CBAUD != unix.B19200 || tio.Cflag&unix.PARODD == 0 || tio.Cflag&unix.CSTOPB == 0 {
		t.Fatalf("termios cflag %#o: want 19200 baud, odd parity, 2 stop bits", tio.Cflag)
	}
	if s := p.SerialSettings(); s.BaudRate != 19200 || s.DataBits != 7 || s.Parity != "odd" || s.StopBits != 2 {
		t.Fatalf("settings %+v", s)
	}
	// Still polling after the change, without a restart.
	r.sim.SetHolding(7, 0, 8)
	waitFor(t, p, "reading after change", func(tel serialcfg.Telemetry) bool { return tel.Live == "8" })
}

func TestOpenMissingDevice(t *testing.T) {
	_, err := modbus.Open(context.Background(), filepath.Join(t.TempDir(), "nope"), rs485(nil), nil)
	if !errors.Is(err, hw.ErrDeviceMissing) {
		t.Fatalf("err = %v, want hw.ErrDeviceMissing", err)
	}
}

func TestApplyRejectsWrongKind(t *testing.T) {
	r := newRig(t, modbustest.Options{})
	p := open(t, r, rs485(nil))
	err := p.Apply(context.Background(), serialcfg.Config{Kind: "uart", UART: &serialcfg.UART{}})
	if err == nil || !strings.Contains(err.Error(), `config kind "uart" on a rs485 channel`) {
		t.Fatalf("err = %v", err)
	}
}

func TestSingleTxWaitsForThePort(t *testing.T) {
	r := newRig(t, modbustest.Options{IDs: []int{7}})
	p := open(t, r, rs485(nil))
	r.unplug()
	// The port notices on its next use; a poll makes that happen.
	if err := p.Apply(context.Background(), rs485(func(c *serialcfg.RS485) { c.Poll = poll("holding", 0, 1) })); err != nil {
		t.Fatal(err)
	}
	waitFor(t, p, "port closed", func(tel serialcfg.Telemetry) bool { return tel.Error == "port closed" })
	if err := p.Apply(context.Background(), rs485(func(c *serialcfg.RS485) {
		c.Tx = serialcfg.RS485Tx{Enabled: true, Register: 12, Value: 3456}
	})); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if tel := p.Telemetry(); !tel.TxOn {
		t.Fatalf("single send pending while the port is closed: %+v, want txOn true", tel)
	}
	r.plug()
	waitFor(t, p, "single send after reopen", func(tel serialcfg.Telemetry) bool { return !tel.TxOn && tel.Live == "3456" && tel.Error == "" })
	if v := r.sim.Holding(7, 12); v != 3456 || countWrites(r.sim) != 1 {
		t.Fatalf("register 12 = %d after %d writes, want 3456 after 1", v, countWrites(r.sim))
	}
}

func TestLateReplyNotTakenForTheNextOne(t *testing.T) {
	// Slave 7 answers after the response timeout: its transaction times
	// out and frees the bus, and its late reply arrives while a raw
	// client's request to slave 8 waits for its answer. RTU frames carry no
	// transaction id; the raw client must get slave 8's reply, not 7's.
	r := newRig(t, modbustest.Options{IDs: []int{7, 8}})
	r.sim.SetFault(7, modbustest.Fault{Delay: 1200 * time.Millisecond})
	opts := fast
	opts.ResponseTimeout = time.Second
	p, err := modbus.OpenWith(context.Background(), r.link, rs485(nil), nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var timeout *modbus.TimeoutError
	if _, err := p.ReadRegisters(context.Background(), 7, false, 0, 1); !errors.As(err, &timeout) {
		t.Fatalf("slave 7 past the response timeout: err %v, want a timeout", err)
	}

	client := rawClient(t, p)
	if _, err := client.Write(modbus.AppendCRC([]byte{8, 3, 0, 4, 0, 2})); err != nil {
		t.Fatal(err)
	}
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 9)
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatalf("raw reply from slave 8: %v", err)
	}
	if want := modbus.AppendCRC([]byte{8, 3, 4, 3, 36, 3, 37}); !bytes.Equal(got, want) { // 804, 805
		t.Fatalf("raw reply % x, want slave 8's % x", got, want)
	}
	// The simulator answers in turn: slave 7's late reply went out before
	// slave 8's (counted once written, so 8's may not be counted yet).
	if st := r.sim.Stats(); st.Requests != 2 || st.Replies < 1 {
		t.Fatalf("slave saw %d requests and sent %d replies, want 2 and the late one", st.Requests, st.Replies)
	}
}

// rawClient is a passthrough client of p (ServeRaw over a pipe), served
// until the test ends.
func rawClient(t *testing.T, p *modbus.Port) net.Conn {
	t.Helper()
	client, server := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- p.ServeRaw(ctx, server) }()
	t.Cleanup(func() { client.Close(); cancel(); server.Close(); <-served })
	return client
}
