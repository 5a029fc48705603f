//go:build !linux

package serialport

import (
	"errors"
	"fmt"
)

type control interface {
	setRTSCTS(on bool) error
	setRS485(on bool) error
	close()
}

type noControl struct{}

func openControl(string) (control, error) { return noControl{}, nil }

func (noControl) setRTSCTS(on bool) error {
	if on {
		return fmt.Errorf("rtscts: %w", errors.ErrUnsupported)
	}
	return nil
}

func (noControl) setRS485(on bool) error {
	if on {
		return fmt.Errorf("TIOCSRS485: %w", errors.ErrUnsupported)
	}
	return nil
}

func (noControl) close() {}

func isGoneErr(error) bool { return false }
