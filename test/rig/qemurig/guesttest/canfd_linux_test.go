package guesttest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/fleet/fleet/test/rig/kerneltest"
)

// From linux/can.h: the size of struct canfd_frame and its BRS flag.
const (
	canfdMTU = 72
	canfdBRS = 0x01
)

// makeVCAN creates a vcan interface with the CAN-FD MTU over netlink and
// brings it up; it is deleted when the test ends.
func makeVCAN(t *testing.T, name string) *net.Interface {
	t.Helper()
	link := &netlink.GenericLink{LinkAttrs: netlink.LinkAttrs{Name: name}, LinkType: "vcan"}
	if err := netlink.LinkAdd(link); err != nil {
		t.Fatalf("create vcan %s over netlink: %v", name, err)
	}
	t.Cleanup(func() { _ = netlink.LinkDel(link) })
	if err := netlink.LinkSetMTU(link, canfdMTU); err != nil {
		t.Fatalf("set %s MTU to %d (CAN-FD): %v", name, canfdMTU, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		t.Fatalf("set %s up: %v", name, err)
	}
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if ifi.MTU != canfdMTU || ifi.Flags&net.FlagUp == 0 {
		t.Fatalf("%s: mtu %d flags %v, want mtu %d and up", name, ifi.MTU, ifi.Flags, canfdMTU)
	}
	return ifi
}

// rawFD opens a raw CAN socket with FD frames on ifindex.
func rawFD(t *testing.T, ifindex int) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_CAN, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.CAN_RAW)
	if err != nil {
		t.Fatalf("socket(AF_CAN, CAN_RAW): %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.SetsockoptInt(fd, unix.SOL_CAN_RAW, unix.CAN_RAW_FD_FRAMES, 1); err != nil {
		t.Fatalf("CAN_RAW_FD_FRAMES: %v", err)
	}
	tv := unix.Timeval{Sec: 2}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrCAN{Ifindex: ifindex}); err != nil {
		t.Fatalf("bind: %v", err)
	}
	return fd
}

// fdFrame encodes a struct canfd_frame.
func fdFrame(id uint32, flags byte, data []byte) []byte {
	b := make([]byte, canfdMTU)
	binary.LittleEndian.PutUint32(b[0:4], id)
	b[4] = byte(len(data))
	b[5] = flags
	copy(b[8:], data)
	return b
}

// TestKernelCANFDLoopback proves the rig's CAN-FD wiring on its own: the
// modules loaded, a vcan made over netlink takes the CAN-FD MTU, and a
// 64-byte frame with BRS and an extended id sent on one raw socket arrives
// unchanged on another, while a frame longer than 64 bytes is refused by
// the kernel.
func TestKernelCANFDLoopback(t *testing.T) {
	kerneltest.Require(t)
	for _, m := range []string{"can", "can_raw", "can_dev", "vcan"} {
		if _, err := os.Stat("/sys/module/" + m); err != nil {
			t.Errorf("module %s not loaded: %v", m, err)
		}
	}
	ifi := makeVCAN(t, "rigcan0")
	tx := rawFD(t, ifi.Index)
	rx := rawFD(t, ifi.Index)

	data := make([]byte, 64)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	id := uint32(0x1ABCDE01) | unix.CAN_EFF_FLAG
	frame := fdFrame(id, canfdBRS, data)
	if n, err := unix.Write(tx, frame); err != nil || n != len(frame) {
		t.Fatalf("write FD frame: n=%d err=%v", n, err)
	}
	got := make([]byte, canfdMTU)
	n, err := unix.Read(rx, got)
	if err != nil {
		t.Fatalf("read FD frame: %v", err)
	}
	if n != canfdMTU {
		t.Fatalf("read %d bytes, want a %d-byte canfd_frame", n, canfdMTU)
	}
	if gotID := binary.LittleEndian.Uint32(got[0:4]); gotID != id {
		t.Errorf("id %#x, want %#x", gotID, id)
	}
	if got[4] != 64 || got[5]&canfdBRS == 0 {
		t.Errorf("len %d flags %#x, want 64 with BRS", got[4], got[5])
	}
	if !bytes.Equal(got[8:8+64], data) {
		t.Errorf("data %x, want %x", got[8:72], data)
	}

	// More than 64 data bytes is no CAN-FD frame: the kernel refuses it.
	bad := fdFrame(0x123, 0, nil)
	bad[4] = 65
	if _, err := unix.Write(tx, bad); !errors.Is(err, unix.EINVAL) {
		t.Errorf("FD frame with len 65: err %v, want EINVAL", err)
	}
}
