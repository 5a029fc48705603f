package canfd_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/fleet/fleet/hw/canfd"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/test/rig/kerneltest"
)

// fdControllers returns the two CAN-FD controllers the rig gives the
// guest (qemu's CTU CAN FD PCI card, both cores on one qemu CAN bus, run
// by the ctucanfd_pci driver built from Debian's kernel source), named in
// FLEET_CAN_FD.
func fdControllers(t *testing.T) (string, string) {
	t.Helper()
	names := strings.Fields(os.Getenv("FLEET_CAN_FD"))
	if len(names) != 2 {
		t.Fatalf("FLEET_CAN_FD=%q: the rig names two CAN-FD controllers", os.Getenv("FLEET_CAN_FD"))
	}
	for _, n := range names {
		drv, err := os.Readlink(filepath.Join("/sys/class/net", n, "device", "driver"))
		if err != nil || filepath.Base(drv) != "ctucanfd_pci" {
			t.Fatalf("%s is driven by %q (%v), want ctucanfd_pci", n, filepath.Base(drv), err)
		}
	}
	return names[0], names[1]
}

func fdConfig(nominal, data int, sp float64, listenOnly bool, tx serialcfg.CANFDTx) serialcfg.Config {
	return serialcfg.Config{Kind: serialcfg.KindCANFD, CANFD: &serialcfg.CANFD{
		Kind: serialcfg.KindCANFD, NominalBitrate: nominal, DataBitrate: data, SamplePoint: sp, ListenOnly: listenOnly, Tx: tx}}
}

func hexBytes(b []byte) string {
	var s []string
	for _, c := range b {
		s = append(s, fmt.Sprintf("%02X", c))
	}
	return strings.Join(s, " ")
}

// txStats reads an interface's transmit counters.
func txStats(t *testing.T, iface string) (packets, dropped uint64) {
	t.Helper()
	l, err := netlink.LinkByName(iface)
	if err != nil {
		t.Fatal(err)
	}
	st := l.Attrs().Statistics
	return st.TxPackets, st.TxDropped
}

// TestKernelCTUCANFD runs the driver on a real CAN-FD controller driver:
// it sets nominal and data bit timing with FD on over netlink, sends every
// CAN-FD length with bit rate switch to the second controller on the bus,
// shows that controller's frames in live, reports a bitrate the
// controller's clock cannot make, and honours listen-only.
func TestKernelCTUCANFD(t *testing.T) {
	kerneltest.Require(t)
	can0, can1 := fdControllers(t)
	ctx := context.Background()
	const nominal, data, sp = 500000, 2000000, 0.8

	// The other node on the bus, set to the same bit timing by the same
	// netlink code, and a raw socket reading it.
	if err := (&canfd.NetlinkLink{Interface: can1}).Configure(ctx, canfd.Settings{NominalBitrate: nominal, DataBitrate: data, SamplePoint: sp}); err != nil {
		t.Fatalf("configure %s: %v", can1, err)
	}
	peer := dialT(t, can1)

	p, err := canfd.OpenSocketCAN(ctx, "canfd-1", can0, fdConfig(nominal, data, sp, false, serialcfg.CANFDTx{}), nil)
	if err != nil {
		t.Fatalf("open %s: %v", can0, err)
	}
	defer p.Close()
	got, fd, err := canfd.ReadSettings(can0)
	if err != nil {
		t.Fatal(err)
	}
	if !fd || got.NominalBitrate != nominal || got.DataBitrate != data || got.ListenOnly || got.SamplePoint < sp-0.02 || got.SamplePoint > sp+0.02 {
		t.Fatalf("%s reads back %+v fd=%v, want nominal %d, data %d, sample point %.3f, FD on", can0, got, fd, nominal, data, sp)
	}
	t.Logf("%s: %+v fd=%v", can0, got, fd)
	if tm := p.Telemetry(); tm.Error != "" {
		t.Fatalf("error %q on a controller that took the settings", tm.Error)
	}

	t.Run("every FD length with BRS reaches the other controller", func(t *testing.T) {
		for i, n := range serialcfg.CANFDLengths {
			payload := make([]byte, n)
			for j := range payload {
				payload[j] = byte(n + j)
			}
			id, want := "0x1A5", uint32(0x1A5)
			if i%2 == 1 {
				id, want = "0x18DAF110", 0x18DAF110
			}
			tx := serialcfg.CANFDTx{Enabled: true, IntervalMs: 0, CanID: id, DataHex: hexBytes(payload)}
			if err := p.Apply(ctx, fdConfig(nominal, data, sp, false, tx)); err != nil {
				t.Fatalf("Apply tx of %d bytes: %v", n, err)
			}
			f, ok := recvData(t, peer, 5*time.Second)
			if !ok {
				t.Fatalf("%d bytes: nothing on %s; telemetry %+v", n, can1, p.Telemetry())
			}
			if !f.FD || !f.BRS || f.ID != want || f.Extended != (i%2 == 1) || !bytes.Equal(f.Data, payload) {
				t.Fatalf("%d bytes: %s read %+v, want FD+BRS id %#x data % X", n, can1, f, want, payload)
			}
		}
		if tm := p.Telemetry(); tm.Error != "" {
			t.Errorf("error %q after the sends", tm.Error)
		}
	})

	t.Run("the other controller's frames reach live", func(t *testing.T) {
		payload := bytes.Repeat([]byte{0xA5, 0x5A}, 32)
		if err := peer.Send(canfd.Frame{ID: 0x321, FD: true, BRS: true, Data: payload}); err != nil {
			t.Fatalf("send on %s: %v", can1, err)
		}
		want := "321#" + strings.Repeat("A55A", 32)
		waitTelemetry(t, p, "live "+want, func(tm serialcfg.Telemetry) bool { return tm.Live == want })
	})

	t.Run("a bitrate the controller cannot make is refused and reported", func(t *testing.T) {
		// 100 MHz, prescaler at most 8, 254 time quanta: nothing below
		// about 49 kbit/s.
		err := p.Apply(ctx, fdConfig(20000, 1000000, 0.875, false, serialcfg.CANFDTx{}))
		if err == nil {
			t.Fatal("Apply of a 20 kbit/s nominal bitrate succeeded on a 100 MHz CTU CAN FD core")
		}
		if !strings.Contains(err.Error(), "cannot make") {
			t.Errorf("refusal %q does not say the controller cannot make the bitrate", err)
		}
		t.Logf("refusal: %v", err)
		// The previous configuration keeps running; its single send is
		// not repeated.
		if f, ok := recvData(t, peer, time.Second); ok {
			t.Fatalf("the refused Apply put %+v on the bus", f)
		}
		got, fd, err := canfd.ReadSettings(can0)
		if err != nil || !fd || got.NominalBitrate != nominal || got.DataBitrate != data {
			t.Fatalf("after the refusal %s reads %+v fd=%v (%v), want the previous %d/%d", can0, got, fd, err, nominal, data)
		}
		if err := peer.Send(canfd.Frame{ID: 0x322, FD: true, BRS: true, Data: []byte{1, 2, 3}}); err != nil {
			t.Fatal(err)
		}
		waitTelemetry(t, p, "live 322#010203 after the refusal", func(tm serialcfg.Telemetry) bool { return tm.Live == "322#010203" })
	})

	t.Run("listen-only transmits nothing and still receives", func(t *testing.T) {
		if err := p.Apply(ctx, fdConfig(nominal, data, sp, true, serialcfg.CANFDTx{})); err != nil {
			t.Fatal(err)
		}
		got, fd, err := canfd.ReadSettings(can0)
		if err != nil || !fd || !got.ListenOnly {
			t.Fatalf("%s reads %+v fd=%v (%v), want listen-only with FD", can0, got, fd, err)
		}
		// A frame written on the listen-only controller is dropped by the
		// kernel, and nothing reaches the bus.
		sent, dropped := txStats(t, can0)
		raw := dialT(t, can0)
		if err := raw.Send(canfd.Frame{ID: 0x7AB, FD: true, BRS: true, Data: []byte{9}}); err != nil {
			t.Logf("send on listen-only %s: %v", can0, err)
		}
		if f, ok := recvData(t, peer, time.Second); ok {
			t.Fatalf("a listen-only controller put %+v on the bus", f)
		}
		sent2, dropped2 := txStats(t, can0)
		if sent2 != sent || dropped2 != dropped+1 {
			t.Errorf("%s tx packets %d→%d, dropped %d→%d: want none sent, one dropped", can0, sent, sent2, dropped, dropped2)
		}
		if err := peer.Send(canfd.Frame{ID: 0x323, FD: true, BRS: true, Data: []byte{4}}); err != nil {
			t.Fatal(err)
		}
		waitTelemetry(t, p, "live 323#04 while listen-only", func(tm serialcfg.Telemetry) bool { return tm.Live == "323#04" })
		if tm := p.Telemetry(); tm.TxOn {
			t.Errorf("txOn on a listen-only channel: %+v", tm)
		}
	})
}
