package canfd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

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
// CAN-FD MTU, and the error wraps ErrBitTimingUnsupported.
func (l *NetlinkLink) Configure(ctx context.Context, s Settings) error {
	link, err := netlink.LinkByName(l.Interface)
	if err != nil {
		return fmt.Errorf("link %s: %w", l.Interface, err)
	}
	if err := netlink.LinkSetDown(link); err != nil {
		return fmt.Errorf("link %s down: %w", l.Interface, err)
	}
	cerr := setCANAttrs(link.Attrs().Index, s)
	if cerr != nil && errors.Is(cerr, unix.EOPNOTSUPP) {
		cerr = fmt.Errorf("set bitrate on %s (%s): %w: %w", l.Interface, link.Type(), ErrBitTimingUnsupported, cerr)
	} else if cerr != nil {
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
// {BITTIMING, DATA_BITTIMING, CTRLMODE, RESTART_MS}}.
func setCANAttrs(index int, s Settings) error {
	req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)

	info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	info.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated("can"))
	data := info.AddRtAttr(nl.IFLA_INFO_DATA, nil)
	data.AddRtAttr(nl.IFLA_CAN_BITTIMING, bitTiming(s.NominalBitrate, s.SamplePoint))
	data.AddRtAttr(nl.IFLA_CAN_DATA_BITTIMING, bitTiming(s.DataBitrate, 0))
	var flags uint32 = unix.CAN_CTRLMODE_FD
	if s.ListenOnly {
		flags |= unix.CAN_CTRLMODE_LISTENONLY
	}
	data.AddRtAttr(nl.IFLA_CAN_CTRLMODE, ctrlMode(unix.CAN_CTRLMODE_FD|unix.CAN_CTRLMODE_LISTENONLY, flags))
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
