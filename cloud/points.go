package cloud

import (
	"context"
	"time"

	"github.com/fleet/fleet/shared/resource"
)

// PointService reads a device's points (DESIGN.md "Points"): what its
// channels' configurations name, with the latest state the agent reported
// and the history of recorded samples. A device whose model lacks serial.io
// is ECAPABILITY; an unknown device or point is ENOTFOUND.
type PointService interface {
	// Points lists the device's points in channel (catalog) order, then
	// configuration order, each with its latest state seen at now.
	Points(ctx context.Context, orgID, deviceID string, now time.Time) ([]resource.Point, error)
	// PointSamples returns a point's samples in q's window: raw samples
	// (q.Step 0) or one bucket per non-empty step.
	PointSamples(ctx context.Context, orgID, deviceID, pointID string, q PointQuery) (PointSeries, error)
}

// PointQuery selects samples of one point: captured in [From, To], at most
// Limit rows (the newest Limit when more, as metrics), raw when Step is 0,
// else bucketed by Step (buckets aligned to multiples of Step since the
// Unix epoch).
type PointQuery struct {
	From, To time.Time
	Limit    int
	Step     time.Duration
}

// PointSeries is the answer to a PointQuery: Raw (Step 0) or Buckets, and
// the effective window (From moved up to the first row returned when the
// newest Limit rows were cut from more).
type PointSeries struct {
	Raw     []resource.PointSample
	Buckets []resource.PointBucket
	Window  resource.Window
}
