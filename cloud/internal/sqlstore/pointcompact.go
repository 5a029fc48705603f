package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fleet/fleet/cloud"
)

// The compactor folds head rows into their series' chunks: one transaction
// for a few devices' rows at a time moves their samples from the head into
// chunks, deletes the rows and raises the series' compacted_to. A series' newest chunk is appended to
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
)

var _ cloud.PointHistory = (*Store)(nil)

// headRef is a head row a compaction or a sweep reads.
type headRef struct {
	id     int64
	device string
}

// compactTxRows bounds the head rows one compaction transaction folds,
// so that it holds the writer briefly (SQLite: the agent writer waits for
// it); all of a device's rows go in the same one, so that a late record
// is folded with the newer ones of its series.
const compactTxRows = 256

// CompactPoints implements cloud.PointHistory: the head rows with samples
// before c.Before of the devices with one older than Before minus Wait,
// in rowid order, a few devices a transaction: their samples before
// Before go into their series' chunks; the rows holding none after it are
// deleted (a row that holds some stays; its samples folded are at or
// before their series' compacted_to, which readers skip).
func (s *Store) CompactPoints(ctx context.Context, c cloud.PointCompaction) (int64, error) {
	before := c.Before.UnixMilli()
	due := before - c.Wait.Milliseconds()
	var rows []headRef
	dueDev := map[string]bool{}
	err := Each(ctx, s.R, `SELECT id, device_id, at_min FROM point_head WHERE at_min < ?`, []any{before}, func(r Row) error {
		var h headRef
		var atMin int64
		err := r.Scan(&h.id, &h.device, &atMin)
		rows = append(rows, h)
		if atMin < due {
			dueDev[h.device] = true
		}
		return err
	})
	if err != nil {
		return 0, s.Wrap("compact points", err)
	}
	rows = slices.DeleteFunc(rows, func(h headRef) bool { return !dueDev[h.device] })
	slices.SortFunc(rows, func(a, b headRef) int { return cmp.Compare(a.id, b.id) })
	// Devices in the order of their first row, each with its rows.
	byDev := map[string][]int64{}
	var devs []string
	for _, h := range rows {
		if byDev[h.device] == nil {
			devs = append(devs, h.device)
		}
		byDev[h.device] = append(byDev[h.device], h.id)
	}
	var total int64
	var batch []int64
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		var n int64
		err := s.Tx(ctx, func(q Querier) error {
			var err error
			n, err = s.compactRows(ctx, q, batch, before)
			return err
		})
		if err != nil {
			return s.Wrap("compact points", err)
		}
		total += n
		batch = batch[:0]
		return nil
	}
	for _, d := range devs {
		batch = append(batch, byDev[d]...)
		if len(batch) >= compactTxRows {
			if err := flush(); err != nil {
				return total, err
			}
		}
	}
	return total, flush()
}

// compactRows folds the samples before before of head rows ids into their
// series' chunks in q's transaction, deletes the rows that hold none after
// it, and returns how many samples it folded.
func (s *Store) compactRows(ctx context.Context, q Querier, ids []int64, before int64) (int64, error) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	bySeries := map[int64][]StoredSample{}
	var gone []any
	err := Each(ctx, q, `SELECT id, at_min, at_max, samples FROM point_head WHERE id IN `+inList(len(ids))+` ORDER BY id`, args, func(r Row) error {
		var id, atMin, atMax int64
		var b []byte
		if err := r.Scan(&id, &atMin, &atMax, &b); err != nil {
			return err
		}
		if atMax < before {
			gone = append(gone, id)
		}
		return DecodeHead(b, atMin, func(x HeadSample) {
			if x.At < before {
				bySeries[x.Series] = append(bySeries[x.Series], x.StoredSample)
			}
		})
	})
	if err != nil {
		return 0, fmt.Errorf("point head: %w", err)
	}
	series := make([]int64, 0, len(bySeries))
	for id := range bySeries {
		series = append(series, id)
	}
	slices.Sort(series)
	var n int64
	for _, id := range series {
		k, err := s.compactSeries(ctx, q, id, bySeries[id])
		if err != nil {
			return 0, err
		}
		n += k
	}
	if len(gone) > 0 {
		if _, err := q.Exec(ctx, `DELETE FROM point_head WHERE id IN `+inList(len(gone)), gone...); err != nil {
			return 0, fmt.Errorf("point head: %w", err)
		}
	}
	return n, nil
}

// chunkRow is a point_chunks row.
type chunkRow struct {
	start, end int64
	count      int
	lastErr    *string
	data       []byte
}

// compactSeries folds samples of series id (from the head, in any order)
// into its chunks in q's transaction and returns how many it folded
// (those at or before compacted_to, resends that raced a compaction, are
// dropped, and a time carried twice is folded once).
func (s *Store) compactSeries(ctx context.Context, q Querier, id int64, samples []StoredSample) (int64, error) {
	var compacted int64
	if err := q.QueryRow(ctx, `SELECT compacted_to FROM point_series WHERE id = ?`+s.LockRows, id).Scan(&compacted); err != nil {
		return 0, fmt.Errorf("series %d: %w", id, err)
	}
	slices.SortStableFunc(samples, func(a, b StoredSample) int { return cmp.Compare(a.At, b.At) })
	fresh := slices.CompactFunc(slices.DeleteFunc(samples, func(x StoredSample) bool { return x.At <= compacted }),
		func(a, b StoredSample) bool { return a.At == b.At })
	if len(fresh) == 0 {
		return 0, nil
	}
	folded := int64(len(fresh))
	// The newest chunk, while it has room, takes the first new samples.
	var last chunkRow
	err := q.QueryRow(ctx, `SELECT start_at, end_at, count, last_error, data FROM point_chunks WHERE series_id = ? ORDER BY end_at DESC LIMIT 1`, id).
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
	n, err := s.sweepHead(ctx, cut)
	return total + n, s.Wrap("point retention", err)
}

// sweepHead deletes the head samples older than cut (the rows holding
// only such samples, and those samples of the rows that hold both) and
// returns how many it deleted that were not compacted already.
func (s *Store) sweepHead(ctx context.Context, cut int64) (int64, error) {
	var total int64
	err := s.Tx(ctx, func(q Querier) error {
		total = 0
		type row struct {
			id, atMin, atMax int64
			samples          []byte
		}
		rows, err := Collect(ctx, q, func(r Row) (row, error) {
			var x row
			return x, r.Scan(&x.id, &x.atMin, &x.atMax, &x.samples)
		}, `SELECT id, at_min, at_max, samples FROM point_head WHERE at_min < ?`, cut)
		if err != nil {
			return err
		}
		compacted := map[int64]int64{}
		for _, r := range rows {
			var kept, old []HeadSample
			err := DecodeHead(r.samples, r.atMin, func(x HeadSample) {
				if x.At >= cut {
					kept = append(kept, x)
				} else {
					old = append(old, x)
				}
			})
			if err != nil {
				return fmt.Errorf("point head row %d: %w", r.id, err)
			}
			// Samples older than cut are deleted; those compacted already
			// were counted with their chunks.
			for _, x := range old {
				c, ok := compacted[x.Series]
				if !ok {
					if err := q.QueryRow(ctx, `SELECT compacted_to FROM point_series WHERE id = ?`, x.Series).Scan(&c); err != nil {
						return fmt.Errorf("series %d: %w", x.Series, err)
					}
					compacted[x.Series] = c
				}
				if x.At > c {
					total++
				}
			}
			if len(kept) == 0 {
				_, err = q.Exec(ctx, `DELETE FROM point_head WHERE id = ?`, r.id)
			} else {
				atMin := kept[0].At
				for _, x := range kept {
					atMin = min(atMin, x.At)
				}
				_, err = q.Exec(ctx, `UPDATE point_head SET at_min = ?, samples = ? WHERE id = ?`, atMin, EncodeHead(nil, atMin, kept), r.id)
			}
			if err != nil {
				return fmt.Errorf("point head row %d: %w", r.id, err)
			}
		}
		return nil
	})
	return total, err
}
