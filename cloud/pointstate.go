package cloud

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// The current state of points (DESIGN.md "Points"): what the agent's
// heartbeats report of each point of a channel (protocol.PointState) is kept
// with the channel's telemetry (StoredChannel.Points) and shown for each
// point of the channel's desired configuration. The relay decides one
// quality itself: a point of a device that is not ONLINE is "stale".

// storedPoint is a point state as a store keeps it: short keys, the time in
// Unix milliseconds (0: never read), a value that is not a finite number
// (JSON has none) as NaN set.
type storedPoint struct {
	Name    string  `json:"n"`
	Value   float64 `json:"v"`
	NaN     bool    `json:"nan,omitempty"`
	Quality string  `json:"q"`
	Error   string  `json:"e,omitempty"`
	At      int64   `json:"t,omitempty"`
}

// EncodePointStates returns the stored form of a channel's reported point
// states: a JSON array, "" for none.
func EncodePointStates(states []protocol.PointState) string {
	if len(states) == 0 {
		return ""
	}
	rows := make([]storedPoint, len(states))
	for i, s := range states {
		rows[i] = storedPoint{Name: s.Name, Value: s.Value, Quality: s.Quality, Error: s.Error}
		if math.IsNaN(s.Value) || math.IsInf(s.Value, 0) {
			rows[i].Value, rows[i].NaN = 0, true
		}
		if !s.At.IsZero() {
			rows[i].At = s.At.UnixMilli()
		}
	}
	b, err := json.Marshal(rows)
	if err != nil {
		// Nothing in storedPoint can fail to encode.
		panic(fmt.Sprintf("cloud: encode point states: %v", err))
	}
	return string(b)
}

// DecodePointStates reads what EncodePointStates wrote ("" is none).
func DecodePointStates(stored string) ([]protocol.PointState, error) {
	if stored == "" {
		return nil, nil
	}
	var rows []storedPoint
	if err := json.Unmarshal([]byte(stored), &rows); err != nil {
		return nil, fmt.Errorf("stored point states: %w", err)
	}
	out := make([]protocol.PointState, len(rows))
	for i, r := range rows {
		out[i] = protocol.PointState{Name: r.Name, Value: r.Value, Quality: r.Quality, Error: r.Error}
		if r.NaN {
			out[i].Value = math.NaN()
		}
		if r.At != 0 {
			out[i].At = resource.T(time.UnixMilli(r.At))
		}
	}
	return out, nil
}

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
