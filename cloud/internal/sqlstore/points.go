package sqlstore

import (
	"context"

	"github.com/fleet/fleet/cloud"
)

// PointService is the cloud.PointService on a store's tables.
type PointService struct {
	Tables Tables
}

// PointSamples implements cloud.PointService.
func (s *PointService) PointSamples(ctx context.Context, orgID, deviceID, pointID string, q cloud.PointQuery) (cloud.PointSeries, error) {
	return s.pointSamples(ctx, orgID, deviceID, pointID, q)
}
