//go:build !linux

package sqlite

import "errors"

// raiseWriterPriority is Linux only.
func raiseWriterPriority() error {
	return errors.New("sqlite: writer thread priority: not supported on this system")
}
