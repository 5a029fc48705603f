package linux_test

import (
	"context"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/fleet/fleet/hw/canfd"
	"github.com/fleet/fleet/hw/linux"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/test/rig/kerneltest"
)

// TestKernelBackendCANFD opens canfd-1 through the Linux backend on a vcan
// interface that appears and disappears. Needs the qemu rig.
func TestKernelBackendCANFD(t *testing.T) {
	kerneltest.Require(t)
	const iface = "kbcan0"
	b := &linux.Backend{}
	ch := channel(t, "canfd-1")
	if b.Present(ch, iface) {
		t.Fatalf("%s present before it was created", iface)
	}
	if err := netlink.LinkAdd(&netlink.GenericLink{LinkAttrs: netlink.LinkAttrs{Name: iface, MTU: canfd.FDMTU}, LinkType: "vcan"}); err != nil {
		t.Fatalf("create vcan: %v", err)
	}
	defer func() {
		if l, err := netlink.LinkByName(iface); err == nil {
			_ = netlink.LinkDel(l)
		}
	}()
	if !b.Present(ch, iface) {
		t.Fatalf("%s not present after it was created", iface)
	}
	cfg := ch.DefaultConfig()
	cfg.CANFD.Tx = serialcfg.CANFDTx{Enabled: true, IntervalMs: 100, CanID: "0x123", DataHex: "11 22 33 44 55 66 77 88 99 AA BB CC"}
	p, err := b.Open(context.Background(), ch, iface, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer p.Close()
	// Dial after Open: configuring the link bounces it.
	peer, err := canfd.Dial(iface)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	got := make(chan canfd.Frame, 1)
	go func() {
		for {
			f, err := peer.Recv()
			if err != nil {
				return
			}
			if !f.Err {
				got <- f
				return
			}
		}
	}()
	select {
	case f := <-got:
		if f.String() != "123#112233445566778899AABBCC" || !f.FD || !f.BRS {
			t.Fatalf("frame %+v", f)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no frame from the backend's port; telemetry %+v", p.Telemetry())
	}
	l, _ := netlink.LinkByName(iface)
	if err := netlink.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	if b.Present(ch, iface) {
		t.Fatalf("%s present after it was deleted", iface)
	}
}
