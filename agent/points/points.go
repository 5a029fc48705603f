// Package points is the agent's point sampler (DESIGN.md "Points",
// "Sampling at the agent"): every round it takes the latest reading of
// each configured point from the channel manager (agent/iomgr, which asks
// the ports that are hw.PointReaders) and decides which readings become
// recorded samples. A point is considered at most once per intervalMs, and
// only for a reading newer than the last one considered; a sample is
// recorded when the value moved more than the point's deadband from the
// last recorded one, when the quality changed (a good reading after a bad
// one or the reverse, or another error cause), or when a minute passed
// since the last recorded sample, so that a flat line is still seen alive.
// A sample carries the time of its reading (the agent's clock). The
// samples of one round go to the spool as one record (split at the
// protocol's bounds), so they are acknowledged and stored exactly once as
// every record is. The latest state of each point (value, quality, error,
// time) goes out with each heartbeat; a point without a new reading for
// 3 × intervalMs is "stale".
package points

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/fleet/fleet/agent/iomgr"
	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/shared/tick"
)

// Sampler rules.
const (
	// DefaultRound is how often the sampler looks at the readings: the
	// shortest intervalMs a point may have.
	DefaultRound = serialcfg.MinPointIntervalMs * time.Millisecond
	// Heartbeat is the longest a point's recorded series stays flat: a
	// reading a minute after the last recorded sample is recorded whatever
	// its value.
	Heartbeat = time.Minute
	// StaleIntervals is how many intervals without a new reading make a
	// point stale.
	StaleIntervals = 3
)

// Options configures a Sampler.
type Options struct {
	// Source returns every channel's points and readings
	// (iomgr.Manager.Points).
	Source func() []iomgr.ChannelPoints
	// Record spools a record (the agent's record path).
	Record func(protocol.Record)
	// Now is the agent's clock (default time.Now).
	Now func() time.Time
	// Round is how often Run samples (default DefaultRound).
	Round  time.Duration
	Logger *slog.Logger
}

// point is the sampler's memory of one point.
type point struct {
	def serialcfg.PointDef
	// seen is when the sampler first saw the point, or last saw a new
	// reading of it (its clock); a point whose seen is 3 intervals old is
	// stale.
	seen time.Time
	// due is the sampler's time from which the point is considered again.
	due time.Time
	// last is the last reading considered (zero At: none yet).
	last hw.PointReading
	// recorded is the last reading recorded; has tells whether there is
	// one.
	recorded hw.PointReading
	has      bool
	// gen marks the points of the current configuration.
	gen uint64
}

// Sampler decides which readings are recorded. It is safe for concurrent
// use: Run records, the heartbeat reads States.
type Sampler struct {
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	points map[string]*point
	order  []string // point ids in channel, then configuration order
	gen    uint64
}

// New returns a Sampler; Run runs it.
func New(opts Options) *Sampler {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Round <= 0 {
		opts.Round = DefaultRound
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Sampler{opts: opts, log: opts.Logger, points: map[string]*point{}}
}

// Run samples every Round until ctx ends, recording each round's samples.
func (s *Sampler) Run(ctx context.Context) {
	tick.Every(ctx, s.opts.Round, func() { s.Record(s.Sample(s.opts.Now(), s.opts.Source())) })
}

// Record spools samples as point records of at most
// protocol.MaxPointSamples samples and protocol.MaxPointBatchBytes each.
func (s *Sampler) Record(samples []protocol.PointSample) {
	if len(samples) == 0 {
		return
	}
	for _, b := range protocol.SplitPointSamples(samples) {
		s.opts.Record(protocol.Record{Points: &protocol.PointBatch{Samples: b}})
	}
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		// The end-to-end tests compare what the relay stored against
		// these lines (test/e2e).
		for _, x := range samples {
			s.log.Debug("point sample recorded", "point", x.Point, "at", resource.FormatTime(x.At.Time), "value", x.Value, "error", x.Error)
		}
	}
}

// Sample takes one round of readings at now (the sampler's clock) and
// returns the samples to record, in channel, then configuration order.
// Points no longer configured are forgotten.
func (s *Sampler) Sample(now time.Time, chans []iomgr.ChannelPoints) []protocol.PointSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.order = s.order[:0]
	var out []protocol.PointSample
	for _, c := range chans {
		for _, d := range c.Defs {
			p := s.points[d.ID]
			if p == nil {
				p = &point{seen: now}
				s.points[d.ID] = p
			}
			if p.def != d {
				p.def, p.due = d, time.Time{} // a new interval or deadband applies at once
			}
			p.gen = s.gen
			s.order = append(s.order, d.ID)
			r, ok := reading(c.Readings, d.Name)
			if !ok || now.Before(p.due) || r.At.IsZero() || !r.At.After(p.last.At) {
				continue
			}
			p.last, p.seen, p.due = r, now, now.Add(interval(d))
			if !p.record(r) {
				continue
			}
			p.recorded, p.has = r, true
			out = append(out, sampleOf(d.ID, r))
		}
	}
	for id, p := range s.points {
		if p.gen != s.gen {
			delete(s.points, id)
		}
	}
	return out
}

// record reports whether reading r of p is recorded: the first, a change
// of quality or error cause, a good value more than the deadband from the
// last recorded one, or the first reading a minute after it.
func (p *point) record(r hw.PointReading) bool {
	last := p.recorded
	switch {
	case !p.has, r.Err != last.Err, r.At.Sub(last.At) >= Heartbeat:
		return true
	case r.Err != "":
		return false
	}
	return math.Abs(r.Value-last.Value) > p.def.Deadband || (math.IsNaN(r.Value) != math.IsNaN(last.Value))
}

func sampleOf(id string, r hw.PointReading) protocol.PointSample {
	s := protocol.PointSample{Point: id, At: resource.T(r.At), Error: r.Err}
	if r.Err == "" {
		s.Value = r.Value
	}
	return s
}

// States returns the latest state of each point of channel, in
// configuration order, seen at now: the last reading considered (its value
// when good, its error when bad), "stale" when there is none yet or no new
// one came for StaleIntervals × intervalMs (the last value kept).
func (s *Sampler) States(channel string, now time.Time) []protocol.PointState {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []protocol.PointState
	for _, id := range s.order {
		p := s.points[id]
		if p.def.ChannelID != channel {
			continue
		}
		st := protocol.PointState{Name: p.def.Name, Quality: serialcfg.QualityGood, Value: p.last.Value, Error: p.last.Err}
		if !p.last.At.IsZero() {
			st.At = resource.T(p.last.At)
		}
		if p.last.Err != "" {
			st.Quality, st.Value = serialcfg.QualityBad, 0
		}
		if p.last.At.IsZero() || now.Sub(p.seen) >= StaleIntervals*interval(p.def) {
			st.Quality = serialcfg.QualityStale
		}
		out = append(out, st)
	}
	return out
}

func interval(d serialcfg.PointDef) time.Duration {
	ms := d.IntervalMs
	if ms <= 0 {
		ms = serialcfg.DefaultPointIntervalMs
	}
	return time.Duration(ms) * time.Millisecond
}

// reading returns the reading of the point name.
func reading(rs []hw.PointReading, name string) (hw.PointReading, bool) {
	for _, r := range rs {
		if r.Name == name {
			return r, true
		}
	}
	return hw.PointReading{}, false
}
