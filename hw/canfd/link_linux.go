package canfd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// RestartDelay is the controller's automatic restart after bus-off
// (IFLA_CAN_RESTART_MS), so a channel recovers without an operator.
const RestartDelay uint32 = 1000 // milliseconds

// NetlinkLink configures a SocketCAN interface over rtnetlink: what
// `ip link set IF down; ip link set IF type can bitrate B sample-point S
// dbitrate D fd on listen-only on|off restart-ms 1000; ip link set IF up`
// does. vishvananda/netlink reads CAN attributes but cannot set them, so the
// IFLA_CAN_* attributes are built here with its nl package.
type NetlinkLink struct {
	Interface string
}

var _ Link = (*NetlinkLink)(nil)

// Configure implements Link. On an interface that has no bit timing (vcan)
// the kernel answers EOPNOTSUPP: the link is still brought up, with the
// CAN-FD MTU, and the error wraps ErrBitTimingUnsupported. Without
// CAP_NET_ADMIN nothing is changed and the error wraps ErrNotPermitted.
func (l *NetlinkLink) Configure(ctx context.Context, s Settings) error {
	link, err := netlink.LinkByName(l.Interface)
	if err != nil {
		return fmt.Errorf("link %s: %w", l.Interface, err)
	}
	switch link.Type() {
	case "can", "vcan", "vxcan":
	default:
		// Never bounce a network link that is not CAN (a mistyped
		// --port canfd-1=eth0 must not take the uplink down).
		return fmt.Errorf("%s is not a CAN interface (link type %s)", l.Interface, link.Type())
	}
	if err := netlink.LinkSetDown(link); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("link %s: %w: %w", l.Interface, ErrNotPermitted, err)
		}
		return fmt.Errorf("link %s down: %w", l.Interface, err)
	}
	cerr := setCANAttrs(link.Attrs().Index, s, true)
	switch {
	case cerr != nil && errors.Is(cerr, unix.EOPNOTSUPP) && link.Type() != "can":
		// vcan (or anything that is not a CAN controller) has no bit timing.
		cerr = fmt.Errorf("set bitrate on %s (%s): %w: %w", l.Interface, link.Type(), ErrBitTimingUnsupported, cerr)
	case cerr != nil && errors.Is(cerr, unix.EOPNOTSUPP):
		// A real controller refusing a mode: most likely a classic CAN
		// controller asked for FD (or one without listen-only).
		what := "CAN-FD"
		if s.ListenOnly {
			what = "CAN-FD or listen-only"
		}
		cerr = fmt.Errorf("%s refused the settings (controller without %s?): %w", l.Interface, what, cerr)
	case cerr != nil && errors.Is(cerr, unix.EDOM):
		// The kernel's bit-timing calculation found no prescaler and
		// segments within 5% of the bitrate for this controller's clock.
		cerr = fmt.Errorf("%s cannot make bitrate %d/%d with its clock: %w", l.Interface, s.NominalBitrate, s.DataBitrate, cerr)
	case cerr != nil:
		cerr = fmt.Errorf("set bitrate %d/%d sample point %.3f on %s: %w", s.NominalBitrate, s.DataBitrate, s.SamplePoint, l.Interface, cerr)
	}
	if link.Attrs().MTU != FDMTU {
		// A real controller switches to the FD MTU with "fd on"; a vcan
		// interface needs it set (allowed while down).
		if fresh, err := netlink.LinkByName(l.Interface); err == nil && fresh.Attrs().MTU != FDMTU {
			if err := netlink.LinkSetMTU(fresh, FDMTU); err != nil && cerr == nil {
				cerr = fmt.Errorf("set MTU %d on %s: %w", FDMTU, l.Interface, err)
			}
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return errors.Join(cerr, fmt.Errorf("link %s up: %w", l.Interface, err))
	}
	return cerr
}

// setCANAttrs sends RTM_NEWLINK with IFLA_LINKINFO{kind "can", data
// {BITTIMING, DATA_BITTIMING, CTRLMODE, RESTART_MS}}. With fd false it
// sets a classic controller (no data bit timing, FD off); only the kernel
// tests use that, on qemu's SJA1000.
func setCANAttrs(index int, s Settings, fd bool) error {
	req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)

	info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	info.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated("can"))
	data := info.AddRtAttr(nl.IFLA_INFO_DATA, nil)
	data.AddRtAttr(nl.IFLA_CAN_BITTIMING, bitTiming(s.NominalBitrate, s.SamplePoint))
	var flags uint32
	if fd {
		data.AddRtAttr(nl.IFLA_CAN_DATA_BITTIMING, bitTiming(s.DataBitrate, 0))
		flags |= unix.CAN_CTRLMODE_FD
	}
	if s.ListenOnly {
		flags |= unix.CAN_CTRLMODE_LISTENONLY
	}
	mask := uint32(unix.CAN_CTRLMODE_LISTENONLY)
	if fd {
		mask |= unix.CAN_CTRLMODE_FD
	}
	data.AddRtAttr(nl.IFLA_CAN_CTRLMODE, ctrlMode(mask, flags))
	data.AddRtAttr(nl.IFLA_CAN_RESTART_MS, nl.Uint32Attr(RestartDelay))
	req.AddData(info)
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// bitTiming encodes struct can_bittiming with only bitrate and sample point
// (tenths of a percent) set; the kernel computes the segments. A zero
// sample point lets the kernel choose.
func bitTiming(bitrate uint32, samplePoint float64) []byte {
	b := make([]byte, 32)
	binary.NativeEndian.PutUint32(b[0:4], bitrate)
	binary.NativeEndian.PutUint32(b[4:8], uint32(samplePoint*1000+0.5))
	return b
}

// ctrlMode encodes struct can_ctrlmode.
func ctrlMode(mask, flags uint32) []byte {
	b := make([]byte, 8)
	binary.NativeEndian.PutUint32(b[0:4], mask)
	binary.NativeEndian.PutUint32(b[4:8], flags)
	return b
}

// ReadSettings reads back the interface's bit timing and modes over
// rtnetlink (what `ip -details link show` prints): nominal bitrate and
// sample point, data bitrate, listen-only, and whether FD is on. An
// interface without CAN attributes (vcan) returns zero Settings and
// fd=false.
func ReadSettings(iface string) (s Settings, fd bool, err error) {
	link, err := netlink.LinkByName(iface)
	if err != nil {
		return Settings{}, false, fmt.Errorf("link %s: %w", iface, err)
	}
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(link.Attrs().Index)
	req.AddData(msg)
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
	if err != nil {
		return Settings{}, false, fmt.Errorf("link %s: %w", iface, err)
	}
	if len(msgs) == 0 || len(msgs[0]) < unix.SizeofIfInfomsg {
		return Settings{}, false, fmt.Errorf("link %s: empty answer", iface)
	}
	attrs, err := nl.ParseRouteAttr(msgs[0][unix.SizeofIfInfomsg:])
	if err != nil {
		return Settings{}, false, fmt.Errorf("link %s: %w", iface, err)
	}
	// The CAN attributes nest in IFLA_LINKINFO, then IFLA_INFO_DATA.
	info, err := nestedAttrs(attrs, unix.IFLA_LINKINFO)
	if err != nil {
		return Settings{}, false, fmt.Errorf("link %s: %w", iface, err)
	}
	data, err := nestedAttrs(info, nl.IFLA_INFO_DATA)
	if err != nil {
		return Settings{}, false, fmt.Errorf("link %s: %w", iface, err)
	}
	for _, d := range data {
		v := d.Value
		switch d.Attr.Type {
		case nl.IFLA_CAN_BITTIMING:
			if len(v) >= 8 {
				s.NominalBitrate = binary.NativeEndian.Uint32(v[0:4])
				s.SamplePoint = float64(binary.NativeEndian.Uint32(v[4:8])) / 1000
			}
		case nl.IFLA_CAN_DATA_BITTIMING:
			if len(v) >= 4 {
				s.DataBitrate = binary.NativeEndian.Uint32(v[0:4])
			}
		case nl.IFLA_CAN_CTRLMODE:
			if len(v) >= 8 {
				flags := binary.NativeEndian.Uint32(v[4:8])
				s.ListenOnly = flags&unix.CAN_CTRLMODE_LISTENONLY != 0
				fd = flags&unix.CAN_CTRLMODE_FD != 0
			}
		}
	}
	return s, fd, nil
}

// nestedAttrs returns the attributes nested in the first of attrs of type
// typ, or none when attrs has no such attribute.
func nestedAttrs(attrs []syscall.NetlinkRouteAttr, typ uint16) ([]syscall.NetlinkRouteAttr, error) {
	for _, a := range attrs {
		if a.Attr.Type == typ {
			return nl.ParseRouteAttr(a.Value)
		}
	}
	return nil, nil
}
