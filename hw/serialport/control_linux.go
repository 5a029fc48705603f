package serialport

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

type control interface {
	setRTSCTS(on bool) error
	setRS485(on bool) error
	close()
}

type linuxControl struct{ fd int }

func openControl(device string) (control, error) {
	fd, err := unix.Open(device, unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: device, Err: err}
	}
	return &linuxControl{fd: fd}, nil
}

func (c *linuxControl) setRTSCTS(on bool) error {
	t, err := unix.IoctlGetTermios(c.fd, unix.TCGETS)
	if err != nil {
		return fmt.Errorf("TCGETS: %w", err)
	}
	if on == (t.Cflag&unix.CRTSCTS != 0) {
		return nil
	}
	if on {
		t.Cflag |= unix.CRTSCTS
	} else {
		t.Cflag &^= unix.CRTSCTS
	}
	if err := unix.IoctlSetTermios(c.fd, unix.TCSETS, t); err != nil {
		return fmt.Errorf("TCSETS: %w", err)
	}
	return nil
}

// serialRS485 is struct serial_rs485 of <linux/serial.h>.
type serialRS485 struct {
	Flags                 uint32
	DelayRTSBeforeSend    uint32
	DelayRTSAfterSend     uint32
	AddressRecv, AddrDest uint8
	_                     [2]uint8
	_                     [4]uint32
}

const (
	serRS485Enabled     = 1 << 0
	serRS485RTSOnSend   = 1 << 1
	serRS485RTSAfterSnd = 1 << 2
)

// setRS485 enables or disables the kernel's RS485 mode: the driver raises
// RTS (the transceiver's DE line) while sending and drops it afterwards.
// Ttys without RS485 support (a pseudo-terminal, most USB adapters that do
// it in hardware) answer ENOTTY or EINVAL: that is errors.ErrUnsupported.
func (c *linuxControl) setRS485(on bool) error {
	var r serialRS485
	if on {
		r.Flags = serRS485Enabled | serRS485RTSOnSend
	}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(c.fd), uintptr(unix.TIOCSRS485), uintptr(unsafe.Pointer(&r)))
	switch errno {
	case 0:
		return nil
	case unix.ENOTTY, unix.EINVAL, unix.EOPNOTSUPP:
		if !on {
			return nil
		}
		return fmt.Errorf("TIOCSRS485: %w: %w", errors.ErrUnsupported, errno)
	default:
		return fmt.Errorf("TIOCSRS485: %w", errno)
	}
}

func (c *linuxControl) close() { unix.Close(c.fd) }

func isGoneErr(err error) bool {
	return errors.Is(err, unix.EIO) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.EBADF)
}
