package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// Point history (migration 0009_point_history): point_series numbers each
// point of a device; point_head holds recent samples, one row per stored
// record of a device (pointhead.go), as the agent writers store them;
// point_chunks holds older ones compressed (pointchunk.go), folded by the
// compactor. A series' compacted_to is the
// newest time its chunks hold: head rows at or before it are ignored (a
// resend that raced the compactor), and the writers do not store them.

// StoredSample is one sample of a point's history: At in Unix ms; Bad for
// a failed read (Value is then meaningless), with its cause in Error when
// it is known (a compacted bad reading keeps its cause only when it is
// its chunk's last sample).
type StoredSample struct {
	At    int64
	Value float64
	Bad   bool
	Error string
}

// PointSeriesRef is a series' row: its id and how far it is compacted.
type PointSeriesRef struct {
	ID          int64
	CompactedTo int64
}

// PointSeriesCache maps a device's point id to its series id, for an
// agent writer: ids are added after the transaction that made or read
// them committed (Add), so that it never holds an id a rollback undid.
// Safe for concurrent use.
type PointSeriesCache struct {
	mu sync.RWMutex
	m  map[string]map[string]int64 // by device id, then point id
}

// Add caches the device's series ids, by point id.
func (c *PointSeriesCache) Add(deviceID string, ids map[string]int64) {
	if len(ids) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]map[string]int64)
	}
	dev := c.m[deviceID]
	if dev == nil {
		dev = make(map[string]int64, len(ids))
		c.m[deviceID] = dev
	}
	for p, id := range ids {
		dev[p] = id
	}
}

// Resolve returns the series id of the point of each of samples, in
// order, creating the series the device lacks with q (in the caller's
// transaction), and fresh, the ids not found in the cache, for the caller
// to Add once the transaction committed.
func (c *PointSeriesCache) Resolve(ctx context.Context, q Querier, deviceID string, samples []*protocol.PointSample) (ids []int64, fresh map[string]int64, err error) {
	ids = make([]int64, len(samples))
	var missing []int
	c.mu.RLock()
	dev := c.m[deviceID]
	for i, p := range samples {
		id, ok := dev[p.Point]
		if !ok {
			missing = append(missing, i)
		}
		ids[i] = id
	}
	c.mu.RUnlock()
	for _, i := range missing {
		p := samples[i].Point
		id, ok := fresh[p]
		if !ok {
			if id, err = seriesID(ctx, q, deviceID, p); err != nil {
				return nil, nil, err
			}
			if fresh == nil {
				fresh = make(map[string]int64)
			}
			fresh[p] = id
		}
		ids[i] = id
	}
	return ids, fresh, nil
}

// seriesID returns the id of the device's point's series, made if new.
func seriesID(ctx context.Context, q Querier, deviceID, pointID string) (int64, error) {
	const find = `SELECT id FROM point_series WHERE device_id = ? AND point = ?`
	var id int64
	err := q.QueryRow(ctx, find, deviceID, pointID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		if _, err := q.Exec(ctx, `INSERT OR IGNORE INTO point_series (device_id, point) VALUES (?, ?)`, deviceID, pointID); err != nil {
			return 0, fmt.Errorf("point series %s of %s: %w", pointID, deviceID, err)
		}
		err = q.QueryRow(ctx, find, deviceID, pointID).Scan(&id)
	}
	if err != nil {
		return 0, fmt.Errorf("point series %s of %s: %w", pointID, deviceID, err)
	}
	return id, nil
}

// pointSeries reads the series of the device's point; ok is false when
// it has none.
func (s *Store) pointSeries(ctx context.Context, deviceID, pointID string) (PointSeriesRef, bool, error) {
	var r PointSeriesRef
	err := s.R.QueryRow(ctx, `SELECT id, compacted_to FROM point_series WHERE device_id = ? AND point = ?`, deviceID, pointID).Scan(&r.ID, &r.CompactedTo)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}

// compactedTo reads a series' compacted_to again.
func (s *Store) compactedTo(ctx context.Context, id int64) (int64, error) {
	var c int64
	err := s.R.QueryRow(ctx, `SELECT compacted_to FROM point_series WHERE id = ?`, id).Scan(&c)
	return c, err
}

// headSnapshot reads ref's head samples in [from, to] after its
// compacted_to (ascending, or descending and at most limit when limit >
// 0), and the compacted_to they go with: a compaction that committed
// while they were read (it moves samples from the head into chunks and
// raises compacted_to in one transaction) makes it read them again. The
// chunks up to the compacted_to returned change no more (a later
// compaction appends only samples after it), so they can be read next,
// in any number of statements.
func (s *Store) headSnapshot(ctx context.Context, deviceID string, ref PointSeriesRef, from, to int64, desc bool, limit int) (PointSeriesRef, []StoredSample, error) {
	for attempt := 0; ; attempt++ {
		head, err := s.headSamples(ctx, deviceID, ref, from, to, desc, limit)
		if err != nil {
			return ref, nil, err
		}
		c, err := s.compactedTo(ctx, ref.ID)
		if err != nil {
			return ref, nil, err
		}
		if c == ref.CompactedTo || attempt == 10 {
			return ref, head, nil
		}
		ref.CompactedTo = c
	}
}

// scanChunks calls each with the samples in [from, to] of each of ref's
// chunks up to its compacted_to (ascending), and the cause of the chunk's
// last sample when it is a bad reading (last: whether the slice ends with
// that sample), chunks in time order or, with desc, newest first. The
// slice is reused from one call to the next.
func (s *Store) scanChunks(ctx context.Context, ref PointSeriesRef, from, to int64, desc bool, each func(c []ChunkSample, lastErr *string) error) error {
	to = min(to, ref.CompactedTo)
	if from > to {
		return nil
	}
	// A chunk spans less than ChunkSpan: one that starts by to ends
	// before to + ChunkSpan, which bounds the index range read.
	q := `SELECT count, last_error, data FROM point_chunks WHERE series_id = ? AND end_at >= ? AND end_at < ? AND start_at <= ? ORDER BY end_at`
	if desc {
		q += ` DESC`
	}
	var buf []ChunkSample
	return Each(ctx, s.R, q, []any{ref.ID, from, to + ChunkSpan.Milliseconds(), to}, func(r Row) error {
		var n int
		var lastErr *string
		var data []byte
		if err := r.Scan(&n, &lastErr, &data); err != nil {
			return err
		}
		var err error
		if buf, err = AppendPointChunk(buf[:0], data, n); err != nil {
			return err
		}
		// The samples in [from, to]: a chunk is ascending.
		lo, _ := slices.BinarySearchFunc(buf, from, func(x ChunkSample, t int64) int { return cmp.Compare(x.At, t) })
		hi, found := slices.BinarySearchFunc(buf, to, func(x ChunkSample, t int64) int { return cmp.Compare(x.At, t) })
		if found {
			hi++
		}
		if hi < len(buf) {
			lastErr = nil // the chunk's last sample is not among them
		}
		return each(buf[lo:hi], lastErr)
	})
}

// errStop ends a scan early.
var errStop = errors.New("stop")

// PointHistory calls each with every sample of the device's point in
// [from, to] (Unix ms), ascending, a slice at a time (a chunk's, reused
// from one call to the next; a bad reading is a NaN); found is false when
// the point has no history.
func (s *Store) PointHistory(ctx context.Context, deviceID, pointID string, from, to int64, each func([]ChunkSample) error) (found bool, err error) {
	ref, ok, err := s.pointSeries(ctx, deviceID, pointID)
	if err != nil || !ok {
		return false, s.Wrap("point history", err)
	}
	ref, head, err := s.headSnapshot(ctx, deviceID, ref, from, to, false, 0)
	if err != nil {
		return true, s.Wrap("point history", err)
	}
	err = s.scanChunks(ctx, ref, from, to, false, func(c []ChunkSample, _ *string) error { return each(c) })
	if err != nil {
		return true, s.Wrap("point history", err)
	}
	tail := make([]ChunkSample, len(head))
	for i, x := range head {
		tail[i] = ChunkSample{At: x.At, Value: x.Value}
		if x.Bad {
			tail[i].Value = badNaN
		}
	}
	if len(tail) > 0 {
		return true, each(tail)
	}
	return true, nil
}

// NewestPointSamples returns the newest n samples of the device's point in
// [from, to] (Unix ms), ascending; found is false when the point has no
// history.
func (s *Store) NewestPointSamples(ctx context.Context, deviceID, pointID string, from, to int64, n int) (out []StoredSample, found bool, err error) {
	ref, ok, err := s.pointSeries(ctx, deviceID, pointID)
	if err != nil || !ok {
		return nil, false, s.Wrap("point samples", err)
	}
	ref, out, err = s.headSnapshot(ctx, deviceID, ref, from, to, true, n)
	if err != nil {
		return nil, true, s.Wrap("point samples", err)
	}
	slices.Reverse(out)
	if len(out) >= n {
		return out, true, nil
	}
	// Chunks newest first, each one's samples ascending: prepend until
	// there are n.
	err = s.scanChunks(ctx, ref, from, to, true, func(c []ChunkSample, lastErr *string) error {
		c = c[max(0, len(c)-(n-len(out))):]
		out = append(storedSamples(c, lastErr), out...)
		if len(out) >= n {
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, true, s.Wrap("point samples", err)
	}
	return out, true, nil
}

// LatestPointSamples returns the newest stored sample of each of the
// device's points that has history, by point id: the newest of its head
// samples (the device's head rows read newest first, until each series
// has one newer than the rows left), else its newest chunk's last.
func (s *Store) LatestPointSamples(ctx context.Context, deviceID string) (map[string]protocol.PointSample, error) {
	type series struct {
		point string
		ref   PointSeriesRef
		last  *StoredSample
	}
	byID := map[int64]*series{}
	readSeries := func() error {
		all, err := Collect(ctx, s.R, func(r Row) (*series, error) {
			var x series
			return &x, r.Scan(&x.point, &x.ref.ID, &x.ref.CompactedTo)
		}, `SELECT point, id, compacted_to FROM point_series WHERE device_id = ?`, deviceID)
		clear(byID)
		for _, x := range all {
			byID[x.ref.ID] = x
		}
		return err
	}
	for attempt := 0; ; attempt++ {
		if err := readSeries(); err != nil {
			return nil, s.Wrap("latest point samples", err)
		}
		missing := len(byID)
		err := Each(ctx, s.R, `SELECT at_min, at_max, samples FROM point_head WHERE device_id = ? ORDER BY at_max DESC`, []any{deviceID}, func(r Row) error {
			var atMin, atMax int64
			var b []byte
			if err := r.Scan(&atMin, &atMax, &b); err != nil {
				return err
			}
			if missing == 0 {
				done := true
				for _, x := range byID {
					done = done && x.last.At >= atMax
				}
				if done {
					return errStop
				}
			}
			return DecodeHead(b, atMin, func(h HeadSample) {
				x := byID[h.Series]
				if x == nil || h.At <= x.ref.CompactedTo || x.last != nil && x.last.At >= h.At {
					return
				}
				if x.last == nil {
					missing--
				}
				smp := h.StoredSample
				x.last = &smp
			})
		})
		if err != nil && !errors.Is(err, errStop) {
			return nil, s.Wrap("latest point samples", err)
		}
		// A compaction that committed meanwhile: read again.
		changed := false
		for _, x := range byID {
			c, err := s.compactedTo(ctx, x.ref.ID)
			if err != nil {
				return nil, s.Wrap("latest point samples", err)
			}
			if c != x.ref.CompactedTo {
				x.ref.CompactedTo, changed = c, true
			}
		}
		if !changed || attempt == 10 {
			break
		}
	}
	out := make(map[string]protocol.PointSample, len(byID))
	for _, x := range byID {
		if x.last == nil {
			if err := s.lastChunkSample(ctx, x.ref, func(smp StoredSample) { x.last = &smp }); err != nil {
				return nil, s.Wrap("latest point samples", err)
			}
		}
		if x.last != nil {
			out[x.point] = x.last.Protocol(x.point)
		}
	}
	return out, nil
}

// lastChunkSample calls set with the last sample of ref's newest chunk,
// if it has one.
func (s *Store) lastChunkSample(ctx context.Context, ref PointSeriesRef, set func(StoredSample)) error {
	var n int
	var lastErr *string
	var data []byte
	err := s.R.QueryRow(ctx, `SELECT count, last_error, data FROM point_chunks WHERE series_id = ? ORDER BY end_at DESC LIMIT 1`, ref.ID).Scan(&n, &lastErr, &data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	all, err := AppendPointChunk(nil, data, n)
	if err != nil {
		return err
	}
	if len(all) > 0 {
		set(all[len(all)-1].Stored(lastErr))
	}
	return nil
}

// Protocol is the sample as the agent sent it, of point pointID.
func (x StoredSample) Protocol(pointID string) protocol.PointSample {
	p := protocol.PointSample{Point: pointID, At: resource.T(time.UnixMilli(x.At))}
	if x.Bad {
		p.Error = x.Error
		if p.Error == "" {
			p.Error = "bad reading"
		}
	} else {
		p.Value = x.Value
	}
	return p
}
