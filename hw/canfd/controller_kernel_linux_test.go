package canfd

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/fleet/fleet/test/rig/kerneltest"
)

// TestKernelClassicController runs the netlink bit-timing path on a
// classic CAN controller driver: qemu's Kvaser PCIcan card (kvaser_pci, an
// SJA1000). It proves the nominal IFLA_CAN_* encoding (bitrate, sample
// point, control modes) against a real driver without FD, and that a
// CAN-FD request on a classic controller is refused with a clear error
// (the FD path runs on the CTU CAN FD cores: TestKernelCTUCANFD). The rig
// names the interface in FLEET_CAN_CLASSIC when it adds the card
// (qemurig.Config.CAN).
func TestKernelClassicController(t *testing.T) {
	kerneltest.Require(t)
	iface := kerneltest.Env(t, "FLEET_CAN_CLASSIC") // the rig names qemu's Kvaser card there
	link, err := netlink.LinkByName(iface)
	if err != nil {
		t.Fatalf("%s: %v", iface, err)
	}
	if link.Type() != "can" {
		t.Fatalf("%s is a %s, want a CAN controller", iface, link.Type())
	}

	// CAN-FD settings on a classic controller: refused, and not mistaken
	// for a virtual interface.
	err = (&NetlinkLink{Interface: iface}).Configure(context.Background(), Settings{NominalBitrate: 500000, DataBitrate: 2000000, SamplePoint: 0.875})
	if err == nil || errors.Is(err, ErrBitTimingUnsupported) || !strings.Contains(err.Error(), "controller without CAN-FD") {
		t.Fatalf("Configure(FD) on %s = %v, want a refusal naming CAN-FD", iface, err)
	}
	t.Logf("refusal: %v", err)

	// The same attributes without FD are accepted and read back.
	tests := []Settings{
		{NominalBitrate: 500000, SamplePoint: 0.875},
		{NominalBitrate: 125000, SamplePoint: 0.75, ListenOnly: true},
		// The SJA1000 runs at 8 MHz: 8 time quanta per bit at 1 Mbit/s, so
		// 0.75 is a sample point it can make (0.8 becomes 0.75).
		{NominalBitrate: 1000000, SamplePoint: 0.75},
	}
	for _, want := range tests {
		if err := netlink.LinkSetDown(link); err != nil {
			t.Fatal(err)
		}
		if err := setCANAttrs(link.Attrs().Index, want, false); err != nil {
			t.Fatalf("set %+v on %s: %v", want, iface, err)
		}
		if err := netlink.LinkSetUp(link); err != nil {
			t.Fatalf("%s up: %v", iface, err)
		}
		got, fd, err := ReadSettings(iface)
		if err != nil {
			t.Fatal(err)
		}
		if fd || got.NominalBitrate != want.NominalBitrate || got.ListenOnly != want.ListenOnly ||
			got.SamplePoint < want.SamplePoint-0.03 || got.SamplePoint > want.SamplePoint+0.03 {
			t.Fatalf("%s reads back %+v fd=%v, want %+v", iface, got, fd, want)
		}
		t.Logf("%s: set %+v, reads back %+v", iface, want, got)
	}

	// Bus-off and restart-ms are the controller's; the raw socket with its
	// error filter opens on it.
	s, err := Dial(iface)
	if err != nil {
		t.Fatalf("Dial %s: %v", iface, err)
	}
	s.Close()
}
