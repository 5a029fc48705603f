package postgres

import (
	"context"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/resource"
)

// hbJob is a queued heartbeat.
type hbJob struct {
	in     agentlink.HeartbeatIn
	serial bool // the model has serial I/O
	out    agentlink.HeartbeatOut
	done   func(agentlink.HeartbeatOut, error)
	status *resource.Event // the device.status_changed event it stored
}

// Heartbeat implements agentlink.Store: the heartbeat is queued and stored
// with the others of its transaction (applyHeartbeats); done hears the
// outcome after the commit, in queue order.
func (s *AgentStore) Heartbeat(ctx context.Context, in agentlink.HeartbeatIn, done func(agentlink.HeartbeatOut, error)) error {
	model, _ := catalog.Lookup(in.Device.Model)
	hb := &hbJob{in: in, serial: model.Has(resource.CapabilitySerialIO), done: done}
	return s.w.enqueue(ctx, &ingestJob{hb: hb})
}

// applyHeartbeats stores a transaction's heartbeats: a heartbeat that
// changes the status updates its device row on its own first; then the
// heartbeats of each session are merged (agentlink.HeartbeatMerge) and
// written with one statement per table (rows given as arrays, unnest),
// devices in id order so that relays writing the same rows lock them in
// the same order.
func (s *AgentStore) applyHeartbeats(ctx context.Context, tx pgx.Tx, hbs []*hbJob, errs []error) error {
	m := &s.merge
	defer m.Reset()
	// The status changes' device.status_changed events go in with the
	// heartbeats' own events (one statement).
	var evOrg, evDev []string
	var evs []resource.Event
	for i, hb := range hbs {
		in := &hb.in
		hb.out, hb.status = agentlink.HeartbeatOut{}, nil
		if in.Status != in.PrevStatus {
			if in.Deadline.IsZero() {
				errs[i] = storeError("postgres: heartbeat %s: status change without a deadline", in.Device.ID)
				m.Skip()
				continue
			}
			n, err := pgConn{tx}.Exec(ctx, sqlstore.HeartbeatStatusSQL, sqlstore.HeartbeatStatusArgs(in)...)
			if err != nil {
				return storeError("postgres: heartbeat %s: %w", in.Device.ID, err)
			}
			if n == 0 {
				errs[i] = agentlink.ErrSessionGone
				m.Skip()
				continue
			}
			hb.status = sqlstore.StatusEvent(in.PrevStatus, in.Status, in.At)
			evOrg, evDev, evs = append(evOrg, in.Device.OrgID), append(evDev, in.Device.ID), append(evs, *hb.status)
		}
		m.Add(in, hb.serial)
	}
	groups := m.Groups
	if len(groups) == 0 {
		return nil
	}
	sort.Slice(groups, func(a, b int) bool { return groups[a].DeviceID < groups[b].DeviceID })

	// Device rows: last seen, address, deadline; RETURNING names the
	// sessions that still own their device.
	n := len(groups)
	id, session, ip := make([]string, n), make([]string, n), make([]string, n)
	seen, deadline, telemetry := make([]int64, n), make([]*int64, n), make([]*int64, n)
	reports := make([]*string, n)
	for i, g := range groups {
		in := &hbs[g.Last].in
		id[i], session[i], ip[i], seen[i], deadline[i] = g.DeviceID, g.Session, in.IPAddress, in.At.UnixMilli(), timeMs(g.Deadline)
		if g.SerialAt >= 0 {
			// The serial state's telemetryAt: the group's last heartbeat
			// with serial signals (migration 0025).
			telemetry[i] = timeMs(hbs[g.SerialAt].in.At)
		}
		if g.Reports != "" {
			// Every channel's state after the group (migration 0027).
			reports[i] = &groups[i].Reports
		}
	}
	rows, err := tx.Query(ctx, `UPDATE devices d SET last_seen = v.seen, ip_address = v.ip, agent_deadline = COALESCE(v.deadline, d.agent_deadline),
		telemetry_at = COALESCE(v.telemetry, d.telemetry_at), channel_reports = COALESCE(v.reports, d.channel_reports)
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::bigint[], $6::bigint[], $7::text[]) AS v(id, session, seen, ip, deadline, telemetry, reports)
		WHERE d.id = v.id AND d.agent_session = v.session RETURNING v.id, v.session`, id, session, seen, ip, deadline, telemetry, reports)
	if err != nil {
		return storeError("postgres: heartbeats: %w", err)
	}
	matched := map[[2]string]bool{}
	for rows.Next() {
		var k [2]string
		if err := rows.Scan(&k[0], &k[1]); err != nil {
			rows.Close()
			return storeError("postgres: heartbeats: %w", err)
		}
		matched[k] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return storeError("postgres: heartbeats: %w", err)
	}

	var serialID []string
	var applied []int64
	for _, g := range groups {
		if !matched[[2]string{g.DeviceID, g.Session}] {
			for i := g.First; i >= 0; i = m.Next(i) {
				if errs[i] == nil {
					errs[i] = agentlink.ErrSessionGone
				}
			}
			continue
		}
		if g.SerialAt >= 0 {
			in := &hbs[g.SerialAt].in
			serialID, applied = append(serialID, g.DeviceID), append(applied, in.AppliedVersion)
		}
		for i := g.First; i >= 0; i = m.Next(i) {
			hb := hbs[i]
			in := &hb.in
			hb.out.Change = agentlink.StatusChange{Device: in.Device, From: in.PrevStatus, To: in.Status, StatusEvent: hb.status}
			if e := in.Event; e != nil && errs[i] == nil {
				evOrg, evDev, evs = append(evOrg, in.Device.OrgID), append(evDev, in.Device.ID), append(evs, *e)
			}
		}
	}
	if len(serialID) > 0 {
		// The heartbeat's time went into the device row (telemetry_at);
		// the serial state row is rewritten only when the applied version
		// moved (migration 0025).
		if _, err := tx.Exec(ctx, `UPDATE serial_state s SET applied_version = v.applied
			FROM unnest($1::text[], $2::bigint[]) AS v(id, applied) WHERE s.device_id = v.id AND s.applied_version IS DISTINCT FROM v.applied`, serialID, applied); err != nil {
			return storeError("postgres: heartbeats (serial): %w", err)
		}
	}
	if len(evs) > 0 {
		if _, err := insertEventRows(ctx, tx, evOrg, evDev, evs); err != nil {
			return err
		}
	}
	return nil
}

// insertEventRows inserts events (of the devices devs[i], organizations
// orgs[i]) in one statement, resends ignored, and returns the ids it
// inserted.
func insertEventRows(ctx context.Context, tx pgx.Tx, orgs, devs []string, evs []resource.Event) (map[string]bool, error) {
	n := len(evs)
	id, typ, sev, msg, data := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	at := make([]int64, n)
	for i, e := range evs {
		d := string(e.Data)
		if d == "" {
			d = "{}"
		}
		id[i], typ[i], sev[i], msg[i], data[i], at[i] = e.ID, e.Type, string(e.Severity), e.Message, d, e.CreatedAt.UnixMilli()
	}
	rows, err := tx.Query(ctx, `INSERT INTO events (id, org_id, device_id, type, severity, message, data, created_at)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[])
		ON CONFLICT DO NOTHING RETURNING id`, id, orgs, devs, typ, sev, msg, data, at)
	if err != nil {
		return nil, storeError("postgres: insert events: %w", err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, storeError("postgres: insert events: %w", err)
	}
	out := make(map[string]bool, len(got))
	for _, g := range got {
		out[g] = true
	}
	return out, nil
}
