//go:build !linux

package walindex

import "errors"

// Index is not mapped outside Linux: Open fails, Header reports not ok.
type Index struct{}

// Open fails outside Linux: read PRAGMA data_version instead.
func Open(string) (*Index, error) {
	return &Index{}, errors.New("walindex: the WAL index is mapped on Linux only")
}

// Header reports not ok outside Linux.
func (w *Index) Header() (Header, bool) { return Header{}, false }

// Close does nothing outside Linux.
func (w *Index) Close() {}
