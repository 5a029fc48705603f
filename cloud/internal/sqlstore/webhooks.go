package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/webhook"
)

// WebhookDeliveries reads the organization's most recent deliveries, newest
// first, each with its attempts; limit outside 1…1000 is 50.
func WebhookDeliveries(ctx context.Context, q Querier, orgID string, limit int) ([]cloud.DeliveryInfo, error) {
	if limit <= 0 || limit > 1000 {
		limit = 50
	}
	return deliveries(ctx, q, `WHERE org_id = ? ORDER BY seq DESC LIMIT ?`, orgID, limit)
}

// deliveries reads the deliveries the SQL tail selects (args its
// arguments), each with its attempts.
func deliveries(ctx context.Context, q Querier, tail string, args ...any) ([]cloud.DeliveryInfo, error) {
	out, err := Collect(ctx, q, func(r Row) (cloud.DeliveryInfo, error) {
		var d cloud.DeliveryInfo
		var next, created int64
		err := r.Scan(&d.Seq, &d.ID, &d.DeviceID, &d.Event, &d.URL, &d.State, &next, &d.LastError, &d.RedeliveryOf, &created, &d.Kind, &d.ChannelID)
		d.CreatedAt = time.UnixMilli(created).UTC()
		if d.State == string(webhook.StatePending) {
			t := time.UnixMilli(next).UTC()
			d.NextAttemptAt = &t
		}
		return d, err
	}, `SELECT seq, id, device_id, event, url, state, next_attempt_at, last_error, COALESCE(redelivery_of, ''), created_at, kind, channel_id
		FROM webhook_deliveries `+tail, args...)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Attempts, err = Collect(ctx, q, func(r Row) (cloud.DeliveryAttempt, error) {
			var a cloud.DeliveryAttempt
			var at int64
			err := r.Scan(&a.Attempt, &at, &a.StatusCode, &a.Error, &a.DurationMs)
			a.At = time.UnixMilli(at).UTC()
			return a, err
		}, `SELECT attempt, at, COALESCE(status_code, 0), error, duration_ms FROM webhook_attempts WHERE delivery_id = ? ORDER BY attempt`, out[i].ID)
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// DeliveryLog reads one page of the organization's delivery log with q
// (cloud.WebhookAdmin's): the deliveries f selects, newest first, and the
// cursors of the pages beside it. Each filter has an index of migration
// 0023 or webhook_deliveries_org, so a page reads in seq order from the
// cursor on.
func DeliveryLog(ctx context.Context, q Querier, orgID string, f cloud.DeliveryFilter) (cloud.DeliveryLogPage, error) {
	if err := f.Check(); err != nil {
		return cloud.DeliveryLogPage{}, err
	}
	where, args := `WHERE org_id = ?`, []any{orgID}
	for _, c := range []struct {
		col, v string
	}{{"state", string(f.State)}, {"event", f.Event}, {"device_id", f.DeviceID}} {
		if c.v != "" {
			where += ` AND ` + c.col + ` = ?`
			args = append(args, c.v)
		}
	}
	// One more than a page says whether there is a page beyond it.
	var page cloud.DeliveryLogPage
	var ds []cloud.DeliveryInfo
	var err error
	if f.After > 0 {
		ds, err = deliveries(ctx, q, where+` AND seq > ? ORDER BY seq LIMIT ?`, append(args, f.After, f.Limit+1)...)
		if len(ds) > f.Limit {
			ds = ds[:f.Limit]
			page.Newer = ds[len(ds)-1].Seq
		}
		slices.Reverse(ds)
		if len(ds) > 0 {
			page.Older = ds[len(ds)-1].Seq
		}
	} else {
		tail, targs := where+` ORDER BY seq DESC LIMIT ?`, append(args, f.Limit+1)
		if f.Before > 0 {
			tail, targs = where+` AND seq < ? ORDER BY seq DESC LIMIT ?`, append(args, f.Before, f.Limit+1)
		}
		ds, err = deliveries(ctx, q, tail, targs...)
		if len(ds) > f.Limit {
			ds = ds[:f.Limit]
			page.Older = ds[len(ds)-1].Seq
		}
		if f.Before > 0 && len(ds) > 0 {
			page.Newer = ds[0].Seq
		}
	}
	if err != nil {
		return cloud.DeliveryLogPage{}, err
	}
	page.Deliveries = cloud.SummarizeDeliveries(ds)
	return page, nil
}

// OrgNotFound is ENOTFOUND for organization id.
func OrgNotFound(id string) error {
	return cloud.Errorf(cloud.ENOTFOUND, "organization %q not found", id)
}

// SetOrgAlertWebhook sets (or, with "", clears) the organization's alert
// webhook URL with q, after webhook.ValidateURL (cloud.Store's).
func SetOrgAlertWebhook(ctx context.Context, q Querier, orgID, url string) error {
	url = strings.TrimSpace(url)
	if url != "" {
		if err := webhook.ValidateURL("url", url); err != nil {
			return err
		}
	}
	n, err := q.Exec(ctx, `UPDATE orgs SET alert_webhook_url = ? WHERE id = ?`, url, orgID)
	if err == nil && n == 0 {
		return OrgNotFound(orgID)
	}
	return err
}

// RotateOrgSecret gives the organization a fresh signing secret
// (webhook.NewSecret) with q and returns it (cloud.Store's). Every attempt
// from then on is signed with it; during grace (0 to cloud.MaxSecretGrace
// after now) the previous secret also signs the Standard Webhooks header,
// so receivers can switch without refusing deliveries.
func RotateOrgSecret(ctx context.Context, q Querier, orgID string, grace time.Duration, now time.Time) (string, error) {
	if grace < 0 || grace > cloud.MaxSecretGrace {
		return "", cloud.Errorf(cloud.EINVALID, "grace must be between 0 and %s", cloud.MaxSecretGrace)
	}
	secret := webhook.NewSecret()
	n, err := q.Exec(ctx, `UPDATE orgs SET previous_webhook_secret = CASE WHEN CAST(? AS BIGINT) > 0 THEN webhook_secret ELSE '' END,
		previous_secret_until = ?, webhook_secret = ? WHERE id = ?`, grace.Milliseconds(), now.Add(grace).UnixMilli(), secret, orgID)
	if err != nil {
		return "", err
	}
	if n == 0 {
		return "", OrgNotFound(orgID)
	}
	return secret, nil
}

// DeviceNotFound is ENOTFOUND for device id.
func DeviceNotFound(id string) error {
	return cloud.Errorf(cloud.ENOTFOUND, "device %q not found", id)
}

// OutboxReads are the reads of the webhook outbox (webhook.Store) that
// both stores make alike (OrgSecrets, Forwarding, Pending);
// each store's outbox embeds them.
type OutboxReads struct{ *Store }

// OrgSecrets returns the organization's signing secret and, until its
// grace period ends, the previous one (webhook.Store's).
func (s OutboxReads) OrgSecrets(ctx context.Context, orgID string) (webhook.Secrets, error) {
	var sec webhook.Secrets
	var until int64
	err := s.R.QueryRow(ctx, `SELECT webhook_secret, previous_webhook_secret, previous_secret_until FROM orgs WHERE id = ?`, orgID).
		Scan(&sec.Current, &sec.Previous, &until)
	if errors.Is(err, sql.ErrNoRows) {
		return webhook.Secrets{}, OrgNotFound(orgID)
	}
	if err != nil {
		return webhook.Secrets{}, s.Wrap("org secret", err)
	}
	if until <= s.nowMs() {
		sec.Previous = ""
	}
	return sec, nil
}

// Forwarding returns the device's organization and its signal-forwarding
// URL when forwarding is enabled (webhook.Store's).
func (s OutboxReads) Forwarding(ctx context.Context, deviceID string) (orgID, url string, err error) {
	var u sql.NullString
	var enabled sql.NullBool
	err = s.R.QueryRow(ctx, `SELECT d.org_id, s.webhook_url, s.webhook_enabled FROM devices d
		LEFT JOIN serial_state s ON s.device_id = d.id WHERE d.id = ?`, deviceID).Scan(&orgID, &u, &enabled)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", DeviceNotFound(deviceID)
	}
	if err != nil {
		return "", "", s.Wrap("forwarding", err)
	}
	if !enabled.Bool || !u.Valid {
		return orgID, "", nil
	}
	return orgID, u.String, nil
}

// DeliveryColumns are the columns ScanDelivery reads, in order.
const DeliveryColumns = `seq, id, org_id, device_id, event, url, body, state, attempts, next_attempt_at, created_at, kind, channel_id`

// ScanDelivery reads a row of DeliveryColumns.
func ScanDelivery(r Row) (*webhook.Delivery, error) {
	var d webhook.Delivery
	var state string
	var next, created int64
	err := r.Scan(&d.Seq, &d.ID, &d.OrgID, &d.DeviceID, &d.Event, &d.URL, &d.Body, &state, &d.Attempts, &next, &created, &d.Kind, &d.ChannelID)
	d.State, d.NextAttemptAt, d.CreatedAt = webhook.State(state), time.UnixMilli(next).UTC(), time.UnixMilli(created).UTC()
	return &d, err
}

// Pending returns up to limit pending deliveries with seq > after, in
// order, and the outbox's highest seq, from one statement (one snapshot,
// one round trip).
func (s OutboxReads) Pending(ctx context.Context, after int64, limit int) ([]*webhook.Delivery, int64, error) {
	var out []*webhook.Delivery
	var maxSeq int64
	err := Each(ctx, s.R, `SELECT m.max_seq, d.seq, d.id, d.org_id, d.device_id, d.event, d.url, d.body, d.state, d.attempts, d.next_attempt_at, d.created_at, d.kind, d.channel_id
		FROM (SELECT COALESCE(MAX(seq), 0) AS max_seq FROM webhook_deliveries) m
		LEFT JOIN (SELECT `+DeliveryColumns+` FROM webhook_deliveries WHERE state = 'pending' AND seq > ? ORDER BY seq LIMIT ?) d ON true
		ORDER BY d.seq`, []any{after, limit}, func(r Row) error {
		var seq, attempts, next, created sql.NullInt64
		var id, org, dev, event, url, state, kind, channel sql.NullString
		var body []byte
		if err := r.Scan(&maxSeq, &seq, &id, &org, &dev, &event, &url, &body, &state, &attempts, &next, &created, &kind, &channel); err != nil || !seq.Valid {
			return err // !seq.Valid: no pending delivery, the row only carries max_seq
		}
		out = append(out, &webhook.Delivery{Seq: seq.Int64, ID: id.String, OrgID: org.String, DeviceID: dev.String, Event: event.String,
			URL: url.String, Body: body, State: webhook.State(state.String), Attempts: int(attempts.Int64),
			NextAttemptAt: time.UnixMilli(next.Int64).UTC(), CreatedAt: time.UnixMilli(created.Int64).UTC(),
			Kind: kind.String, ChannelID: channel.String})
		return nil
	})
	if err != nil {
		return nil, 0, s.Wrap("pending deliveries", err)
	}
	return out, maxSeq, nil
}

// DeliveryNotFound is ENOTFOUND for webhook delivery id.
func DeliveryNotFound(id string) error {
	return cloud.Errorf(cloud.ENOTFOUND, "delivery %q not found", id)
}

// OrgDelivery checks with q that delivery id is the organization's
// (DeliveryNotFound otherwise).
func OrgDelivery(ctx context.Context, q Querier, orgID, id string) error {
	var n int
	if err := q.QueryRow(ctx, `SELECT COUNT(*) FROM webhook_deliveries WHERE id = ? AND org_id = ?`, id, orgID).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return DeliveryNotFound(id)
	}
	return nil
}

// WebhookSettings reads with q the organization's alert webhook URL and
// signing secret, and until when the previous secret still signs (after
// now; cloud.PanelStore's).
func WebhookSettings(ctx context.Context, q Querier, orgID string, now time.Time) (cloud.WebhookSettings, error) {
	var out cloud.WebhookSettings
	var prev string
	var until int64
	err := q.QueryRow(ctx, `SELECT alert_webhook_url, webhook_secret, previous_webhook_secret, previous_secret_until FROM orgs WHERE id = ?`, orgID).
		Scan(&out.AlertURL, &out.Secret, &prev, &until)
	if errors.Is(err, sql.ErrNoRows) {
		return cloud.WebhookSettings{}, OrgNotFound(orgID)
	}
	if err != nil {
		return cloud.WebhookSettings{}, err
	}
	if prev != "" && until > now.UnixMilli() {
		out.PreviousValidUntil = time.UnixMilli(until).UTC()
	}
	return out, nil
}
