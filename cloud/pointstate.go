package cloud

import (
	"fmt"
	"math"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// The current state of points (DESIGN.md "Points"): what the agent's
// heartbeats report of each point of a channel (protocol.PointState) is kept
// with the channel's telemetry (StoredChannel.Points) and shown for each
// point of the channel's desired configuration. The relay decides one
// quality itself: a point of a device that is not ONLINE is "stale".

// PointValue is a point's value as the API shows it: a boolean for type
// "bool" (0 is false), else the number; nil for a value that is not a
// finite number.
func PointValue(typ string, v float64) any {
	switch {
	case typ == "bool":
		return v != 0
	case math.IsNaN(v) || math.IsInf(v, 0):
		return nil
	}
	return v
}

// PointOf is point def in the state st the agent reported (nil: never
// reported): never reported, it has no value and no time and is stale; a
// bad reading has no value; a device that is not online has stale points.
func PointOf(def serialcfg.PointDef, st *protocol.PointState, online bool) resource.Point {
	p := resource.Point{ID: def.ID, ChannelID: def.ChannelID, Name: def.Name, Type: def.Type, Unit: def.Unit, Quality: serialcfg.QualityStale}
	if st == nil {
		return p
	}
	p.Quality, p.Error, p.At = st.Quality, st.Error, resource.TP(st.At.Time)
	if p.Quality == "" {
		p.Quality = serialcfg.QualityGood
	}
	if p.Quality != serialcfg.QualityBad && p.At != nil {
		p.Value = PointValue(def.Type, st.Value)
	}
	if !online {
		p.Quality = serialcfg.QualityStale
	}
	return p
}

// ChannelPoints returns the points of the channel's desired configuration
// cfg, in configuration order, each in the state stored in row (nil:
// nothing stored) or, when newer, in the state of its newest stored sample
// in latest (by point id; nil: none looked at).
func ChannelPoints(channelID string, cfg serialcfg.Config, row *StoredChannel, latest map[string]protocol.PointSample, online bool) ([]resource.Point, error) {
	defs := cfg.PointDefs(channelID)
	if len(defs) == 0 {
		return nil, nil
	}
	var states []protocol.PointState
	if row != nil {
		var err error
		if states, err = DecodePointStates(row.Points); err != nil {
			return nil, fmt.Errorf("channel %s: %w", channelID, err)
		}
	}
	out := make([]resource.Point, len(defs))
	for i, d := range defs {
		st := FindPointState(states, d.Name, i)
		if smp, ok := latest[d.ID]; ok && (st == nil || smp.At.After(st.At.Time)) {
			st = sampleState(d.Name, smp)
		}
		out[i] = PointOf(d, st, online)
	}
	return out, nil
}

// sampleState is a recorded sample of point name as a point state: good, or
// bad with its cause.
func sampleState(name string, s protocol.PointSample) *protocol.PointState {
	st := &protocol.PointState{Name: name, Value: s.Value, Quality: serialcfg.QualityGood, At: s.At}
	if s.Error != "" {
		st.Value, st.Quality, st.Error = 0, serialcfg.QualityBad, s.Error
	}
	return st
}

// FindPointState returns the state of point name in states, nil when none;
// hint is where it is likely to be (the point's index in the
// configuration, the order the agent reports them in).
func FindPointState(states []protocol.PointState, name string, hint int) *protocol.PointState {
	if hint >= 0 && hint < len(states) && states[hint].Name == name {
		return &states[hint]
	}
	for i := range states {
		if states[i].Name == name {
			return &states[i]
		}
	}
	return nil
}

// PointRefs returns points as the entries of a channel's points in
// telemetry and channel detail ([] for none).
func PointRefs(points []resource.Point) []resource.PointRef {
	out := make([]resource.PointRef, len(points))
	for i, p := range points {
		out[i] = PointRefOf(p)
	}
	return out
}

// PointRefOf is point p as an entry of a channel's points.
func PointRefOf(p resource.Point) resource.PointRef {
	return resource.PointRef{ID: p.ID, Value: p.Value, Unit: p.Unit, Quality: p.Quality, At: p.At}
}
