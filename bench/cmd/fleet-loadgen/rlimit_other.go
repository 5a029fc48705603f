//go:build !linux

package main

import "errors"

func raiseNoFile() (uint64, error) {
	return 0, errors.ErrUnsupported
}
