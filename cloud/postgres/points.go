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

// insertPoints stores the samples of batches in the head with one INSERT
// whose RETURNING names the rows actually inserted (a resent sample, or
// one of a series compacted past it, is not), and sets each batch's out
// and fresh. A sample two batches carry goes to the first.
func insertPoints(ctx context.Context, tx pgx.Tx, cache *sqlstore.PointSeriesCache, batches []*pointBatch) error {
	type key struct{ series, at int64 }
	n := 0
	for _, b := range batches {
		n += len(b.pts)
	}
	if n == 0 {
		return nil
	}
	series, at := make([]int64, 0, n), make([]int64, 0, n)
	value, cause := make([]*float64, 0, n), make([]*string, 0, n)
	keys := make([][]key, len(batches))
	for i, b := range batches {
		b.out, b.fresh = nil, nil
		ids, fresh, err := cache.Resolve(ctx, pgConn{tx}, b.dev, b.pts)
		if err != nil {
			return storeError("postgres: %w", err)
		}
		b.fresh = fresh
		keys[i] = make([]key, len(b.pts))
		for k, p := range b.pts {
			id, ms := ids[k], p.At.UnixMilli()
			keys[i][k] = key{id, ms}
			series, at = append(series, id), append(at, ms)
			if p.Error != "" {
				e := p.Error
				value, cause = append(value, nil), append(cause, &e)
			} else {
				v := p.Value
				value, cause = append(value, &v), append(cause, nil)
			}
		}
	}
	rows, err := tx.Query(ctx, `INSERT INTO point_head (series_id, at, value, error)
		SELECT v.s, v.a, v.v, v.e FROM unnest($1::bigint[], $2::bigint[], $3::float8[], $4::text[]) AS v(s, a, v, e)
		JOIN point_series p ON p.id = v.s WHERE v.a > p.compacted_to
		ON CONFLICT DO NOTHING RETURNING series_id, at`, series, at, value, cause)
	if err != nil {
		return storeError("postgres: insert point samples: %w", err)
	}
	inserted := make(map[key]bool, n)
	var k key
	if _, err := pgx.ForEachRow(rows, []any{&k.series, &k.at}, func() error {
		inserted[k] = true
		return nil
	}); err != nil {
		return storeError("postgres: insert point samples: %w", err)
	}
	for i, b := range batches {
		for j, p := range b.pts {
			if k := keys[i][j]; inserted[k] {
				b.out = append(b.out, *p)
				delete(inserted, k)
			}
		}
	}
	return nil
}
