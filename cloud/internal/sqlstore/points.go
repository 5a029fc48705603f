package sqlstore

import (
	"context"
	"errors"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// PointService is the cloud.PointService on a store's tables.
type PointService struct {
	Tables Tables
}

var errPointsTODO = errors.New("points: not implemented yet")

// Points implements cloud.PointService.
func (s *PointService) Points(ctx context.Context, orgID, deviceID string, now time.Time) ([]resource.Point, error) {
	return nil, errPointsTODO
}

// PointSamples implements cloud.PointService.
func (s *PointService) PointSamples(ctx context.Context, orgID, deviceID, pointID string, q cloud.PointQuery) (cloud.PointSeries, error) {
	return s.pointSamples(ctx, orgID, deviceID, pointID, q)
}
