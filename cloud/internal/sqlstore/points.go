package sqlstore

import (
	"context"
	"errors"

	"github.com/fleet/fleet/cloud"
)

// PointService is the cloud.PointService on a store's tables.
type PointService struct {
	Tables Tables
}

var errPointsTODO = errors.New("points: not implemented yet")

// PointSamples implements cloud.PointService.
func (s *PointService) PointSamples(ctx context.Context, orgID, deviceID, pointID string, q cloud.PointQuery) (cloud.PointSeries, error) {
	return s.pointSamples(ctx, orgID, deviceID, pointID, q)
}
