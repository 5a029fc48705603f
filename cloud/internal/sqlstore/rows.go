// Package sqlstore holds what the two SQL stores (cloud/sqlite and
// cloud/postgres) compute the same way: the columns of the domain tables
// and the reading of a row into its domain type, times being Unix
// milliseconds (NULL or 0: none) in both schemas. It does no I/O: each store
// runs its own queries and hands the rows here.
package sqlstore

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// Row is one row of a result: *sql.Row, *sql.Rows and pgx.Row all are.
type Row interface{ Scan(dest ...any) error }

// MsTime converts nullable Unix milliseconds to a UTC time; NULL and 0 are
// the zero time.
func MsTime(ms *int64) time.Time {
	if ms == nil || *ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(*ms).UTC()
}

// NullMs is t in Unix milliseconds, or nil (NULL) for the zero time.
func NullMs(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	ms := t.UnixMilli()
	return &ms
}

// DeviceColumns are the columns ScanDevice reads, in order.
const DeviceColumns = `id, name, serial_number, status, model, firmware_version, last_seen, ip_address, location, created_at, tags`

// ScanDevice reads a row of DeviceColumns, then extra columns into extra.
func ScanDevice(row Row, extra ...any) (resource.Device, error) {
	var d resource.Device
	var status string
	var lastSeen *int64
	var created int64
	var tags string
	dest := append([]any{&d.ID, &d.Name, &d.SerialNumber, &status, &d.Model, &d.FirmwareVersion, &lastSeen, &d.IPAddress, &d.Location, &created, &tags}, extra...)
	if err := row.Scan(dest...); err != nil {
		return d, err
	}
	d.Tags = DecodeTags(tags)
	d.Status = resource.DeviceStatus(status)
	d.LastSeen = resource.TP(MsTime(lastSeen))
	d.CreatedAt = resource.T(time.UnixMilli(created))
	return d, nil
}

// AlertColumns are the columns ScanAlert reads, in order.
const AlertColumns = `id, state, severity, message, payload, device_id, rule_id, acknowledged_at, resolved_at, created_at`

// ScanAlert reads a row of AlertColumns.
func ScanAlert(row Row) (resource.Alert, error) {
	var a resource.Alert
	var state, sev, payload string
	var acked, resolved *int64
	var created int64
	if err := row.Scan(&a.ID, &state, &sev, &a.Message, &payload, &a.DeviceID, &a.RuleID, &acked, &resolved, &created); err != nil {
		return a, err
	}
	a.State, a.Severity, a.Payload = resource.AlertState(state), resource.Severity(sev), json.RawMessage(payload)
	a.AcknowledgedAt, a.ResolvedAt = resource.TP(MsTime(acked)), resource.TP(MsTime(resolved))
	a.CreatedAt = resource.T(time.UnixMilli(created))
	return a, nil
}

// EventColumns are the columns ScanEvent reads, in order.
const EventColumns = `id, type, severity, message, data, created_at`

// ScanEvent reads a row of EventColumns.
func ScanEvent(row Row) (resource.Event, error) {
	var e resource.Event
	var sev, data string
	var at int64
	if err := row.Scan(&e.ID, &e.Type, &sev, &e.Message, &data, &at); err != nil {
		return e, err
	}
	e.Severity, e.Data, e.CreatedAt = resource.Severity(sev), json.RawMessage(data), resource.T(time.UnixMilli(at))
	return e, nil
}

// UserColumns are the columns ScanUser reads, in order.
const UserColumns = `id, org_id, email, role, password_hash, disabled_at, password_changed_at, created_at, must_change_password`

// ScanUser reads a row of UserColumns.
func ScanUser(row Row) (cloud.User, error) {
	var u cloud.User
	var role string
	var disabled, changed *int64
	var created int64
	if err := row.Scan(&u.ID, &u.OrgID, &u.Email, &role, &u.PasswordHash, &disabled, &changed, &created, &u.MustChangePassword); err != nil {
		return u, err
	}
	u.Role = cloud.Role(role)
	u.DisabledAt, u.PasswordChangedAt = MsTime(disabled), MsTime(changed)
	u.CreatedAt = time.UnixMilli(created).UTC()
	return u, nil
}

// KeyColumns are the columns ScanKey reads, in order.
const KeyColumns = `id, org_id, name, hash, scopes, expires_at, revoked_at, created_at`

// ScanKey reads a row of KeyColumns; the scopes are stored comma-separated.
func ScanKey(row Row) (*cloud.APIKey, error) {
	var k cloud.APIKey
	var scopes string
	var expires, revoked *int64
	var created int64
	if err := row.Scan(&k.ID, &k.OrgID, &k.Name, &k.Hash, &scopes, &expires, &revoked, &created); err != nil {
		return nil, err
	}
	if scopes != "" {
		k.Scopes = strings.Split(scopes, ",")
	}
	k.ExpiresAt, k.RevokedAt, k.CreatedAt = MsTime(expires), MsTime(revoked), MsTime(&created)
	return &k, nil
}

// SampleColumns are the columns ScanSample reads, in order.
const SampleColumns = `captured_at, cpu_pct, mem_pct, disk_used_pct, temp_cpu, load_avg1, missing`

// ScanSample reads a row of SampleColumns.
func ScanSample(row Row) (resource.MetricSample, error) {
	var m resource.MetricSample
	var at, missing int64
	if err := row.Scan(&at, &m.CPUPct, &m.MemPct, &m.DiskUsedPct, &m.TempCPU, &m.LoadAvg1, &missing); err != nil {
		return m, err
	}
	m.CapturedAt = resource.T(time.UnixMilli(at))
	m.Missing = resource.MissingNames(missing)
	return m, nil
}

// OrgColumns are the columns ScanOrg reads, in order.
const OrgColumns = `id, name, webhook_secret, alert_webhook_url, created_at`

// ScanOrg reads a row of OrgColumns.
func ScanOrg(row Row) (cloud.Org, error) {
	var o cloud.Org
	var created int64
	if err := row.Scan(&o.ID, &o.Name, &o.WebhookSecret, &o.AlertWebhookURL, &created); err != nil {
		return o, err
	}
	o.CreatedAt = MsTime(&created)
	return o, nil
}

// MetricsResponse answers a metrics query from its samples newest first, of
// which it asked limit+1: the newest limit in ascending order, in the
// query's window, whose From moves to the first sample returned when more
// fell in it.
func MetricsResponse(q cloud.MetricsQuery, limit int, newestFirst []resource.MetricSample) resource.MetricsResponse {
	out := resource.MetricsResponse{Data: []resource.MetricSample{}, Window: resource.Window{From: resource.T(q.From), To: resource.T(q.To)}}
	truncated := len(newestFirst) > limit
	if truncated {
		newestFirst = newestFirst[:limit]
	}
	out.Data = append(out.Data, newestFirst...)
	slices.Reverse(out.Data)
	if truncated {
		out.Window.From = out.Data[0].CapturedAt
	}
	return out
}

// ScanString reads a row of one text column (an id, a name).
func ScanString(row Row) (string, error) {
	var s string
	err := row.Scan(&s)
	return s, err
}

// StatusCount is a row of `SELECT status, COUNT(*) … GROUP BY status` over
// devices.
type StatusCount struct {
	Status resource.DeviceStatus
	N      int
}

// ScanStatusCount reads a StatusCount.
func ScanStatusCount(row Row) (StatusCount, error) {
	var c StatusCount
	var status string
	err := row.Scan(&status, &c.N)
	c.Status = resource.DeviceStatus(status)
	return c, err
}

// CountsByStatus is the map of counts.
func CountsByStatus(counts []StatusCount) map[resource.DeviceStatus]int {
	out := make(map[resource.DeviceStatus]int, len(resource.DeviceStatuses))
	for _, c := range counts {
		out[c.Status] = c.N
	}
	return out
}

// NewAlert is the ACTIVE alert that o opens, created at o.At to the
// millisecond (as stored), with an empty object for no payload.
func NewAlert(o alert.Opening) resource.Alert {
	payload := o.Payload
	if len(payload) == 0 {
		payload = json.RawMessage(`{}`)
	}
	return resource.Alert{ID: ids.New(), State: resource.AlertActive, Severity: o.Rule.Severity, Message: o.Message, Payload: payload,
		DeviceID: o.DeviceID, RuleID: o.Rule.ID, CreatedAt: resource.T(o.At.UTC().Truncate(time.Millisecond))}
}

// OpenedEvent is the alert.<rule> event stored with alert a that o opened.
func OpenedEvent(o alert.Opening, a resource.Alert) (resource.Event, error) {
	data, err := alert.EventData(a.Payload, a.ID, o.Rule)
	if err != nil {
		return resource.Event{}, err
	}
	return resource.Event{ID: ids.New(), Type: o.Rule.EventType(), Severity: o.Rule.Severity, Message: o.Message, Data: data, CreatedAt: a.CreatedAt}, nil
}

// ResolvedEvent is the alert.resolved event stored when alert a of rule r
// is resolved at at.
func ResolvedEvent(a resource.Alert, r alert.Rule, message string, at time.Time) (resource.Event, error) {
	data, err := json.Marshal(map[string]any{"alertId": a.ID, "ruleId": r.ID, "rule": r.Name})
	if err != nil {
		return resource.Event{}, err
	}
	return resource.Event{ID: ids.New(), Type: alert.EventResolved, Severity: resource.SeverityInfo, Message: message, Data: data, CreatedAt: resource.T(at)}, nil
}
