package sqlstore

import (
	"context"
	"encoding/json"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// The silences of cloud.RuleService, written once for both stores.

// activeSilence is the condition of a silence in force or to come at a
// time (argument: the time in Unix milliseconds).
const activeSilence = `ended_at IS NULL AND to_at > ?`

// SilenceList is the organization's silences, newest first: those in force
// or to come at now, or all with f.All.
func SilenceList(orgID string, f cloud.SilenceFilter, now time.Time) Keyset[resource.Silence] {
	k := Keyset[resource.Silence]{
		What: "list silences", Table: "silences", Columns: SilenceColumns, ScopeColumn: "org_id", Scope: orgID,
		Newest: true, Cursor: f.Cursor, Limit: cloud.ListLimit(f.Limit, 25, 100),
		Scan: ScanSilence,
		ID:   func(s resource.Silence) string { return s.ID },
	}
	if !f.All {
		k.Where, k.WhereArgs = activeSilence, []any{now.UnixMilli()}
	}
	return k
}

// CreateSilence implements cloud.RuleService (NewSilence.Check; the
// scope's devices must be the organization's; at most
// cloud.MaxSilencesPerOrg in force or to come).
func (s *RuleService) CreateSilence(ctx context.Context, orgID string, n cloud.NewSilence) (resource.Silence, error) {
	now := s.Tables.Now().UTC().Truncate(time.Millisecond)
	n, err := n.Check(now)
	if err != nil {
		return resource.Silence{}, err
	}
	scope, err := json.Marshal(n.Scope)
	if err != nil {
		return resource.Silence{}, err
	}
	out := resource.Silence{ID: ids.New(), Scope: n.Scope, From: resource.T(n.From.UTC().Truncate(time.Millisecond)),
		To: resource.T(n.To.UTC().Truncate(time.Millisecond)), Comment: n.Comment, CreatedBy: n.CreatedBy, CreatedAt: resource.T(now)}
	err = s.Tables.RuleTx(ctx, orgID, "create silence", func(tx Querier) error {
		if err := checkScopeDevices(ctx, tx, orgID, "scope", n.Scope); err != nil {
			return err
		}
		var count int
		if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM silences WHERE org_id = ? AND `+activeSilence, orgID, now.UnixMilli()).Scan(&count); err != nil {
			return err
		}
		if count >= cloud.MaxSilencesPerOrg {
			return cloud.Errorf(cloud.ECONFLICT, "the organization has %d silences in force or to come, the most it may have", count)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO silences (id, org_id, scope, from_at, to_at, comment, created_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			out.ID, orgID, string(scope), out.From.UnixMilli(), out.To.UnixMilli(), out.Comment, out.CreatedBy, now.UnixMilli()); err != nil {
			return err
		}
		return s.Tables.audit(ctx, tx, orgID, cloud.ActionSilenceCreated, silenceTarget(out.ID), map[string]any{
			"from": out.From, "to": out.To, "comment": out.Comment, "scope": scopeDetails(out.Scope.DeviceIDs, out.Scope.Tags)})
	})
	if err != nil {
		return resource.Silence{}, err
	}
	s.changed(ctx, orgID, nil)
	return out, nil
}

// ListSilences implements cloud.RuleService: newest first, keyset-paginated.
func (s *RuleService) ListSilences(ctx context.Context, orgID string, f cloud.SilenceFilter) (resource.List[resource.Silence], error) {
	return s.Tables.SilencePage(ctx, SilenceList(orgID, f, s.Tables.Now()))
}

// DeleteSilence implements cloud.RuleService: the silence ends now (its
// to becomes now when later); ending an ended one changes nothing.
func (s *RuleService) DeleteSilence(ctx context.Context, orgID, id string) error {
	now := s.Tables.Now().UTC().Truncate(time.Millisecond).UnixMilli()
	err := s.Tables.RuleTx(ctx, orgID, "delete silence", func(tx Querier) error {
		var ended *int64
		if err := noRows(tx.QueryRow(ctx, `SELECT ended_at FROM silences WHERE id = ? AND org_id = ?`, id, orgID).Scan(&ended), silenceNotFound(id)); err != nil || ended != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE silences SET ended_at = ?, to_at = CASE WHEN to_at > ? THEN ? ELSE to_at END WHERE id = ? AND org_id = ?`,
			now, now, now, id, orgID); err != nil {
			return err
		}
		return s.Tables.audit(ctx, tx, orgID, cloud.ActionSilenceDeleted, silenceTarget(id), nil)
	})
	if err != nil {
		return err
	}
	s.changed(ctx, orgID, nil)
	return nil
}

// silenceTarget is silence id as an audit record's target.
func silenceTarget(id string) cloud.AuditTarget {
	return cloud.AuditTarget{Kind: cloud.TargetSilence, ID: id}
}
