package api

import (
	"context"

	"github.com/fleet/fleet/cloud"
)

// requestVersion is the store's data version (cloud.Versioner) as one
// request reads it: at most once, at the first cache the request consults
// (its key row, at authentication), and then handed to every other (its
// list page), so that they share one read, a round trip on PostgreSQL. Read
// before either cache reads, it tags both (the rule of cloud.Versioner). It
// serves one request's sequential reads, never two requests, and is not
// safe for concurrent use.
type requestVersion struct {
	v    uint64
	ok   bool // v was read (false: no Versioner, or its read failed)
	read bool // get was called
}

// get returns the request's version, reading it from vs at the first call;
// ok is false when there is none (vs nil, or its read failed: a failed read
// is not repeated within the request).
func (rv *requestVersion) get(ctx context.Context, vs cloud.Versioner) (v uint64, ok bool) {
	if !rv.read {
		rv.read = true
		if vs != nil {
			n, err := vs.DataVersion(ctx)
			rv.v, rv.ok = n, err == nil
		}
	}
	return rv.v, rv.ok
}
