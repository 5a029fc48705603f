package canfd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleet/fleet/shared/serialcfg"
)

// sendTimeout bounds one write to the socket.
const sendTimeout = time.Second

// Socket is a SocketCAN raw socket bound to one interface, with CAN-FD
// frames enabled and every error class subscribed. It implements Bus.
type Socket struct {
	iface string
	f     *os.File
}

var _ Bus = (*Socket)(nil)

// Dial opens a raw CAN socket on iface (CAN_RAW_FD_FRAMES on,
// CAN_RAW_ERR_FILTER = all classes). The socket is non-blocking and served
// by the Go runtime's poller, so Close unblocks a pending Recv.
func Dial(iface string) (*Socket, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, fmt.Errorf("canfd: interface %s: %w", iface, err)
	}
	fd, err := unix.Socket(unix.AF_CAN, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.CAN_RAW)
	if err != nil {
		return nil, fmt.Errorf("canfd: socket(AF_CAN): %w", err)
	}
	fail := func(what string, err error) (*Socket, error) {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("canfd: %s on %s: %w", what, iface, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_CAN_RAW, unix.CAN_RAW_FD_FRAMES, 1); err != nil {
		return fail("CAN_RAW_FD_FRAMES", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_CAN_RAW, unix.CAN_RAW_ERR_FILTER, ErrClassAll); err != nil {
		return fail("CAN_RAW_ERR_FILTER", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrCAN{Ifindex: ifi.Index}); err != nil {
		return fail("bind", err)
	}
	return &Socket{iface: iface, f: os.NewFile(uintptr(fd), "can:"+iface)}, nil
}

// Send writes one frame (72 bytes for FD, 16 for classic).
func (s *Socket) Send(fr Frame) error {
	b, err := fr.Marshal()
	if err != nil {
		return err
	}
	if err := s.f.SetWriteDeadline(time.Now().Add(sendTimeout)); err != nil {
		return s.wrap(err)
	}
	n, err := s.f.Write(b)
	if err != nil {
		return s.wrap(err)
	}
	if n != len(b) {
		return fmt.Errorf("canfd: short write on %s (%d of %d bytes)", s.iface, n, len(b))
	}
	return nil
}

// Recv reads one frame.
func (s *Socket) Recv() (Frame, error) {
	var b [FDMTU]byte
	n, err := s.f.Read(b[:])
	if err != nil {
		return Frame{}, s.wrap(err)
	}
	return Unmarshal(b[:n])
}

func (s *Socket) wrap(err error) error {
	if errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("canfd %s: %w", s.iface, ErrClosed)
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if errors.Is(err, unix.ENODEV) {
		// The interface was unregistered; the kernel unbound the socket.
		return fmt.Errorf("%s: %w: %w", s.iface, ErrDeviceGone, err)
	}
	return fmt.Errorf("%s: %w", s.iface, err)
}

// Close closes the socket.
func (s *Socket) Close() error { return s.f.Close() }

// OpenSocketCAN opens channel name on the SocketCAN interface iface: it
// configures the link over netlink and starts the driver on a raw socket.
func OpenSocketCAN(ctx context.Context, name, iface string, cfg serialcfg.Config, log *slog.Logger) (*Port, error) {
	return New(ctx, Options{
		Name:   name,
		Device: iface,
		Open:   func() (Bus, error) { return Dial(iface) },
		Link:   &NetlinkLink{Interface: iface},
		Logger: log,
	}, cfg)
}
