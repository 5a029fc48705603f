package sqlstore

import (
	"context"
	"hash/fnv"
	"slices"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

var _ cloud.LiveReader = PanelStore{}

// liveDevicesSQL reads every device of an organization as the live updates
// compare them (through devices_org_created; a heartbeat rewrites
// last_seen in place, so no index can be on it).
const liveDevicesSQL = `SELECT id, status, last_seen FROM devices WHERE org_id = ?`

// liveAlertsSQL reads an organization's open alerts (alerts_org_state_created).
const liveAlertsSQL = `SELECT id, device_id, state, severity FROM alerts WHERE org_id = ? AND state IN ('ACTIVE', 'ACKNOWLEDGED')`

// liveChannelsSQL reads the reported channel state of inChunk devices of
// the organization (arguments: org, then inChunk ids).
var liveChannelsSQL = `SELECT id, channel_reports FROM devices WHERE org_id = ? AND id IN (` + inMarks + `) AND channel_reports IS NOT NULL`

// liveEventsSQL reads the newest event of inChunk devices of the
// organization (events_device_created, newest first, one row each).
var liveEventsSQL = `SELECT d.id, (SELECT e.id FROM events e WHERE e.device_id = d.id AND e.org_id = d.org_id
		ORDER BY e.created_at DESC, e.id DESC LIMIT 1)
	FROM devices d WHERE d.org_id = ? AND d.id IN (` + inMarks + `)`

// LiveState reads what the panel's live updates compare (cloud.LiveState):
// the organization's devices and open alerts, and for the watched devices
// of the organization their channels' fingerprint and newest event.
func (p PanelStore) LiveState(ctx context.Context, orgID string, watched []string) (cloud.LiveState, error) {
	st := cloud.LiveState{Devices: map[string]cloud.LiveDevice{}, OpenAlerts: map[string]cloud.LiveAlert{}, Watched: map[string]cloud.LiveWatched{}}
	if len(watched) > cloud.MaxLiveWatched {
		return st, cloud.Errorf(cloud.EINVALID, "at most %d watched devices", cloud.MaxLiveWatched)
	}
	err := Each(ctx, p.R, liveDevicesSQL, []any{orgID}, func(r Row) error {
		var id, status string
		var seen *int64
		if err := r.Scan(&id, &status, &seen); err != nil {
			return err
		}
		st.Devices[id] = cloud.LiveDevice{Status: resource.DeviceStatus(status), LastSeen: MsTime(seen)}
		return nil
	})
	if err != nil {
		return st, p.Wrap("live devices", err)
	}
	err = Each(ctx, p.R, liveAlertsSQL, []any{orgID}, func(r Row) error {
		var id, dev, state, sev string
		if err := r.Scan(&id, &dev, &state, &sev); err != nil {
			return err
		}
		st.OpenAlerts[id] = cloud.LiveAlert{DeviceID: dev, State: resource.AlertState(state), Severity: resource.Severity(sev)}
		return nil
	})
	if err != nil {
		return st, p.Wrap("live alerts", err)
	}
	for chunk := range slices.Chunk(watched, inChunk) {
		if err := p.liveWatched(ctx, orgID, chunk, st.Watched); err != nil {
			return st, p.Wrap("live watched", err)
		}
	}
	return st, nil
}

// liveWatched reads one chunk of watched devices into out.
func (p PanelStore) liveWatched(ctx context.Context, orgID string, chunk []string, out map[string]cloud.LiveWatched) error {
	args := make([]any, 0, inChunk+1)
	args = append(args, orgID)
	for i := range inChunk {
		v := ""
		if i < len(chunk) {
			v = chunk[i]
		}
		args = append(args, v)
	}
	err := Each(ctx, p.R, liveEventsSQL, args, func(r Row) error {
		var id string
		var newest *string
		if err := r.Scan(&id, &newest); err != nil {
			return err
		}
		w := out[id]
		if newest != nil {
			w.NewestEvent = *newest
		}
		out[id] = w
		return nil
	})
	if err != nil {
		return err
	}
	// The fingerprint is the stored form's: it changes whenever a
	// reported state does (the form is canonical: sorted, written by one
	// encoder).
	return Each(ctx, p.R, liveChannelsSQL, args, func(r Row) error {
		var dev, reports string
		if err := r.Scan(&dev, &reports); err != nil {
			return err
		}
		if w, ok := out[dev]; ok {
			h := fnv.New64a()
			h.Write([]byte(reports))
			w.Channels = h.Sum64()
			out[dev] = w
		}
		return nil
	})
}
