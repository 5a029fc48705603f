package canfd_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/fleet/fleet/hw/canfd"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/test/rig/kerneltest"
)

// The TestKernel* tests need a kernel with can, can_raw, can_dev and vcan,
// and root: the qemu rig runs them with FLEET_KERNEL_TEST=1. There they
// fail, never skip, when something is missing.

// makeVcan creates a vcan interface with the given MTU, brings it up and
// deletes it when the test ends.
func makeVcan(t *testing.T, name string, mtu int) {
	t.Helper()
	kerneltest.AddLink(t, &netlink.GenericLink{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}, LinkType: "vcan"}, "vcan")
}

func dialT(t *testing.T, iface string) *canfd.Socket {
	t.Helper()
	s, err := canfd.Dial(iface)
	if err != nil {
		t.Fatalf("Dial %s: %v", iface, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// recvData reads frames from s until a data frame, within d.
func recvData(t *testing.T, s *canfd.Socket, d time.Duration) (canfd.Frame, bool) {
	t.Helper()
	type res struct {
		f   canfd.Frame
		err error
	}
	ch := make(chan res, 1)
	go func() {
		for {
			f, err := s.Recv()
			if err != nil || !f.Err {
				ch <- res{f, err}
				return
			}
		}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Recv: %v", r.err)
		}
		return r.f, true
	case <-time.After(d):
		return canfd.Frame{}, false
	}
}

func TestKernelVcanHasFDMTU(t *testing.T) {
	kerneltest.Require(t)
	makeVcan(t, "kvcan0", canfd.FDMTU)
	l, err := netlink.LinkByName("kvcan0")
	if err != nil {
		t.Fatal(err)
	}
	if l.Attrs().MTU != canfd.FDMTU || l.Type() != "vcan" {
		t.Fatalf("kvcan0: type %s MTU %d, want vcan with MTU 72", l.Type(), l.Attrs().MTU)
	}
}

func TestKernelBitrateRefusedOnVcan(t *testing.T) {
	kerneltest.Require(t)
	// A classic vcan (MTU 16): Configure runs the bitrate path, gets the
	// kernel's refusal, and still leaves the link up with the FD MTU.
	makeVcan(t, "kvcan1", canfd.ClassicMTU)
	link := &canfd.NetlinkLink{Interface: "kvcan1"}
	err := link.Configure(context.Background(), canfd.Settings{NominalBitrate: 500000, DataBitrate: 2000000, SamplePoint: 0.875})
	if !errors.Is(err, canfd.ErrBitTimingUnsupported) {
		t.Fatalf("Configure on vcan = %v, want ErrBitTimingUnsupported", err)
	}
	l, lerr := netlink.LinkByName("kvcan1")
	if lerr != nil {
		t.Fatal(lerr)
	}
	if l.Attrs().MTU != canfd.FDMTU || l.Attrs().Flags&(1<<0) == 0 { // net.FlagUp
		t.Fatalf("after Configure: MTU %d flags %v; want 72 and up", l.Attrs().MTU, l.Attrs().Flags)
	}
	t.Logf("refusal reported as: %v", err)
}

func TestKernelMissingInterface(t *testing.T) {
	kerneltest.Require(t)
	if _, err := canfd.Dial("nosuchcan9"); err == nil {
		t.Fatal("Dial on a missing interface succeeded")
	}
	err := (&canfd.NetlinkLink{Interface: "nosuchcan9"}).Configure(context.Background(), canfd.Settings{NominalBitrate: 500000, DataBitrate: 2000000, SamplePoint: 0.875})
	if err == nil || errors.Is(err, canfd.ErrBitTimingUnsupported) {
		t.Fatalf("Configure on a missing interface = %v", err)
	}
	// A network interface that is not CAN is refused and left alone.
	err = (&canfd.NetlinkLink{Interface: "lo"}).Configure(context.Background(), canfd.Settings{NominalBitrate: 500000, DataBitrate: 2000000, SamplePoint: 0.875})
	if err == nil || !strings.Contains(err.Error(), "not a CAN interface") {
		t.Fatalf("Configure on lo = %v, want a refusal", err)
	}
	lo, lerr := netlink.LinkByName("lo")
	if lerr != nil || lo.Attrs().Flags&(1<<0) == 0 {
		t.Fatalf("lo after a refused Configure: %v %v; want it still up", lo, lerr)
	}
	if _, err := canfd.Dial("lo"); err == nil {
		t.Fatal("Dial on lo succeeded")
	}
}

func TestKernelDriverOnVcan(t *testing.T) {
	kerneltest.Require(t)
	makeVcan(t, "kvcan2", canfd.FDMTU)
	data := strings.Repeat("5A", 64)
	p, err := canfd.OpenSocketCAN(context.Background(), "canfd-1", "kvcan2", cfg(func(c *serialcfg.CANFD) {
		c.Tx = serialcfg.CANFDTx{Enabled: true, IntervalMs: 100, CanID: "0x18DAF110", DataHex: data}
	}), nil)
	if err != nil {
		t.Fatalf("OpenSocketCAN: %v", err)
	}
	defer p.Close()
	// Dial after Open: configuring the link bounces it, which reports
	// ENETDOWN once to every socket already open on it.
	peer := dialT(t, "kvcan2")

	// Periodic tx: 64-byte FD frames with BRS and an extended id.
	start := time.Now()
	for i := 0; i < 3; i++ {
		f, ok := recvData(t, peer, 3*time.Second)
		if !ok {
			t.Fatalf("frame %d not received", i)
		}
		if !f.FD || !f.BRS || !f.Extended || f.ID != 0x18DAF110 || len(f.Data) != 64 || f.Data[0] != 0x5A {
			t.Fatalf("frame %d = %+v", i, f)
		}
	}
	if time.Since(start) < 150*time.Millisecond {
		t.Fatal("frames not paced by intervalMs")
	}
	tm := p.Telemetry()
	if !tm.TxOn || tm.Error != "bitrate not applied: kvcan2 has no bit timing (virtual interface)" {
		t.Fatalf("telemetry %+v: want txOn and the vcan bitrate note", tm)
	}

	// live from frames another socket sends.
	if err := peer.Send(canfd.Frame{ID: 0x321, FD: true, BRS: true, Data: []byte{0xCA, 0xFE, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9}}); err != nil {
		t.Fatal(err)
	}
	waitTelemetry(t, p, "live", func(tm serialcfg.Telemetry) bool { return tm.Live == "321#CAFE00010203040506070809" })
	if err := peer.Send(canfd.Frame{ID: 0x1ABCDEF0, Extended: true, Data: []byte{1, 2}}); err != nil {
		t.Fatal(err)
	}
	waitTelemetry(t, p, "live classic extended", func(tm serialcfg.Telemetry) bool { return tm.Live == "1ABCDEF0#0102" })

	// Single send.
	if err := p.Apply(context.Background(), cfg(func(c *serialcfg.CANFD) {
		c.Tx = serialcfg.CANFDTx{Enabled: true, IntervalMs: 0, CanID: "0x7FF", DataHex: "01"}
	})); err != nil {
		t.Fatal(err)
	}
	for {
		f, ok := recvData(t, peer, 3*time.Second)
		if !ok {
			t.Fatal("single frame not received")
		}
		if f.String() == "7FF#01" {
			break
		}
	}
	if f, ok := recvData(t, peer, 400*time.Millisecond); ok {
		t.Fatalf("frame %s after a single send", f)
	}
	waitTelemetry(t, p, "txOn off", func(tm serialcfg.Telemetry) bool { return !tm.TxOn })
}

func TestKernelListenOnlyOnVcan(t *testing.T) {
	kerneltest.Require(t)
	makeVcan(t, "kvcan3", canfd.FDMTU)
	p, err := canfd.OpenSocketCAN(context.Background(), "canfd-1", "kvcan3", cfg(func(c *serialcfg.CANFD) { c.ListenOnly = true }), nil)
	if err != nil {
		t.Fatalf("OpenSocketCAN: %v", err)
	}
	defer p.Close()
	// Dial after Open: configuring the link bounces it, which reports
	// ENETDOWN once to every socket already open on it.
	peer := dialT(t, "kvcan3")
	if err := peer.Send(canfd.Frame{ID: 0x42, FD: true, Data: make([]byte, 64)}); err != nil {
		t.Fatal(err)
	}
	waitTelemetry(t, p, "live", func(tm serialcfg.Telemetry) bool { return strings.HasPrefix(tm.Live, "042#0000") })
	if f, ok := recvData(t, peer, 400*time.Millisecond); ok {
		t.Fatalf("listen-only port sent %s", f)
	}
	if p.Stats().Sent != 0 {
		t.Fatal("listen-only port sent frames")
	}
}

func TestKernelErrorFramesOnVcan(t *testing.T) {
	kerneltest.Require(t)
	makeVcan(t, "kvcan4", canfd.FDMTU)
	p, err := canfd.OpenSocketCAN(context.Background(), "canfd-1", "kvcan4", cfg(nil), nil)
	if err != nil {
		t.Fatalf("OpenSocketCAN: %v", err)
	}
	defer p.Close()
	// Dial after Open: configuring the link bounces it, which reports
	// ENETDOWN once to every socket already open on it.
	peer := dialT(t, "kvcan4")
	// vcan has no controller; an error frame written by another socket is
	// delivered to sockets with CAN_RAW_ERR_FILTER, as a controller's would be.
	if err := peer.Send(canfd.Frame{Err: true, ID: canfd.ErrClassBusOff, Data: make([]byte, 8)}); err != nil {
		t.Fatalf("send error frame: %v", err)
	}
	waitTelemetry(t, p, "bus-off", func(tm serialcfg.Telemetry) bool { return tm.Error == "bus-off" })
	if err := peer.Send(canfd.Frame{Err: true, ID: canfd.ErrClassController, Data: []byte{0, canfd.CtrlTxPassive, 0, 0, 0, 0, 0, 0}}); err != nil {
		t.Fatal(err)
	}
	waitTelemetry(t, p, "error-passive", func(tm serialcfg.Telemetry) bool { return tm.Error == "error-passive" })
	if err := peer.Send(canfd.Frame{ID: 0x1, FD: true, Data: []byte{1}}); err != nil {
		t.Fatal(err)
	}
	waitTelemetry(t, p, "cleared", func(tm serialcfg.Telemetry) bool {
		return strings.HasPrefix(tm.Error, "bitrate not applied") && tm.Live == "001#01"
	})
	if st := p.Stats(); st.Errors < 2 {
		t.Fatalf("stats %+v, want 2 error frames", st)
	}
}

func TestKernelLinkDownReportsSendError(t *testing.T) {
	kerneltest.Require(t)
	makeVcan(t, "kvcan5", canfd.FDMTU)
	p, err := canfd.OpenSocketCAN(context.Background(), "canfd-1", "kvcan5", cfg(func(c *serialcfg.CANFD) {
		c.Tx = serialcfg.CANFDTx{Enabled: true, IntervalMs: 100, CanID: "0x10", DataHex: "01"}
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	l, _ := netlink.LinkByName("kvcan5")
	if err := netlink.LinkSetDown(l); err != nil {
		t.Fatal(err)
	}
	tm := waitTelemetry(t, p, "send error while down", func(tm serialcfg.Telemetry) bool { return strings.HasPrefix(tm.Error, "send failed") })
	if !strings.Contains(tm.Error, "network is down") {
		t.Fatalf("error %q, want ENETDOWN named", tm.Error)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	waitTelemetry(t, p, "recovered", func(tm serialcfg.Telemetry) bool { return strings.HasPrefix(tm.Error, "bitrate not applied") })
}

func TestKernelInterfaceRemovedAndRecreated(t *testing.T) {
	kerneltest.Require(t)
	const name = "kvcan6"
	makeVcan(t, name, canfd.FDMTU)
	p, err := canfd.OpenSocketCAN(context.Background(), "canfd-1", name, cfg(func(c *serialcfg.CANFD) {
		c.Tx = serialcfg.CANFDTx{Enabled: true, IntervalMs: 100, CanID: "0x66", DataHex: "06"}
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	// Unplugged: the kernel unregisters the interface under the socket.
	if err := netlink.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	waitTelemetry(t, p, "went away", func(tm serialcfg.Telemetry) bool { return strings.HasPrefix(tm.Error, "interface kvcan6 went away") })
	// Plugged back (down, as a fresh adapter comes): the port configures
	// the link again, brings it up and sends.
	if err := netlink.LinkAdd(&netlink.GenericLink{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: canfd.FDMTU}, LinkType: "vcan"}); err != nil {
		t.Fatal(err)
	}
	waitTelemetry(t, p, "reopened", func(tm serialcfg.Telemetry) bool {
		return strings.HasPrefix(tm.Error, "bitrate not applied") && tm.TxOn
	})
	peer := dialT(t, name)
	f, ok := recvData(t, peer, 3*time.Second)
	if !ok || f.String() != "066#06" {
		t.Fatalf("after the interface came back: frame %v received %v", f, ok)
	}
}

// withoutNetAdmin runs f on a thread whose effective capabilities lack
// CAP_NET_ADMIN (capset affects only the calling thread), then restores.
func withoutNetAdmin(t *testing.T, f func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		t.Fatalf("capget: %v", err)
	}
	saved := data
	data[0].Effective &^= 1 << unix.CAP_NET_ADMIN
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		t.Fatalf("capset: %v", err)
	}
	defer func() {
		if err := unix.Capset(&hdr, &saved[0]); err != nil {
			t.Fatalf("restore capabilities: %v", err)
		}
	}()
	f()
}

func TestKernelConfigureWithoutPermission(t *testing.T) {
	kerneltest.Require(t)
	makeVcan(t, "kvcan7", canfd.FDMTU)
	var err error
	withoutNetAdmin(t, func() {
		err = (&canfd.NetlinkLink{Interface: "kvcan7"}).Configure(context.Background(), canfd.Settings{NominalBitrate: 500000, DataBitrate: 2000000, SamplePoint: 0.875})
	})
	if !errors.Is(err, canfd.ErrNotPermitted) {
		t.Fatalf("Configure without CAP_NET_ADMIN = %v, want ErrNotPermitted", err)
	}
	l, lerr := netlink.LinkByName("kvcan7")
	if lerr != nil || l.Attrs().Flags&(1<<0) == 0 {
		t.Fatalf("kvcan7 after a refused Configure: %v; want it untouched (up)", lerr)
	}
}
