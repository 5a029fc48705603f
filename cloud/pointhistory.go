package cloud

import (
	"context"
	"time"
)

// DefaultPointRetention is how long point history is kept by default
// (--point-retention).
const DefaultPointRetention = 30 * 24 * time.Hour

// PointHistory is the upkeep of point history (DESIGN.md "Points",
// Storage): the agent writers store each sample as a row of the head; the
// compactor folds a series' older samples into compressed chunks, which
// readers see the same; retention deletes what is older than it keeps.
// One relay of a cluster runs them at a time (a lease).
type PointHistory interface {
	// CompactPoints folds into chunks the head samples that c selects and
	// returns how many it folded.
	CompactPoints(ctx context.Context, c PointCompaction) (int64, error)
	// SweepPoints deletes the samples captured before now minus keep and
	// returns how many it deleted.
	SweepPoints(ctx context.Context, keep time.Duration) (int64, error)
}

// PointCompaction selects the head samples a compaction folds: those of
// a series captured before Before, once the series' oldest head sample is
// older than Before minus Wait (so that a slowly sampled series is not
// folded two samples at a time; a chunk grows by appending to it until it
// holds its maximum).
type PointCompaction struct {
	Before time.Time
	Wait   time.Duration
}

// Default compaction: samples a minute old (the batches of that minute
// still in flight find the head), series whose oldest sample waited five
// minutes.
const (
	PointCompactGrace = time.Minute
	PointCompactWait  = 5 * time.Minute
)

// DefaultPointCompaction is the compaction the relay runs at now.
func DefaultPointCompaction(now time.Time) PointCompaction {
	return PointCompaction{Before: now.Add(-PointCompactGrace), Wait: PointCompactWait}
}
