package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fleet/fleet/cloud"
)

// The compactor folds a series' head samples into chunks: one transaction
// for a few series at a time moves their samples from the head into chunks
// and raises their compacted_to. A series' newest chunk is appended to
// (decoded, extended, written again) until it holds ChunkSamples samples or
// spans ChunkSpan, so that a slowly sampled point, folded a few samples at
// a time, still fills chunks of hundreds.
const (
	// ChunkSamples is the most samples one chunk holds: 2,048 samples of
	// a 1 s point (34 minutes) decode in tens of microseconds.
	ChunkSamples = 2048
	// ChunkSpan is the longest time one chunk spans, so that retention
	// finds the chunks it trims (start before the cut, end after it) in
	// one span of the end_at index.
	ChunkSpan = 6 * time.Hour
	// compactTxSamples bounds the samples one compaction transaction
	// moves, so that it holds the writer briefly (SQLite: the agent
	// writer waits for it).
	compactTxSamples = 20000
	// seriesPage is how many series one scan of the head reads.
	seriesPage = 1000
)

var _ cloud.PointHistory = (*Store)(nil)

// headSeries is a series with samples in the head: its oldest one.
type headSeries struct{ id, oldest int64 }

// eachHeadSeries calls each with the series that have head samples, a
// page at a time (each series' oldest sample is an index lookup).
func (s *Store) eachHeadSeries(ctx context.Context, each func([]headSeries) error) error {
	after := int64(-1 << 63)
	for {
		page, err := Collect(ctx, s.R, func(r Row) (headSeries, error) {
			var h headSeries
			var oldest *int64
			err := r.Scan(&h.id, &oldest)
			if oldest != nil {
				h.oldest = *oldest
			} else {
				h.oldest = 1<<63 - 1
			}
			return h, err
		}, `SELECT s.id, (SELECT MIN(h.at) FROM point_head h WHERE h.series_id = s.id) FROM point_series s WHERE s.id > ? ORDER BY s.id LIMIT ?`, after, seriesPage)
		if err != nil || len(page) == 0 {
			return err
		}
		after = page[len(page)-1].id
		if err := each(page); err != nil {
			return err
		}
		if len(page) < seriesPage {
			return nil
		}
	}
}

// CompactPoints implements cloud.PointHistory.
func (s *Store) CompactPoints(ctx context.Context, c cloud.PointCompaction) (int64, error) {
	before := c.Before.UnixMilli()
	due := before - c.Wait.Milliseconds()
	var total int64
	var batch []int64
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		var n int64
		err := s.Tx(ctx, func(q Querier) error {
			n = 0
			for _, id := range batch {
				k, err := s.compactSeries(ctx, q, id, before)
				if err != nil {
					return err
				}
				n += k
			}
			return nil
		})
		if err != nil {
			return s.Wrap("compact points", err)
		}
		total += n
		batch = batch[:0]
		return nil
	}
	err := s.eachHeadSeries(ctx, func(page []headSeries) error {
		for _, h := range page {
			if h.oldest >= due {
				continue
			}
			batch = append(batch, h.id)
			if len(batch) >= compactTxSamples/ChunkSamples*4 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	return total, s.Wrap("compact points", err)
}

// chunkRow is a point_chunks row.
type chunkRow struct {
	start, end int64
	count      int
	lastErr    *string
	data       []byte
}

// compactSeries folds series id's head samples before before into its
// chunks in q's transaction and returns how many it folded (head rows at
// or before compacted_to, resends that raced a compaction, are dropped).
func (s *Store) compactSeries(ctx context.Context, q Querier, id, before int64) (int64, error) {
	var compacted int64
	if err := q.QueryRow(ctx, `SELECT compacted_to FROM point_series WHERE id = ?`+s.LockRows, id).Scan(&compacted); err != nil {
		return 0, fmt.Errorf("series %d: %w", id, err)
	}
	var fresh []StoredSample
	err := Each(ctx, q, `SELECT at, value, error FROM point_head WHERE series_id = ? AND at < ? ORDER BY at`, []any{id, before}, func(r Row) error {
		x, err := scanHeadRow(r)
		if err == nil && x.At > compacted {
			fresh = append(fresh, x)
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("head of series %d: %w", id, err)
	}
	if _, err := q.Exec(ctx, `DELETE FROM point_head WHERE series_id = ? AND at < ?`, id, before); err != nil {
		return 0, fmt.Errorf("head of series %d: %w", id, err)
	}
	if len(fresh) == 0 {
		return 0, nil
	}
	folded := int64(len(fresh))
	// The newest chunk, while it has room, takes the first new samples.
	var last chunkRow
	err = q.QueryRow(ctx, `SELECT start_at, end_at, count, last_error, data FROM point_chunks WHERE series_id = ? ORDER BY end_at DESC LIMIT 1`, id).
		Scan(&last.start, &last.end, &last.count, &last.lastErr, &last.data)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return 0, fmt.Errorf("chunks of series %d: %w", id, err)
	case last.count < ChunkSamples && fresh[0].At-last.start < ChunkSpan.Milliseconds():
		cs, err := AppendPointChunk(nil, last.data, last.count)
		old := storedSamples(cs, last.lastErr)
		if err != nil {
			return 0, fmt.Errorf("chunk of series %d ending %d: %w", id, last.end, err)
		}
		if _, err := q.Exec(ctx, `DELETE FROM point_chunks WHERE series_id = ? AND end_at = ?`, id, last.end); err != nil {
			return 0, fmt.Errorf("chunks of series %d: %w", id, err)
		}
		fresh = append(old, fresh...)
	}
	if err := insertChunks(ctx, q, id, fresh); err != nil {
		return 0, err
	}
	if _, err := q.Exec(ctx, `UPDATE point_series SET compacted_to = ? WHERE id = ?`, fresh[len(fresh)-1].At, id); err != nil {
		return 0, fmt.Errorf("series %d: %w", id, err)
	}
	return folded, nil
}

// insertChunks stores samples (ascending) as chunks of series id, each of
// at most ChunkSamples spanning less than ChunkSpan.
func insertChunks(ctx context.Context, q Querier, id int64, samples []StoredSample) error {
	for len(samples) > 0 {
		n := 1
		for n < len(samples) && n < ChunkSamples && samples[n].At-samples[0].At < ChunkSpan.Milliseconds() {
			n++
		}
		data, lastErr, err := EncodePointChunk(samples[:n])
		if err != nil {
			return fmt.Errorf("series %d: %w", id, err)
		}
		if _, err := q.Exec(ctx, `INSERT INTO point_chunks (series_id, start_at, end_at, count, last_error, data) VALUES (?, ?, ?, ?, ?, ?)`,
			id, samples[0].At, samples[n-1].At, n, lastErr, data); err != nil {
			return fmt.Errorf("chunk of series %d: %w", id, err)
		}
		samples = samples[n:]
	}
	return nil
}

// scanHeadRow reads a point_head row (at, value, error).
func scanHeadRow(r Row) (StoredSample, error) {
	var x StoredSample
	var v *float64
	var e *string
	if err := r.Scan(&x.At, &v, &e); err != nil {
		return x, err
	}
	if v == nil || v != nil && *v != *v { // NULL or NaN
		x.Bad = true
	} else {
		x.Value = *v
	}
	if e != nil {
		x.Bad, x.Error = true, *e
	}
	return x, nil
}

// pointRetentionBatch bounds the chunks one retention statement deletes.
const pointRetentionBatch = 5000

// SweepPoints implements cloud.PointHistory: whole chunks older than the
// cut go, the chunks it falls in are written again without their older
// samples, and head samples older than it are deleted.
func (s *Store) SweepPoints(ctx context.Context, keep time.Duration) (int64, error) {
	if keep <= 0 {
		return 0, fmt.Errorf("%s: point retention must be positive", s.Name)
	}
	cut := s.Clock().Add(-keep).UnixMilli()
	var total int64
	for {
		var n, rows int64
		err := s.Tx(ctx, func(q Querier) error {
			n, rows = 0, 0
			return Each(ctx, q, `DELETE FROM point_chunks WHERE (series_id, end_at) IN
				(SELECT series_id, end_at FROM point_chunks WHERE end_at < ? LIMIT ?) RETURNING count`, []any{cut, pointRetentionBatch}, func(r Row) error {
				var c int64
				err := r.Scan(&c)
				rows++
				n += c
				return err
			})
		})
		if err != nil {
			return total, s.Wrap("point retention", err)
		}
		total += n
		if rows < pointRetentionBatch {
			break
		}
	}
	// The chunks the cut falls in: their end is within ChunkSpan after it.
	var trim []struct {
		id int64
		chunkRow
	}
	err := Each(ctx, s.R, `SELECT series_id, start_at, end_at, count, last_error, data FROM point_chunks WHERE end_at >= ? AND end_at <= ? AND start_at < ?`,
		[]any{cut, cut + ChunkSpan.Milliseconds(), cut}, func(r Row) error {
			var x struct {
				id int64
				chunkRow
			}
			err := r.Scan(&x.id, &x.start, &x.end, &x.count, &x.lastErr, &x.data)
			trim = append(trim, x)
			return err
		})
	if err != nil {
		return total, s.Wrap("point retention", err)
	}
	for _, c := range trim {
		cs, err := AppendPointChunk(nil, c.data, c.count)
		kept := slices.DeleteFunc(storedSamples(cs, c.lastErr), func(x StoredSample) bool { return x.At < cut })
		if err != nil {
			return total, s.Wrap("point retention", fmt.Errorf("chunk of series %d ending %d: %w", c.id, c.end, err))
		}
		var k int64
		err = s.Tx(ctx, func(q Querier) error {
			var err error
			k, err = q.Exec(ctx, `DELETE FROM point_chunks WHERE series_id = ? AND end_at = ? AND start_at = ?`, c.id, c.end, c.start)
			if err != nil || k == 0 {
				return err // gone or changed meanwhile (a compaction appended to it): the next sweep's
			}
			return insertChunks(ctx, q, c.id, kept)
		})
		if err != nil {
			return total, s.Wrap("point retention", err)
		}
		if k > 0 {
			total += int64(c.count - len(kept))
		}
	}
	err = s.eachHeadSeries(ctx, func(page []headSeries) error {
		for _, h := range page {
			if h.oldest >= cut {
				continue
			}
			n, err := s.W.Exec(ctx, `DELETE FROM point_head WHERE series_id = ? AND at < ?`, h.id, cut)
			if err != nil {
				return err
			}
			total += n
		}
		return nil
	})
	return total, s.Wrap("point retention", err)
}
