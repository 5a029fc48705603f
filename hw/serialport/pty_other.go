//go:build !linux

package serialport

import (
	"errors"
	"os"
)

// OpenPTY is only implemented on Linux.
func OpenPTY() (*os.File, string, error) { return nil, "", errors.ErrUnsupported }

// MakeRaw is only implemented on Linux.
func MakeRaw(*os.File) error { return errors.ErrUnsupported }
