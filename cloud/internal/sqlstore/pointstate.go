package sqlstore

import (
	"context"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// PointStateTables is what Points reads besides the serial tables: the
// newest stored sample of each of a device's points that has history, by
// point id.
type PointStateTables interface {
	LatestPointSamples(ctx context.Context, deviceID string) (map[string]protocol.PointSample, error)
}

// Points implements cloud.PointService: every point of every channel of
// the device's model, in catalog order then configuration order, as the
// channel's desired configuration names it, in the newer of the state its
// heartbeats last reported and its newest stored sample (stale when the
// device is not ONLINE).
func (s *PointService) Points(ctx context.Context, orgID, deviceID string, now time.Time) ([]resource.Point, error) {
	m, online, err := serialModelStatus(ctx, s.Tables, orgID, deviceID)
	if err != nil {
		return nil, err
	}
	_, rows, err := s.Tables.SerialRows(ctx, deviceID)
	if err != nil {
		return nil, err
	}
	latest, err := s.Tables.LatestPointSamples(ctx, deviceID)
	if err != nil {
		return nil, err
	}
	out := []resource.Point{}
	for _, c := range m.Channels {
		row := rows[c.ID]
		cfg, err := row.DesiredConfig(c)
		if err != nil {
			return nil, err
		}
		pts, err := cloud.ChannelPoints(c.ID, cfg, row, latest, online)
		if err != nil {
			return nil, err
		}
		out = append(out, pts...)
	}
	return out, nil
}
