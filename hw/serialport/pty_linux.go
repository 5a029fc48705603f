package serialport

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// OpenPTY opens a pseudo-terminal pair the way posix_openpt, grantpt,
// unlockpt and ptsname do, and returns the controller (master) side and the
// path of the terminal side (/dev/pts/N). The terminal side is a real
// termios device a Port can open; what is written to the controller arrives
// there and the other way round, without any baud-rate pacing. The
// controller is put in raw mode so that bytes pass unchanged, and is
// non-blocking so that read deadlines work on it.
func OpenPTY() (*os.File, string, error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, "", fmt.Errorf("posix_openpt: %w", err)
	}
	// grantpt is a no-op with devpts; unlockpt clears the lock.
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(fd)
		return nil, "", fmt.Errorf("unlockpt: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		unix.Close(fd)
		return nil, "", fmt.Errorf("ptsname: %w", err)
	}
	if t, err := unix.IoctlGetTermios(fd, unix.TCGETS); err == nil {
		makeRaw(t)
		_ = unix.IoctlSetTermios(fd, unix.TCSETS, t)
	}
	// Non-blocking, so the runtime poller serves it and read deadlines work.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, "", fmt.Errorf("ptmx: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), "/dev/pts/" + strconv.Itoa(n), nil
}

// MakeRaw puts the terminal f in raw mode (no echo, no line editing,
// no newline translation): a simulator serving the terminal side of a pty
// calls it so the bytes it exchanges pass unchanged.
func MakeRaw(f *os.File) error {
	t, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	if err != nil {
		return fmt.Errorf("TCGETS: %w", err)
	}
	makeRaw(t)
	if err := unix.IoctlSetTermios(int(f.Fd()), unix.TCSETS, t); err != nil {
		return fmt.Errorf("TCSETS: %w", err)
	}
	return nil
}

func makeRaw(t *unix.Termios) {
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
}
