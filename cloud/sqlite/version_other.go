//go:build !linux

package sqlite

import "errors"

// walIndex is not mapped outside Linux: DataVersion reads the pragma.
type walIndex struct{}

func openWALIndex(string) (*walIndex, error) {
	return nil, errors.New("sqlite: WAL index not mapped on this system")
}

func (w *walIndex) header() (walHeader, bool) { return walHeader{}, false }

func (w *walIndex) close() {}
