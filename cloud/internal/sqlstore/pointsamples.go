package sqlstore

import (
	"context"
	"math"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// PointTables is what PointService reads of a store's point history
// (pointhistory.go).
type PointTables interface {
	// PointHistory calls each with every sample of the device's point in
	// [from, to] (Unix ms), ascending, a slice at a time (reused; a bad
	// reading is a NaN); found is false when the point has no history.
	PointHistory(ctx context.Context, deviceID, pointID string, from, to int64, each func([]ChunkSample) error) (found bool, err error)
	// NewestPointSamples returns the newest n samples of the point in
	// [from, to], ascending.
	NewestPointSamples(ctx context.Context, deviceID, pointID string, from, to int64, n int) (out []StoredSample, found bool, err error)
}

// Limits of a samples query (DESIGN.md "Points": limit 1..10000, default
// 1000).
const (
	DefaultPointLimit = 1000
	MaxPointLimit     = 10000
)

// PointNotFound is the ENOTFOUND of an unknown point.
func PointNotFound(id string) error {
	return cloud.Errorf(cloud.ENOTFOUND, "point %q not found", id)
}

// pointSamples implements PointService.PointSamples: the point is one the
// device's channels configure or one with history; raw samples (the
// newest Limit) or buckets (the newest Limit) of its good samples.
func (s *PointService) pointSamples(ctx context.Context, orgID, deviceID, pointID string, q cloud.PointQuery) (cloud.PointSeries, error) {
	out := cloud.PointSeries{Raw: []resource.PointSample{}, Buckets: []resource.PointBucket{},
		Window: resource.Window{From: resource.T(q.From), To: resource.T(q.To)}}
	if q.From.After(q.To) {
		return out, cloud.Errorf(cloud.EINVALID, "from must not be after to")
	}
	if q.Step < 0 {
		return out, cloud.Errorf(cloud.EINVALID, "step must be positive")
	}
	name, err := s.Tables.DeviceModel(ctx, orgID, deviceID)
	if err != nil {
		return out, err
	}
	m, err := cloud.SerialModel(name)
	if err != nil {
		return out, err
	}
	def, configured := PointDef{}, false
	if chID, _, ok := serialcfg.SplitPointID(pointID); ok {
		if ch, ok := m.Channel(chID); ok {
			config, err := s.Tables.ChannelConfig(ctx, deviceID, chID)
			if err != nil {
				return out, err
			}
			cfg, err := (&cloud.StoredChannel{Config: config}).DesiredConfig(ch)
			if err != nil {
				return out, err
			}
			for _, d := range cfg.PointDefs(chID) {
				if d.ID == pointID {
					def, configured = PointDef(d), true
				}
			}
		}
	}
	limit := cloud.ListLimit(q.Limit, DefaultPointLimit, MaxPointLimit)
	from, to := q.From.UnixMilli(), q.To.UnixMilli()
	var found bool
	if q.Step == 0 {
		var raw []StoredSample
		raw, found, err = s.Tables.NewestPointSamples(ctx, deviceID, pointID, from, to, limit+1)
		if err != nil {
			return out, err
		}
		cut := len(raw) > limit
		if cut {
			raw = raw[len(raw)-limit:]
			out.Window.From = resource.T(time.UnixMilli(raw[0].At))
		}
		for _, x := range raw {
			out.Raw = append(out.Raw, resource.PointSample{At: resource.T(time.UnixMilli(x.At)), Value: def.Show(x)})
		}
	} else {
		step := q.Step.Milliseconds()
		if step <= 0 {
			return out, cloud.Errorf(cloud.EINVALID, "step must be at least 1ms")
		}
		b := Bucketer{Step: step}
		found, err = s.Tables.PointHistory(ctx, deviceID, pointID, from, to, func(xs []ChunkSample) error {
			b.Add(xs)
			return nil
		})
		if err != nil {
			return out, err
		}
		out.Buckets = b.Buckets()
		if len(out.Buckets) > limit {
			out.Buckets = out.Buckets[len(out.Buckets)-limit:]
			out.Window.From = out.Buckets[0].At
		}
	}
	if !found && !configured {
		return out, PointNotFound(pointID)
	}
	return out, nil
}

// PointDef is a configured point, as the samples route shows its values.
type PointDef serialcfg.PointDef

// Show is a sample's value in the API: nil for a bad reading, a boolean
// for a point of type bool, else the number.
func (d PointDef) Show(x StoredSample) any {
	switch {
	case x.Bad || math.IsNaN(x.Value) || math.IsInf(x.Value, 0):
		return nil
	case d.Type == "bool":
		return x.Value != 0
	}
	return x.Value
}

// Bucketer folds ascending samples into `step` buckets aligned to
// multiples of Step (ms) since the Unix epoch: min, max, avg, last and
// count of each bucket's good samples; a bucket without one is left out.
type Bucketer struct {
	Step int64
	out  []resource.PointBucket
	sum  float64
	at   int64 // the start of the last bucket
}

// Add folds in the next samples (a NaN is a bad reading).
func (b *Bucketer) Add(xs []ChunkSample) {
	for _, x := range xs {
		v := x.Value
		if v != v || math.IsInf(v, 0) {
			continue
		}
		if len(b.out) == 0 || x.At < b.at || x.At >= b.at+b.Step {
			start := x.At - ((x.At%b.Step)+b.Step)%b.Step // floor, negative times too
			b.finish()
			b.at, b.sum = start, 0
			b.out = append(b.out, resource.PointBucket{At: resource.T(time.UnixMilli(start)), Min: v, Max: v})
		}
		k := &b.out[len(b.out)-1]
		k.Min, k.Max, k.Last = min(k.Min, v), max(k.Max, v), v
		k.Count++
		b.sum += v
	}
}

// finish sets the average of the last bucket.
func (b *Bucketer) finish() {
	if n := len(b.out); n > 0 && b.out[n-1].Count > 0 {
		b.out[n-1].Avg = b.sum / float64(b.out[n-1].Count)
	}
}

// Buckets returns the buckets folded so far, ascending.
func (b *Bucketer) Buckets() []resource.PointBucket {
	b.finish()
	if b.out == nil {
		return []resource.PointBucket{}
	}
	return b.out
}
