package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// The alert rules of cloud.RuleService (DESIGN.md "Alert rules and
// notifications"), written once for both stores.

// RuleList is the organization's live rules, oldest first.
func RuleList(orgID string, p cloud.Page) Keyset[resource.AlertRule] {
	return Keyset[resource.AlertRule]{
		What: "list rules", Table: "alert_rules", Columns: RuleColumns, ScopeColumn: "org_id", Scope: orgID,
		Where:  `deleted_at IS NULL`,
		Cursor: p.Cursor, Limit: cloud.ListLimit(p.Limit, 25, 100),
		Scan: func(r Row) (resource.AlertRule, error) {
			c, err := ScanRule(r)
			return c.Resource(), err
		},
		ID: func(r resource.AlertRule) string { return r.ID },
	}
}

// ListRules implements cloud.RuleService: the organization's live rules,
// oldest first (created_at, then id), keyset-paginated.
func (s *RuleService) ListRules(ctx context.Context, orgID string, p cloud.Page) (resource.List[resource.AlertRule], error) {
	return s.Tables.RulePage(ctx, RuleList(orgID, p))
}

// readRule reads the organization's live rule id with q, or ENOTFOUND.
func readRule(ctx context.Context, q Querier, orgID, id string) (cloud.AlertRule, error) {
	r, err := ScanRule(q.QueryRow(ctx, `SELECT `+RuleColumns+` FROM alert_rules WHERE id = ? AND org_id = ? AND deleted_at IS NULL`, id, orgID))
	return r, noRows(err, ruleNotFound(id))
}

// Rule implements cloud.RuleService.
func (s *RuleService) Rule(ctx context.Context, orgID, id string) (resource.AlertRule, error) {
	r, err := readRule(ctx, s.Tables.RuleReader(), orgID, id)
	return r.Resource(), s.Tables.Wrap("rule", err)
}

// CreateRule implements cloud.RuleService.
func (s *RuleService) CreateRule(ctx context.Context, orgID string, in resource.AlertRule) (resource.AlertRule, error) {
	now := resource.T(s.Tables.Now().UTC().Truncate(time.Millisecond))
	in.ID, in.CreatedAt, in.UpdatedAt = ids.New(), now, now
	r, err := cloud.CompileRule(orgID, in)
	if err != nil {
		return resource.AlertRule{}, err
	}
	err = s.Tables.RuleTx(ctx, orgID, "create rule", func(tx Querier) error {
		var n int
		if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM alert_rules WHERE org_id = ? AND deleted_at IS NULL`, orgID).Scan(&n); err != nil {
			return err
		}
		if n >= cloud.MaxRulesPerOrg {
			return cloud.Errorf(cloud.ECONFLICT, "the organization has %d alert rules, the most it may have", n)
		}
		if err := checkRule(ctx, tx, r, nil); err != nil {
			return err
		}
		ok, err := insertRule(ctx, tx, r)
		if err == nil && !ok {
			return nameTaken(r.Name)
		}
		if err != nil {
			return err
		}
		return s.Tables.audit(ctx, tx, orgID, cloud.ActionRuleCreated, ruleTarget(r.ID),
			map[string]any{"name": r.Name, "severity": string(r.Severity), "enabled": r.Enabled, "condition": r.Resource().Condition.Kind})
	})
	if err != nil {
		return resource.AlertRule{}, err
	}
	s.changed(ctx, orgID, nil)
	return r.Resource(), nil
}

// UpdateRule implements cloud.RuleService: disabling the rule, or
// changing its condition or scope, resolves its open alerts in the same
// transaction (the alert engine opens again those that still hold).
func (s *RuleService) UpdateRule(ctx context.Context, orgID, id string, p cloud.RulePatch) (resource.AlertRule, error) {
	var out cloud.AlertRule
	var resolved []resource.Alert
	err := s.Tables.RuleTx(ctx, orgID, "update rule", func(tx Querier) error {
		old, err := readRule(ctx, tx, orgID, id)
		if err != nil {
			return err
		}
		in := p.Apply(old.Resource())
		in.UpdatedAt = resource.T(s.Tables.Now().UTC().Truncate(time.Millisecond))
		r, err := cloud.CompileRule(orgID, in)
		if err != nil {
			return err
		}
		if err := checkRule(ctx, tx, r, &old); err != nil {
			return err
		}
		scope, cond, notify, repeat, err := ruleRow(r)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE alert_rules SET name = ?, severity = ?, enabled = ?, scope = ?, cond = ?, notify = ?, repeat_every_ms = ?, updated_at = ?
			WHERE id = ? AND org_id = ?`, r.Name, string(r.Severity), r.Enabled, scope, cond, notify, repeat, r.UpdatedAt.UnixMilli(), id, orgID); err != nil {
			return err
		}
		out = r
		switch {
		case old.Enabled && !r.Enabled:
			resolved, err = resolveRuleAlerts(ctx, tx, r, "rule disabled", resource.T(r.UpdatedAt))
		case !sameCondition(old, r):
			resolved, err = resolveRuleAlerts(ctx, tx, r, "rule changed", resource.T(r.UpdatedAt))
		}
		if err != nil {
			return err
		}
		return s.Tables.audit(ctx, tx, orgID, cloud.ActionRuleUpdated, ruleTarget(id), withResolved(ruleChanges(old.Resource(), r.Resource()), resolved))
	})
	if err != nil {
		return resource.AlertRule{}, err
	}
	s.changed(ctx, orgID, resolved)
	return out.Resource(), nil
}

// sameCondition reports whether two versions of a rule watch the same
// thing on the same devices.
func sameCondition(a, b cloud.AlertRule) bool {
	return a.Cond == b.Cond && slices.Equal(a.Scope.DeviceIDs, b.Scope.DeviceIDs) && slices.Equal(a.Scope.Tags, b.Scope.Tags)
}

// DeleteRule implements cloud.RuleService: the rule is marked deleted and
// renamed "<name> (deleted <id>)" (its alerts keep it; its name is free
// again), and its open alerts are resolved, in one transaction.
func (s *RuleService) DeleteRule(ctx context.Context, orgID, id string) error {
	var resolved []resource.Alert
	err := s.Tables.RuleTx(ctx, orgID, "delete rule", func(tx Querier) error {
		r, err := readRule(ctx, tx, orgID, id)
		if err != nil {
			return err
		}
		now := s.Tables.Now().UTC().Truncate(time.Millisecond)
		if _, err := tx.Exec(ctx, `UPDATE alert_rules SET deleted_at = ?, updated_at = ?, name = ? WHERE id = ? AND org_id = ?`,
			now.UnixMilli(), now.UnixMilli(), fmt.Sprintf("%s (deleted %s)", r.Name, r.ID), id, orgID); err != nil {
			return err
		}
		if resolved, err = resolveRuleAlerts(ctx, tx, r, "rule deleted", resource.T(now)); err != nil {
			return err
		}
		return s.Tables.audit(ctx, tx, orgID, cloud.ActionRuleDeleted, ruleTarget(id), withResolved(map[string]any{"name": r.Name}, resolved))
	})
	if err != nil {
		return err
	}
	s.changed(ctx, orgID, resolved)
	return nil
}

// ruleTarget is rule id as an audit record's target.
func ruleTarget(id string) cloud.AuditTarget {
	return cloud.AuditTarget{Kind: cloud.TargetRule, ID: id}
}

// withResolved adds to a rule change's audit details how many open alerts
// the change resolved, if any (they have no records of their own).
func withResolved(d map[string]any, resolved []resource.Alert) map[string]any {
	if len(resolved) > 0 {
		d["resolvedAlerts"] = len(resolved)
	}
	return d
}

// resolveRuleAlerts resolves with tx every open alert of rule r at at, each
// with its alert.resolved event (the message names why) and
// notifications, and returns them.
func resolveRuleAlerts(ctx context.Context, tx Querier, r cloud.AlertRule, why string, at resource.Time) ([]resource.Alert, error) {
	alerts, err := Collect(ctx, tx, ScanAlert, `UPDATE alerts SET state = 'RESOLVED', resolved_at = ?
		WHERE org_id = ? AND rule_id = ? AND state <> 'RESOLVED' RETURNING `+AlertColumns, at.UnixMilli(), r.OrgID, r.ID)
	if err != nil {
		return nil, err
	}
	for _, a := range alerts {
		e, err := ResolvedEvent(a, r, r.Name+" alert resolved: "+why, at.Time)
		if err != nil {
			return nil, err
		}
		if err := InsertEvent(ctx, tx, r.OrgID, a.DeviceID, e); err != nil {
			return nil, err
		}
		if _, err := QueueAlertNotifications(ctx, tx, alert.EventResolved, a, r, at.Time); err != nil {
			return nil, err
		}
	}
	return alerts, nil
}

// nameTaken is EINVALID for a rule name another live rule has.
func nameTaken(name string) error {
	return cloud.Errorf(cloud.EINVALID, "name: the organization already has a rule named %q", name)
}

// checkRule makes the store's checks of a compiled rule with tx (old is
// the rule before an update, nil for a new one): its name is free, its
// notify ids are channels of the organization, its scope's devices are
// the organization's, and a point source is a point of at least one
// device of the scope. An update checks the devices and the point only
// when the condition or the scope changed.
func checkRule(ctx context.Context, tx Querier, r cloud.AlertRule, old *cloud.AlertRule) error {
	var n int
	if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM alert_rules WHERE org_id = ? AND name = ? AND id <> ?`, r.OrgID, r.Name, r.ID).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nameTaken(r.Name)
	}
	if len(r.Notify) > 0 {
		have, err := Collect(ctx, tx, ScanString, `SELECT id FROM notification_channels WHERE org_id = ?`, r.OrgID)
		if err != nil {
			return err
		}
		for i, id := range r.Notify {
			if !slices.Contains(have, id) {
				return cloud.Errorf(cloud.EINVALID, "notify[%d]: the organization has no notification channel %q", i, id)
			}
		}
	}
	if old != nil && sameCondition(*old, r) {
		return nil
	}
	if err := checkScopeDevices(ctx, tx, r.OrgID, "scope", r.Scope); err != nil {
		return err
	}
	if r.Cond.PointID != "" {
		return checkPoint(ctx, tx, r)
	}
	return nil
}

// checkScopeDevices checks with tx that every device id of scope is one
// of the organization's devices (EINVALID naming field.deviceIds[i]).
func checkScopeDevices(ctx context.Context, tx Querier, orgID, field string, scope resource.RuleScope) error {
	if len(scope.DeviceIDs) == 0 {
		return nil
	}
	args := []any{orgID}
	for _, id := range scope.DeviceIDs {
		args = append(args, id)
	}
	have, err := Collect(ctx, tx, ScanString, `SELECT id FROM devices WHERE org_id = ? AND id IN (?`+strings.Repeat(`, ?`, len(scope.DeviceIDs)-1)+`)`, args...)
	if err != nil {
		return err
	}
	for i, id := range scope.DeviceIDs {
		if !slices.Contains(have, id) {
			return cloud.Errorf(cloud.EINVALID, "%s.deviceIds[%d]: the organization has no device %q", field, i, id)
		}
	}
	return nil
}

// checkPoint checks with tx that r's point is in the desired serial
// configuration of at least one device of r's scope.
func checkPoint(ctx context.Context, tx Querier, r cloud.AlertRule) error {
	channel, name, _ := serialcfg.SplitPointID(r.Cond.PointID)
	found := false
	err := Each(ctx, tx, `SELECT d.id, d.tags, c.config FROM serial_channels c JOIN devices d ON d.id = c.device_id
		WHERE d.org_id = ? AND c.channel_id = ? AND c.config IS NOT NULL`, []any{r.OrgID, channel}, func(row Row) error {
		var id, tags, config string
		if found {
			return nil
		}
		if err := row.Scan(&id, &tags, &config); err != nil {
			return err
		}
		if !cloud.InScope(r.Scope, id, decodeTags(tags)) {
			return nil
		}
		cfg, err := serialcfg.Decode([]byte(config))
		if err != nil {
			return nil // a configuration this relay cannot read has no point it knows
		}
		for _, p := range cfg.PointDefs(channel) {
			found = found || p.Name == name
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !found {
		return cloud.Errorf(cloud.EINVALID, "condition.source: no device of the rule's scope has point %q in its serial configuration", r.Cond.PointID)
	}
	return nil
}

// decodeTags reads a device's stored tags (a JSON array); none when
// unreadable.
func decodeTags(s string) []string {
	var tags []string
	if s != "" && json.Unmarshal([]byte(s), &tags) != nil {
		return nil
	}
	return tags
}

// changed tells the observer, after a commit, that the organization's
// rules, silences or channels changed, and the alert observer of each
// alert the change resolved.
func (s *RuleService) changed(ctx context.Context, orgID string, resolved []resource.Alert) {
	if s.Observer != nil {
		s.Observer.RulesChanged(orgID)
	}
	if s.Alerts != nil {
		for _, a := range resolved {
			s.Alerts.AlertChanged(ctx, alert.EventResolved, a)
		}
	}
}
