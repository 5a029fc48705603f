package sqlstore

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// The notification channels and silences of cloud.RuleService, written
// once for both stores.

// CreateChannel implements cloud.RuleService; with c.AllRules the channel
// joins the notify list of every live rule of the organization (ECONFLICT
// when one already notifies cloud.MaxRuleNotify channels).
func (s *RuleService) CreateChannel(ctx context.Context, c cloud.NewChannel) (resource.NotificationChannel, error) {
	c, err := cloud.CheckChannel(c)
	if err != nil {
		return resource.NotificationChannel{}, err
	}
	now := s.Tables.Now().UTC().Truncate(time.Millisecond)
	out := resource.NotificationChannel{ID: ids.New(), Name: c.Name, Kind: c.Kind, Target: c.Target, MinSeverity: c.MinSeverity, CreatedAt: resource.T(now)}
	err = s.Tables.RuleTx(ctx, c.OrgID, "create channel", func(tx Querier) error {
		var orgs, n int
		if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM orgs WHERE id = ?`, c.OrgID).Scan(&orgs); err != nil {
			return err
		}
		if orgs == 0 {
			return OrgNotFound(c.OrgID)
		}
		if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM notification_channels WHERE org_id = ?`, c.OrgID).Scan(&n); err != nil {
			return err
		}
		if n >= cloud.MaxChannelsPerOrg {
			return cloud.Errorf(cloud.ECONFLICT, "the organization has %d notification channels, the most it may have", n)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO notification_channels (id, org_id, name, kind, target, min_severity, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			out.ID, c.OrgID, out.Name, out.Kind, out.Target, string(out.MinSeverity), now.UnixMilli()); err != nil {
			return err
		}
		d := notifyChannelDetails(out)
		if c.AllRules {
			d["allRules"] = true
			err := editNotify(ctx, tx, c.OrgID, `deleted_at IS NULL`, nil, now, func(r notifyRow) ([]string, error) {
				if len(r.notify) >= cloud.MaxRuleNotify {
					return nil, cloud.Errorf(cloud.ECONFLICT, "rule %q already notifies %d channels, the most it may", r.name, len(r.notify))
				}
				return append(r.notify, out.ID), nil
			})
			if err != nil {
				return err
			}
		}
		return s.Tables.audit(ctx, tx, c.OrgID, cloud.ActionNotifyCreated, notifyTarget(out.ID), d)
	})
	if err != nil {
		return resource.NotificationChannel{}, err
	}
	s.changed(ctx, c.OrgID, nil)
	return out, nil
}

// notifyRow is a rule's notify list as editNotify reads it.
type notifyRow struct {
	id, name string
	notify   []string
}

// editNotify sets with tx the notify list of each rule of the organization
// matching where (with args) to what edit returns (unchanged when equal),
// updated at now.
func editNotify(ctx context.Context, tx Querier, orgID, where string, args []any, now time.Time, edit func(notifyRow) ([]string, error)) error {
	rows, err := Collect(ctx, tx, func(row Row) (notifyRow, error) {
		var r notifyRow
		var notify string
		if err := row.Scan(&r.id, &r.name, &notify); err != nil {
			return r, err
		}
		return r, json.Unmarshal([]byte(notify), &r.notify)
	}, `SELECT id, name, notify FROM alert_rules WHERE org_id = ? AND `+where, append([]any{orgID}, args...)...)
	if err != nil {
		return err
	}
	for _, r := range rows {
		next, err := edit(r)
		if err != nil {
			return err
		}
		if slices.Equal(next, r.notify) {
			continue
		}
		if next == nil {
			next = []string{}
		}
		b, err := json.Marshal(next)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE alert_rules SET notify = ?, updated_at = ? WHERE id = ?`, string(b), now.UnixMilli(), r.id); err != nil {
			return err
		}
	}
	return nil
}

// ListChannels implements cloud.RuleService: the organization's channels,
// oldest first.
func (s *RuleService) ListChannels(ctx context.Context, orgID string) ([]resource.NotificationChannel, error) {
	out, err := Collect(ctx, s.Tables.RuleReader(), ScanNotificationChannel,
		`SELECT `+NotifyChannelColumns+` FROM notification_channels WHERE org_id = ? ORDER BY created_at, id`, orgID)
	return out, s.Tables.Wrap("list channels", err)
}

// Channel implements cloud.RuleService.
func (s *RuleService) Channel(ctx context.Context, id string) (string, resource.NotificationChannel, error) {
	var orgID string
	c, err := ScanNotificationChannel(scanAlso{s.Tables.RuleReader().QueryRow(ctx,
		`SELECT `+NotifyChannelColumns+`, org_id FROM notification_channels WHERE id = ?`, id), []any{&orgID}})
	if err = noRows(err, channelNotFound(id)); err != nil {
		return "", resource.NotificationChannel{}, s.Tables.Wrap("channel", err)
	}
	return orgID, c, nil
}

// DeleteChannel implements cloud.RuleService: the channel leaves every
// rule's notify list (deleted rules' too) in the same transaction.
func (s *RuleService) DeleteChannel(ctx context.Context, orgID, id string) error {
	err := s.Tables.RuleTx(ctx, orgID, "delete channel", func(tx Querier) error {
		c, err := ScanNotificationChannel(tx.QueryRow(ctx, `DELETE FROM notification_channels WHERE id = ? AND org_id = ? RETURNING `+NotifyChannelColumns, id, orgID))
		if err = noRows(err, channelNotFound(id)); err != nil {
			return err
		}
		err = editNotify(ctx, tx, orgID, `notify LIKE ? ESCAPE '\'`, []any{cloud.LikePattern(id)}, s.Tables.Now().UTC().Truncate(time.Millisecond),
			func(r notifyRow) ([]string, error) {
				return slices.DeleteFunc(slices.Clone(r.notify), func(c string) bool { return c == id }), nil
			})
		if err != nil {
			return err
		}
		return s.Tables.audit(ctx, tx, orgID, cloud.ActionNotifyRemoved, notifyTarget(id), notifyChannelDetails(c))
	})
	if err != nil {
		return err
	}
	s.changed(ctx, orgID, nil)
	return nil
}

// notifyTarget is notification channel id as an audit record's target.
func notifyTarget(id string) cloud.AuditTarget {
	return cloud.AuditTarget{Kind: cloud.TargetNotificationChannel, ID: id}
}
