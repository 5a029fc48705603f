package qemurig

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/hw/modbus/modbustest"
)

// moduleRoot returns the directory of go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// TestQEMURig boots the Debian kernel under qemu with every package's
// TestKernel* tests and fails when any of them fails in the guest. It runs
// with FLEET_QEMU=1 (make test-kernel sets it, and make test runs that), so
// that a plain go test ./... does not boot qemu a second time.
func TestQEMURig(t *testing.T) {
	if os.Getenv("FLEET_QEMU") != "1" {
		t.Skip("boots qemu only with FLEET_QEMU=1: run make test-kernel")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(tWriter{t}, nil))
	var console strings.Builder

	// The Modbus slave simulator on the host, behind the guest's ttyS1,
	// with registers and values chosen at random for this run.
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 6))
	slave := 1 + r.IntN(247)
	pollReg := r.IntN(60000)
	writeReg := pollReg + 100 + r.IntN(1000)
	writeBefore, writeValue := r.IntN(30000), 30000+r.IntN(30000)
	var pollValues []string
	sim := modbustest.New(modbustest.Options{IDs: []int{slave}, Baud: modbusBaud})
	for i := range 3 {
		v := r.IntN(65536)
		sim.SetHolding(slave, uint16(pollReg+i), uint16(v))
		pollValues = append(pollValues, strconv.Itoa(v))
	}
	sim.SetHolding(slave, uint16(writeReg), uint16(writeBefore))
	serveErr := make(chan error, 1)

	// A host file placed in the guest and a command run after the tests
	// (what fleet-loadgen guest uses): the command reads the file back and
	// raises RLIMIT_NOFILE as root, beyond the host sandbox's hard limit.
	probe := strconv.FormatUint(r.Uint64(), 36)
	probeFile := filepath.Join(t.TempDir(), "probe")
	if err := os.WriteFile(probeFile, []byte(probe), 0o644); err != nil {
		t.Fatal(err)
	}

	cfg := Config{
		Files:   []GuestFile{{Path: "opt/fleet/probe", Host: probeFile}},
		Command: "set -e\nulimit -Hn 65536\nulimit -Sn 65536\necho \"FLEET-PROBE $(cat /opt/fleet/probe) nofile=$(ulimit -n)\"\n",
		Root:    moduleRoot(t),
		// The packages whose kernel tests cover issue 6: CAN-FD driver,
		// VPN watch on WireGuard, and the rig's own (UART, CAN-FD wiring).
		Require: []string{
			"github.com/fleet/fleet/agent/iomgr",
			"github.com/fleet/fleet/agent/vpnwatch",
			"github.com/fleet/fleet/hw/canfd",
			"github.com/fleet/fleet/hw/gpio",
			"github.com/fleet/fleet/test/rig/qemurig/guesttest",
		},
		Env: map[string]string{
			"FLEET_MODBUS_DEVICE":         "/dev/ttyS1",
			"FLEET_MODBUS_BAUD":           strconv.Itoa(modbusBaud),
			"FLEET_MODBUS_SLAVE":          strconv.Itoa(slave),
			"FLEET_MODBUS_POLL_REGISTER":  strconv.Itoa(pollReg),
			"FLEET_MODBUS_POLL_VALUES":    strings.Join(pollValues, " "),
			"FLEET_MODBUS_WRITE_REGISTER": strconv.Itoa(writeReg),
			"FLEET_MODBUS_WRITE_BEFORE":   strconv.Itoa(writeBefore),
			"FLEET_MODBUS_WRITE_VALUE":    strconv.Itoa(writeValue),
		},
		CAN: true,
		Serial1: func(ctx context.Context, conn net.Conn) {
			serveErr <- sim.Serve(ctx, connLine{conn})
		},
		Log:     log,
		Console: &console,
	}
	rep, err := Run(ctx, cfg)
	t.Logf("timings: tools %s, kernel %s, build %s, pack %s (initramfs %d KiB), qemu %s",
		rep.Timings.Tools.Round(time.Millisecond), rep.Timings.Kernel.Round(time.Millisecond),
		rep.Timings.Build.Round(time.Millisecond), rep.Timings.Pack.Round(time.Millisecond),
		rep.InitramfsBytes>>10, rep.Timings.Boot.Round(time.Millisecond))
	if o := rep.Outcome; o != nil {
		t.Logf("qemu: first console line after %s, init after %s, done after %s, exit after %s",
			o.FirstOutputAt.Round(time.Millisecond), o.BootAt.Round(time.Millisecond),
			o.DoneAt.Round(time.Millisecond), o.Elapsed.Round(time.Millisecond))
	}
	if err != nil {
		t.Fatal(err)
	}
	o := rep.Outcome
	t.Logf("guest: %s; %s", o.BootLine, o.DoneLine)

	for _, r := range o.Results {
		t.Logf("guest result %s: %s", r.Package, r.Detail)
	}
	if want := "FLEET-PROBE " + probe + " nofile=65536"; !strings.Contains(o.Console, want) {
		t.Errorf("the guest command did not print %q", want)
	}
	if testing.Verbose() {
		t.Logf("guest console:\n%s", console.String())
	}

	// The guest's writes reached the simulator on the host.
	select {
	case err := <-serveErr:
		// qemu closes the line when the guest powers off.
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			t.Errorf("simulator on ttyS1: %v", err)
		}
	default:
		t.Error("the simulator never served ttyS1")
	}
	st := sim.Stats()
	t.Logf("Modbus simulator on the host (slave %d): %+v", slave, st)
	if got := sim.Holding(slave, uint16(writeReg)); int(got) != writeValue {
		t.Errorf("simulator register %d = %d after the guest's write, want %d", writeReg, got, writeValue)
	}
	if st.Requests == 0 {
		t.Error("the simulator saw no request from the guest")
	}
}

// modbusBaud is the serial speed of the Modbus line through ttyS1.
const modbusBaud = 9600

// connLine serves the simulator over qemu's chardev socket.
type connLine struct{ c net.Conn }

func (l connLine) Read(b []byte, timeout time.Duration) (int, error) {
	if err := l.c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return 0, err
	}
	n, err := l.c.Read(b)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return n, nil
	}
	return n, err
}

func (l connLine) Write(b []byte) (int, error) { return l.c.Write(b) }

// tWriter sends log lines to t.Log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
