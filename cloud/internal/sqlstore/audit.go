package sqlstore

import (
	"context"
	"encoding/json"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/ids"
)

// The audit log (issue 30; cloud/audit.go): the store writes the record of
// a change in the change's own transaction with audit, from the actor the
// door put in the context.

// Audit returns the store's audit log.
func (s *Store) Audit() cloud.AuditService { return s }

// audit writes, in tx, the record of a change of orgID's made by ctx's
// actor (cloud.ActorFrom): action is one of cloud.Action*, target what was
// changed, details a value marshalled to a JSON object (nil: {}) that
// holds no secret. With no actor in ctx (the system's own changes) it
// writes nothing. Call it in the transaction of the change, after the
// change succeeded, so that both commit or neither does.
func (s *Store) audit(ctx context.Context, tx Querier, orgID, action string, target cloud.AuditTarget, details any) error {
	a, ok := cloud.ActorFrom(ctx)
	if !ok {
		return nil
	}
	d := auditDetails(details)
	_, err := tx.Exec(ctx, `INSERT INTO audit_log (id, org_id, at_ms, actor_kind, actor_id, actor_name, action, target_kind, target_id, ip, details)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		ids.New(), orgID, s.nowMs(), string(a.Kind), a.ID, a.Name, action, target.Kind, target.ID, a.IP, d)
	return s.Wrap("write audit record", err)
}

// auditDetails is details as a JSON object of at most
// cloud.MaxAuditDetails bytes.
func auditDetails(details any) string {
	if details == nil {
		return "{}"
	}
	b, err := json.Marshal(details)
	if err != nil || len(b) == 0 || b[0] != '{' {
		return "{}"
	}
	if len(b) > cloud.MaxAuditDetails {
		return `{"truncated":true}`
	}
	return string(b)
}

// RecordAudit writes one record outside any change (sign-in, sign-out, a
// failed sign-in).
func (s *Store) RecordAudit(ctx context.Context, orgID, action string, target cloud.AuditTarget, details any) error {
	return s.audit(ctx, s.W, orgID, action, target, details)
}

// ListAudit returns a page of the organization's records, newest first.
func (s *Store) ListAudit(ctx context.Context, orgID string, f cloud.AuditFilter) (cloud.AuditPage, error) {
	return cloud.AuditPage{}, cloud.Errorf(cloud.EINTERNAL, "audit: ListAudit is not written yet") // lane auditread
}

// SweepAudit deletes records older than before.
func (s *Store) SweepAudit(ctx context.Context, before time.Time) (int64, error) {
	return 0, cloud.Errorf(cloud.EINTERNAL, "audit: SweepAudit is not written yet") // lane auditread
}
