package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/shared/protocol"
)

// pointBatch is one device's point samples to store (point history), and
// what storing them gave: the samples inserted, in order, and the series
// first looked up or made, for the cache once the transaction committed.
type pointBatch struct {
	dev   string
	pts   []*protocol.PointSample
	out   []protocol.PointSample
	fresh map[string]int64
}

// insertPoints stores the samples of each of batches in the head as one
// row (sqlstore.NewHeadRow: a resent sample, or one of a series compacted
// past it, is not stored) and sets each batch's out (the samples stored,
// in order) and fresh. A sample two batches of a device carry goes to the
// first.
func insertPoints(ctx context.Context, tx pgx.Tx, cache *sqlstore.PointSeriesCache, batches []*pointBatch) error {
	q := pgConn{tx}
	for _, b := range batches {
		b.out, b.fresh = nil, nil
		if len(b.pts) == 0 {
			continue
		}
		ids, fresh, err := cache.Resolve(ctx, q, b.dev, b.pts)
		if err != nil {
			return storeError("postgres: %w", err)
		}
		b.fresh = fresh
		row, keep, ok, err := sqlstore.NewHeadRow(ctx, q, b.dev, ids, b.pts)
		if err != nil {
			return storeError("postgres: point samples: %w", err)
		}
		if !ok {
			continue
		}
		if _, err := q.Exec(ctx, sqlstore.InsertHeadSQL, row.DeviceID, row.AtMin, row.AtMax, row.Samples); err != nil {
			return storeError("postgres: point samples: %w", err)
		}
		b.out = make([]protocol.PointSample, len(keep))
		for i, k := range keep {
			b.out[i] = *b.pts[k]
		}
	}
	return nil
}
