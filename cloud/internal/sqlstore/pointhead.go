package sqlstore

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/fleet/fleet/shared/protocol"
)

// The head (point_head) holds one row per stored record of a device: its
// samples' oldest and newest times and the samples themselves as a blob
// (EncodeHead), appended in rowid order. A record lands in one place of
// the table (its end) instead of one per sample, and readers find a
// device's rows by (device_id, at_max).

// HeadSample is one sample of a head row: its series and the sample.
type HeadSample struct {
	Series int64
	StoredSample
}

// Blob layout, per sample: uvarint series, uvarint at minus the row's
// at_min, a kind byte (0: a value, 8 bytes little-endian float64 follow;
// 1: a bad reading, uvarint length and its cause follow).
const (
	headGood byte = 0
	headBad  byte = 1
)

// EncodeHead appends xs to dst as a head blob whose times are relative to
// atMin (the smallest At of xs).
func EncodeHead(dst []byte, atMin int64, xs []HeadSample) []byte {
	for _, x := range xs {
		dst = binary.AppendUvarint(dst, uint64(x.Series))
		dst = binary.AppendUvarint(dst, uint64(x.At-atMin))
		if x.Bad {
			dst = append(dst, headBad)
			dst = binary.AppendUvarint(dst, uint64(len(x.Error)))
			dst = append(dst, x.Error...)
		} else {
			dst = append(dst, headGood)
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(x.Value))
		}
	}
	return dst
}

var errHeadBlob = errors.New("point head: corrupt samples")

// DecodeHead calls each with the samples of a head blob, in order.
func DecodeHead(b []byte, atMin int64, each func(HeadSample)) error {
	for len(b) > 0 {
		var x HeadSample
		s, n := binary.Uvarint(b)
		if n <= 0 {
			return errHeadBlob
		}
		b = b[n:]
		d, n := binary.Uvarint(b)
		if n <= 0 || len(b) < n+1 {
			return errHeadBlob
		}
		x.Series, x.At = int64(s), atMin+int64(d)
		kind := b[n]
		b = b[n+1:]
		switch kind {
		case headGood:
			if len(b) < 8 {
				return errHeadBlob
			}
			x.Value = math.Float64frombits(binary.LittleEndian.Uint64(b))
			x.Bad = x.Value != x.Value
			b = b[8:]
		case headBad:
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return errHeadBlob
			}
			x.Bad, x.Error = true, string(b[n:n+int(l)])
			b = b[n+int(l):]
		default:
			return errHeadBlob
		}
		each(x)
	}
	return nil
}

// HeadRow is a head row to insert: a device's record's samples.
type HeadRow struct {
	DeviceID     string
	AtMin, AtMax int64
	Samples      []byte
}

// InsertHeadSQL inserts a HeadRow (device_id, at_min, at_max, samples).
const InsertHeadSQL = `INSERT INTO point_head (device_id, at_min, at_max, samples) VALUES (?, ?, ?, ?)`

// NewHeadRow picks, of a device's samples (ids: their series), those to
// store, in q's transaction: not carried twice, not in the device's head
// already (a resend), not at or before their series' compacted_to (a
// resend of samples already compacted); keep is their indexes in pts and
// ok false when there are none.
func NewHeadRow(ctx context.Context, q Querier, deviceID string, ids []int64, pts []*protocol.PointSample) (row HeadRow, keep []int, ok bool, err error) {
	if len(pts) == 0 {
		return row, nil, false, nil
	}
	type key struct{ series, at int64 }
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, p := range pts {
		at := p.At.UnixMilli()
		lo, hi = min(lo, at), max(hi, at)
	}
	seen := make(map[key]bool, len(pts))
	// The device's head rows the samples' times overlap: none for a new
	// record (its samples are newer than the rows before it).
	err = Each(ctx, q, `SELECT at_min, samples FROM point_head WHERE device_id = ? AND at_max >= ? AND at_min <= ?`, []any{deviceID, lo, hi}, func(r Row) error {
		var atMin int64
		var b []byte
		if err := r.Scan(&atMin, &b); err != nil {
			return err
		}
		return DecodeHead(b, atMin, func(x HeadSample) { seen[key{x.Series, x.At}] = true })
	})
	if err != nil {
		return row, nil, false, fmt.Errorf("point head of %s: %w", deviceID, err)
	}
	// The device's series compacted past the oldest sample (none, but
	// for a late record or a resend).
	compacted := map[int64]int64{}
	err = Each(ctx, q, `SELECT id, compacted_to FROM point_series WHERE device_id = ? AND compacted_to >= ?`, []any{deviceID, lo}, func(r Row) error {
		var id, c int64
		err := r.Scan(&id, &c)
		compacted[id] = c
		return err
	})
	if err != nil {
		return row, nil, false, fmt.Errorf("point series of %s: %w", deviceID, err)
	}
	xs := make([]HeadSample, 0, len(pts))
	row = HeadRow{DeviceID: deviceID, AtMin: math.MaxInt64, AtMax: math.MinInt64}
	for i, p := range pts {
		k := key{ids[i], p.At.UnixMilli()}
		if c, ok := compacted[k.series]; seen[k] || ok && k.at <= c {
			continue
		}
		seen[k] = true
		x := HeadSample{Series: k.series, StoredSample: StoredSample{At: k.at, Value: p.Value}}
		if p.Error != "" {
			x.Value, x.Bad, x.Error = 0, true, p.Error
		}
		xs = append(xs, x)
		keep = append(keep, i)
		row.AtMin, row.AtMax = min(row.AtMin, k.at), max(row.AtMax, k.at)
	}
	if len(xs) == 0 {
		return row, nil, false, nil
	}
	row.Samples = EncodeHead(make([]byte, 0, 20*len(xs)), row.AtMin, xs)
	return row, keep, true, nil
}

// headSamples returns ref's head samples in [from, to] after its
// compacted_to, ascending (or descending, at most limit when limit > 0).
func (s *Store) headSamples(ctx context.Context, deviceID string, ref PointSeriesRef, from, to int64, desc bool, limit int) ([]StoredSample, error) {
	from = max(from, ref.CompactedTo+1)
	if from > to {
		return nil, nil
	}
	var out []StoredSample
	oldest := int64(math.MaxInt64)
	err := Each(ctx, s.R, `SELECT at_min, at_max, samples FROM point_head WHERE device_id = ? AND at_max >= ? AND at_min <= ? ORDER BY at_max DESC`, []any{deviceID, from, to}, func(r Row) error {
		var atMin, atMax int64
		var b []byte
		if err := r.Scan(&atMin, &atMax, &b); err != nil {
			return err
		}
		// Rows come newest end first: once limit samples are all newer
		// than this row's newest, no further row has a newer one.
		if limit > 0 && len(out) >= limit && oldest > atMax {
			return errStop
		}
		return DecodeHead(b, atMin, func(x HeadSample) {
			if x.Series == ref.ID && x.At >= from && x.At <= to {
				out = append(out, x.StoredSample)
				oldest = min(oldest, x.At)
			}
		})
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b StoredSample) int { return cmp.Compare(a.At, b.At) })
	out = slices.CompactFunc(out, func(a, b StoredSample) bool { return a.At == b.At })
	if desc {
		slices.Reverse(out)
		if limit > 0 && len(out) > limit {
			out = out[:limit]
		}
	}
	return out, nil
}

// inList is "(?, ?, …)" for n arguments.
func inList(n int) string {
	return "(" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ")"
}
