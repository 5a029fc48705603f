package sqlstore

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
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
	_, err := tx.Exec(ctx, AuditInsertSQL,
		ids.New(), orgID, s.nowMs(), string(a.Kind), a.ID, a.Name, action, target.Kind, target.ID, a.IP, d)
	return s.Wrap("write audit record", err)
}

// AuditInsertSQL writes one audit record.
const AuditInsertSQL = `INSERT INTO audit_log (id, org_id, at_ms, actor_kind, actor_id, actor_name, action, target_kind, target_id, ip, details)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// TxStatements are statements that write transactions of every kind run,
// which a store may prepare once and keep (SQLite's Tx: a statement
// prepared anew in each transaction cost the audit record of a PUT of a
// channel most of its time, docs/benchmarks.md "Audit").
var TxStatements = []string{AuditInsertSQL}

// auditDetails is details as a JSON object of at most
// cloud.MaxAuditDetails bytes.
func auditDetails(details any) string {
	if details == nil {
		return "{}"
	}
	// Written as people read it (< and & as themselves, which every page
	// and file showing it escapes as it must), so that a reader need not
	// decode it again (cloud.AuditRecord.DetailsText).
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(details); err != nil {
		return "{}"
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(b) == 0 || b[0] != '{' {
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

// ListAudit returns a page of the organization's records, newest first
// (at_ms, then id). The cursor is "<at_ms>.<id>" of the page's last record.
func (s *Store) ListAudit(ctx context.Context, orgID string, f cloud.AuditFilter) (cloud.AuditPage, error) {
	limit := cloud.ListLimit(f.Limit, cloud.DefaultAuditPage, cloud.MaxAuditPage)
	q := `SELECT id, org_id, at_ms, actor_kind, actor_id, actor_name, action, target_kind, target_id, ip, details FROM audit_log WHERE org_id = ?`
	args := []any{orgID}
	if !f.Since.IsZero() {
		q += ` AND at_ms >= ?`
		args = append(args, f.Since.UnixMilli())
	}
	if !f.Until.IsZero() {
		q += ` AND at_ms < ?`
		args = append(args, f.Until.UnixMilli())
	}
	eq := func(col, v string) {
		if v != "" {
			q += ` AND ` + col + ` = ?`
			args = append(args, v)
		}
	}
	eq("actor_kind", string(f.ActorKind))
	eq("actor_id", f.ActorID)
	eq("target_kind", f.TargetKind)
	eq("target_id", f.TargetID)
	if a := f.Action; strings.HasSuffix(a, ".") {
		q += ` AND substr(action, 1, ?) = ?`
		args = append(args, len(a), a)
	} else {
		eq("action", a)
	}
	if f.Cursor != "" {
		at, id, ok := parseAuditCursor(f.Cursor)
		if !ok {
			return cloud.AuditPage{}, cloud.ErrCursor()
		}
		q += ` AND (at_ms < ? OR (at_ms = ? AND id < ?))`
		args = append(args, at, at, id)
	}
	q += ` ORDER BY at_ms DESC, id DESC LIMIT ?`
	args = append(args, limit+1)
	recs, err := Collect(ctx, s.R, scanAudit, q, args...)
	if err != nil {
		return cloud.AuditPage{}, s.Wrap("audit log", err)
	}
	page := cloud.AuditPage{Records: recs}
	if len(recs) > limit {
		page.Records = recs[:limit]
		last := page.Records[limit-1]
		page.Next = strconv.FormatInt(last.At.UnixMilli(), 10) + "." + last.ID
	}
	if page.Records == nil {
		page.Records = []cloud.AuditRecord{}
	}
	return page, nil
}

func parseAuditCursor(c string) (int64, string, bool) {
	ms, id, ok := strings.Cut(c, ".")
	if !ok || !ids.Valid(id) {
		return 0, "", false
	}
	at, err := strconv.ParseInt(ms, 10, 64)
	return at, id, err == nil && at >= 0
}

func scanAudit(r Row) (cloud.AuditRecord, error) {
	var a cloud.AuditRecord
	var at int64
	var kind, details string
	err := r.Scan(&a.ID, &a.OrgID, &at, &kind, &a.Actor.ID, &a.Actor.Name, &a.Action, &a.Target.Kind, &a.Target.ID, &a.IP, &details)
	a.Actor.Kind = cloud.ActorKind(kind)
	a.Actor.IP = a.IP
	a.At = time.UnixMilli(at).UTC()
	a.Details = []byte(details)
	return a, err
}

// SweepAudit deletes records older than before.
func (s *Store) SweepAudit(ctx context.Context, before time.Time) (int64, error) {
	n, err := s.W.Exec(ctx, `DELETE FROM audit_log WHERE at_ms < ?`, before.UnixMilli())
	return n, s.Wrap("sweep audit log", err)
}
