package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/notify"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// Alert notifications are written to the outbox (webhook_deliveries) in
// the transaction that changes the alert, so that a relay dying after the
// commit loses none and sends none twice: the dispatchers take them from
// the outbox (SQLite's poller after its cursor, PostgreSQL's Claim of
// unleased rows), and the AlertObserver told after the commit only wakes
// them.

// insertDeliverySQL inserts a pending delivery (arguments: id,
// organization, device, event, URL, body, next attempt and creation time
// in Unix milliseconds, kind, channel).
const insertDeliverySQL = `INSERT INTO webhook_deliveries (id, org_id, device_id, event, url, body, state, attempts, next_attempt_at, created_at, kind, channel_id)
	VALUES (?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?)`

// QueueAlertNotifications writes in tx the outbox deliveries of an alert
// change (event: alert.opened, alert.acknowledged, alert.resolved or
// notify.EventReminder) made at at: the organization's alert webhook (the
// spec's body, signed; not for reminders) and, for opened, resolved and
// reminders, one delivery per notification channel of r.Notify whose
// minSeverity the alert reaches, unless a silence of the organization
// covers the device at at. It returns how many deliveries it wrote (the
// outbox lane writes it; every path that opens, resolves or reminds calls
// it inside its transaction). For channel events it sets the alert's
// notified_at to at and, when it opens, whether a silence covered it.
// r.OrgID is the alert's organization; ids in r.Notify that are not the
// organization's channels are ignored.
func QueueAlertNotifications(ctx context.Context, tx Querier, event string, a resource.Alert, r cloud.AlertRule, at time.Time) (int, error) {
	at = at.UTC().Truncate(time.Millisecond)
	if a.Payload == nil {
		a.Payload = json.RawMessage(`{}`)
	}
	n := 0
	put := func(kind, channel, url string, body []byte) error {
		_, err := tx.Exec(ctx, insertDeliverySQL, ids.New(), r.OrgID, a.DeviceID, event, url, body, at.UnixMilli(), at.UnixMilli(), kind, channel)
		if err == nil {
			n++
		}
		return err
	}
	hook, err := json.Marshal(resource.AlertWebhook{Event: event, DeviceID: a.DeviceID, At: resource.T(at), Alert: a})
	if err != nil {
		return 0, err
	}
	if event != notify.EventReminder {
		var url string
		err := tx.QueryRow(ctx, `SELECT alert_webhook_url FROM orgs WHERE id = ?`, r.OrgID).Scan(&url)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return 0, fmt.Errorf("alert webhook URL: %w", err)
		}
		// An invalid URL (set before it was checked) is not sent, as before.
		if url != "" && webhook.ValidateURL("url", url) == nil {
			if err := put("", "", url, hook); err != nil {
				return 0, fmt.Errorf("alert webhook delivery: %w", err)
			}
		}
	}
	switch event {
	case notify.EventOpened, notify.EventResolved, notify.EventReminder:
	default:
		return n, nil
	}
	chans, err := alertChannels(ctx, tx, r.OrgID, r.Notify, a.Severity)
	if err != nil {
		return 0, err
	}
	silenced := false
	if len(chans) > 0 || event == notify.EventOpened {
		var name, tags string
		err := tx.QueryRow(ctx, `SELECT name, tags FROM devices WHERE id = ? AND org_id = ?`, a.DeviceID, r.OrgID).Scan(&name, &tags)
		if err != nil {
			return 0, fmt.Errorf("alert device: %w", err)
		}
		if silenced, err = deviceSilenced(ctx, tx, r.OrgID, a.DeviceID, tags, at); err != nil {
			return 0, err
		}
		if !silenced && len(chans) > 0 {
			m := alertMessage(event, r, a, name, at)
			for _, c := range chans {
				kind, url, body := c.Kind, c.Target, hook
				if c.Kind != resource.ChannelWebhook {
					m.ChannelID = c.ID
					if body, err = m.Encode(); err != nil {
						return 0, err
					}
					if c.Kind == resource.ChannelEmail {
						url = "mailto:" + c.Target
					}
				}
				if err := put(kind, c.ID, url, body); err != nil {
					return 0, fmt.Errorf("channel delivery: %w", err)
				}
			}
		}
	}
	if event == notify.EventOpened {
		_, err = tx.Exec(ctx, `UPDATE alerts SET notified_at = ?, silenced = ? WHERE id = ?`, at.UnixMilli(), silenced, a.ID)
	} else {
		_, err = tx.Exec(ctx, `UPDATE alerts SET notified_at = ? WHERE id = ?`, at.UnixMilli(), a.ID)
	}
	if err != nil {
		return 0, fmt.Errorf("alert notified: %w", err)
	}
	return n, nil
}

// alertChannels reads the organization's channels among ids, in the order
// of ids, whose minimum severity sev reaches.
func alertChannels(ctx context.Context, tx Querier, orgID string, ids []string, sev resource.Severity) ([]resource.NotificationChannel, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	marks := strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ")
	args := []any{orgID}
	for _, id := range ids {
		args = append(args, id)
	}
	byID := map[string]resource.NotificationChannel{}
	err := Each(ctx, tx, `SELECT id, kind, target, min_severity FROM notification_channels WHERE org_id = ? AND id IN (`+marks+`)`, args, func(r Row) error {
		var c resource.NotificationChannel
		var min string
		err := r.Scan(&c.ID, &c.Kind, &c.Target, &min)
		c.MinSeverity = resource.Severity(min)
		byID[c.ID] = c
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("notification channels: %w", err)
	}
	var out []resource.NotificationChannel
	for _, id := range ids {
		c, ok := byID[id]
		if ok && cloud.SeverityRank(sev) >= cloud.SeverityRank(c.MinSeverity) {
			out = append(out, c)
			delete(byID, id) // once, even when named twice
		}
	}
	return out, nil
}

// deviceSilenced reports whether a silence of the organization covers the
// device (its id and tags, a JSON array) at at.
func deviceSilenced(ctx context.Context, tx Querier, orgID, deviceID, tagsJSON string, at time.Time) (bool, error) {
	var tags []string
	if err := json.Unmarshal([]byte(tagsJSON), &tags); err != nil {
		return false, fmt.Errorf("device tags: %w", err)
	}
	silenced := false
	err := Each(ctx, tx, `SELECT scope FROM silences WHERE org_id = ? AND ended_at IS NULL AND to_at > ? AND from_at <= ?`,
		[]any{orgID, at.UnixMilli(), at.UnixMilli()}, func(r Row) error {
			var raw string
			if err := r.Scan(&raw); err != nil {
				return err
			}
			var scope resource.RuleScope
			if err := json.Unmarshal([]byte(raw), &scope); err != nil {
				return fmt.Errorf("silence scope: %w", err)
			}
			silenced = silenced || cloud.InScope(scope, deviceID, tags)
			return nil
		})
	if err != nil {
		return false, fmt.Errorf("silences: %w", err)
	}
	return silenced, nil
}

// alertMessage is what the channels of an alert's change are told: the
// device, the rule, the alert's message and, from a threshold alert's
// payload, what crossed what.
func alertMessage(event string, r cloud.AlertRule, a resource.Alert, deviceName string, at time.Time) notify.Message {
	var p struct {
		Source    string   `json:"source"`
		Value     *float64 `json:"value"`
		Threshold *float64 `json:"threshold"`
		Unit      string   `json:"unit"`
	}
	_ = json.Unmarshal(a.Payload, &p) // a payload without them (offline, status, event rules) names none
	return notify.Message{Event: event, OrgID: r.OrgID, AlertID: a.ID, DeviceID: a.DeviceID, DeviceName: deviceName,
		RuleID: r.ID, RuleName: r.Name, Severity: a.Severity, State: string(a.State), Text: a.Message,
		Source: p.Source, Value: p.Value, Threshold: p.Threshold, Unit: p.Unit, At: at}
}

// notifyRule reads in tx the organization's rule id (deleted or not).
func notifyRule(ctx context.Context, tx Querier, orgID, id string) (cloud.AlertRule, error) {
	r, err := ScanRule(tx.QueryRow(ctx, `SELECT `+RuleColumns+` FROM alert_rules WHERE id = ? AND org_id = ?`, id, orgID))
	if err != nil {
		return r, fmt.Errorf("alert rule %s: %w", id, err)
	}
	return r, nil
}

// queueNotifications is QueueAlertNotifications in tx of t, telling the
// relays sharing the database of what it queued.
func queueNotifications(ctx context.Context, t AlertTables, tx Querier, event string, a resource.Alert, r cloud.AlertRule, at time.Time) error {
	n, err := QueueAlertNotifications(ctx, tx, event, a, r, at)
	if err != nil || n == 0 {
		return err
	}
	return t.OutboxQueued(ctx, tx)
}

// OutboxQueued implements AlertTables.
func (s *Store) OutboxQueued(ctx context.Context, tx Querier) error {
	return s.changed(ctx, tx, ChangeOutbox, "")
}

// Remind implements cloud.AlertEngineStore: up to limit ACTIVE alerts (not
// acknowledged, not resolved) whose live, enabled rule repeats and that
// last notified at least that long before now notify again
// (notify.EventReminder), each in its own transaction, which checks
// again that the alert is still due (so that relays reminding at once
// remind once) and moves its notified_at to now. It returns how many
// alerts it reminded of.
func (s AlertEngineStore) Remind(ctx context.Context, now time.Time, limit int) (int, error) {
	now = now.UTC().Truncate(time.Millisecond)
	nowMs := now.UnixMilli()
	type due struct{ id, orgID string }
	// notified_at <= now - MinRuleRepeat lets the index of ACTIVE alerts
	// by notified_at skip the alerts that cannot be due.
	cands, err := Collect(ctx, s.R, func(r Row) (due, error) {
		var d due
		return d, r.Scan(&d.id, &d.orgID)
	}, `SELECT a.id, a.org_id FROM alerts a JOIN alert_rules r ON r.id = a.rule_id
		WHERE a.state = 'ACTIVE' AND a.notified_at <= ? AND r.repeat_every_ms > 0 AND r.deleted_at IS NULL AND r.enabled
		  AND a.notified_at + r.repeat_every_ms <= ?
		ORDER BY a.notified_at LIMIT ?`, nowMs-cloud.MinRuleRepeat.Milliseconds(), nowMs, limit)
	if err != nil {
		return 0, s.Wrap("alerts to remind", err)
	}
	n := 0
	for _, c := range cands {
		reminded := false
		err := s.AlertTx(ctx, nowMs, "remind", func(tx Querier) error {
			k, err := tx.Exec(ctx, `UPDATE alerts SET notified_at = ? WHERE id = ? AND org_id = ? AND state = 'ACTIVE'
				AND notified_at + (SELECT r.repeat_every_ms FROM alert_rules r
				  WHERE r.id = alerts.rule_id AND r.repeat_every_ms > 0 AND r.deleted_at IS NULL AND r.enabled) <= ?`,
				nowMs, c.id, c.orgID, nowMs)
			if err != nil || k == 0 {
				return err
			}
			a, err := ScanAlert(tx.QueryRow(ctx, `SELECT `+AlertColumns+` FROM alerts WHERE id = ? AND org_id = ?`, c.id, c.orgID))
			if err != nil {
				return err
			}
			r, err := notifyRule(ctx, tx, c.orgID, a.RuleID)
			if err != nil {
				return err
			}
			reminded = true
			return queueNotifications(ctx, s.Store, tx, notify.EventReminder, a, r, now)
		})
		if err != nil {
			return n, err
		}
		if reminded {
			n++
		}
	}
	return n, nil
}

// TestChannel implements cloud.RuleService: one notify.EventTest message
// to the organization's channel, queued in the outbox (a webhook channel
// receives the message signed), and the delivery's id.
func (s *RuleService) TestChannel(ctx context.Context, orgID, id string) (string, error) {
	now := s.Tables.Now().UTC().Truncate(time.Millisecond)
	deliveryID := ids.New()
	err := s.Tables.AlertTx(ctx, now.UnixMilli(), "test channel", func(tx Querier) error {
		var kind, target string
		err := tx.QueryRow(ctx, `SELECT kind, target FROM notification_channels WHERE id = ? AND org_id = ?`, id, orgID).Scan(&kind, &target)
		if errors.Is(err, sql.ErrNoRows) {
			return channelNotFound(id)
		}
		if err != nil {
			return err
		}
		body, err := notify.Message{Event: notify.EventTest, OrgID: orgID, ChannelID: id, At: now,
			Text: "Test notification from Fleet: this channel receives alert notifications."}.Encode()
		if err != nil {
			return err
		}
		url := target
		if kind == resource.ChannelEmail {
			url = "mailto:" + target
		}
		if _, err := tx.Exec(ctx, insertDeliverySQL, deliveryID, orgID, "", notify.EventTest, url, body, now.UnixMilli(), now.UnixMilli(), kind, id); err != nil {
			return err
		}
		return s.Tables.OutboxQueued(ctx, tx)
	})
	if err != nil {
		return "", err
	}
	return deliveryID, nil
}
