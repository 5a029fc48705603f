package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// The rows of alert rules, notification channels and silences (migration
// 0012_rules): a rule's scope, condition and notify list are stored as the
// API's JSON (shared/resource) and compiled when read (cloud.CompileRule).

// RuleColumns are the columns ScanRule reads, in order.
const RuleColumns = `id, org_id, name, severity, enabled, scope, cond, notify, repeat_every_ms, created_at, updated_at`

// ScanRule reads a row of RuleColumns and compiles it.
func ScanRule(row Row) (cloud.AlertRule, error) {
	var r resource.AlertRule
	var orgID, sev, scope, cond, notify string
	var repeat, created, updated int64
	if err := row.Scan(&r.ID, &orgID, &r.Name, &sev, &r.Enabled, &scope, &cond, &notify, &repeat, &created, &updated); err != nil {
		return cloud.AlertRule{}, err
	}
	r.Severity = resource.Severity(sev)
	r.RepeatEvery = cloud.FormatRuleDuration(time.Duration(repeat) * time.Millisecond)
	r.CreatedAt, r.UpdatedAt = resource.T(time.UnixMilli(created).UTC()), resource.T(time.UnixMilli(updated).UTC())
	for _, f := range []struct {
		what string
		s    string
		into any
	}{{"scope", scope, &r.Scope}, {"condition", cond, &r.Condition}, {"notify", notify, &r.Notify}} {
		if err := json.Unmarshal([]byte(f.s), f.into); err != nil {
			return cloud.AlertRule{}, fmt.Errorf("rule %s: stored %s: %w", r.ID, f.what, err)
		}
	}
	c, err := cloud.CompileRule(orgID, r)
	if err != nil {
		return cloud.AlertRule{}, fmt.Errorf("rule %s: stored rule: %w", r.ID, err)
	}
	return c, nil
}

// ruleRow is a compiled rule's stored columns: scope, cond, notify (JSON)
// and repeat_every_ms.
func ruleRow(r cloud.AlertRule) (scope, cond, notify string, repeatMs int64, err error) {
	res := r.Resource()
	var b [3][]byte
	for i, v := range []any{res.Scope, res.Condition, res.Notify} {
		if b[i], err = json.Marshal(v); err != nil {
			return "", "", "", 0, err
		}
	}
	return string(b[0]), string(b[1]), string(b[2]), r.Repeat.Milliseconds(), nil
}

// insertRuleSQL stores a rule unless the organization has a rule of its
// name (arguments: insertRuleArgs).
const insertRuleSQL = `INSERT OR IGNORE INTO alert_rules (id, org_id, name, severity, enabled, scope, cond, notify, repeat_every_ms, created_at, updated_at)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// insertRule stores r (its id, organization and times set) with q; false
// when the organization already has a rule of its name.
func insertRule(ctx context.Context, q Querier, r cloud.AlertRule) (bool, error) {
	scope, cond, notify, repeat, err := ruleRow(r)
	if err != nil {
		return false, err
	}
	n, err := q.Exec(ctx, insertRuleSQL, r.ID, r.OrgID, r.Name, string(r.Severity), r.Enabled, scope, cond, notify, repeat,
		r.CreatedAt.UnixMilli(), r.UpdatedAt.UnixMilli())
	return n == 1, err
}

// InsertOrg stores org and its default alert rules with q.
func InsertOrg(ctx context.Context, q Querier, org cloud.Org) error {
	if _, err := q.Exec(ctx, `INSERT INTO orgs (id, name, webhook_secret, created_at) VALUES (?, ?, ?, ?)`,
		org.ID, org.Name, org.WebhookSecret, org.CreatedAt.UnixMilli()); err != nil {
		return err
	}
	return AddDefaultRules(ctx, q, org.ID, org.CreatedAt)
}

// AddDefaultRules stores the default alert rules (cloud.DefaultAlertRules)
// of a new organization, created at at, each with a fresh id; a rule whose
// name the organization already has is skipped.
func AddDefaultRules(ctx context.Context, q Querier, orgID string, at time.Time) error {
	at = at.UTC().Truncate(time.Millisecond)
	for _, d := range cloud.DefaultAlertRules() {
		d.ID, d.CreatedAt, d.UpdatedAt = ids.New(), resource.T(at), resource.T(at)
		r, err := cloud.CompileRule(orgID, d)
		if err != nil {
			return fmt.Errorf("default rule %s: %w", d.Name, err)
		}
		if _, err := insertRule(ctx, q, r); err != nil {
			return err
		}
	}
	return nil
}

// NotifyChannelColumns are the columns ScanNotificationChannel reads, in order.
const NotifyChannelColumns = `id, name, kind, target, min_severity, created_at`

// ScanNotificationChannel reads a row of NotifyChannelColumns.
func ScanNotificationChannel(row Row) (resource.NotificationChannel, error) {
	var c resource.NotificationChannel
	var sev string
	var created int64
	err := row.Scan(&c.ID, &c.Name, &c.Kind, &c.Target, &sev, &created)
	c.MinSeverity, c.CreatedAt = resource.Severity(sev), resource.T(time.UnixMilli(created).UTC())
	return c, err
}

// SilenceColumns are the columns ScanSilence reads, in order.
const SilenceColumns = `id, scope, from_at, to_at, comment, created_by, created_at`

// ScanSilence reads a row of SilenceColumns.
func ScanSilence(row Row) (resource.Silence, error) {
	var s resource.Silence
	var scope string
	var from, to, created int64
	if err := row.Scan(&s.ID, &scope, &from, &to, &s.Comment, &s.CreatedBy, &created); err != nil {
		return s, err
	}
	s.From, s.To, s.CreatedAt = resource.T(time.UnixMilli(from).UTC()), resource.T(time.UnixMilli(to).UTC()), resource.T(time.UnixMilli(created).UTC())
	if err := json.Unmarshal([]byte(scope), &s.Scope); err != nil {
		return s, fmt.Errorf("silence %s: stored scope: %w", s.ID, err)
	}
	return s, nil
}

// ruleNotFound, channelNotFound and silenceNotFound are ENOTFOUND.
func ruleNotFound(id string) error {
	return cloud.Errorf(cloud.ENOTFOUND, "alert rule %q not found", id)
}
func channelNotFound(id string) error {
	return cloud.Errorf(cloud.ENOTFOUND, "notification channel %q not found", id)
}
func silenceNotFound(id string) error {
	return cloud.Errorf(cloud.ENOTFOUND, "silence %q not found", id)
}

// noRows maps sql.ErrNoRows to notFound.
func noRows(err error, notFound error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return notFound
	}
	return err
}
