package relay

import (
	"context"
	"log/slog"
	"strconv"
	"time"
)

// The audit log's retention (issue 30, docs/audit.md): the retention sweep
// deletes records older than --audit-retention.

// minAuditRetention is the shortest --audit-retention: the log keeps at
// least the last day.
const minAuditRetention = 24 * time.Hour

// dayDuration is a flag value holding a time.Duration written as whole
// days ("365d") or as a Go duration ("36h").
type dayDuration time.Duration

func (d *dayDuration) String() string {
	v := time.Duration(*d)
	if v > 0 && v%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(v/(24*time.Hour)), 10) + "d"
	}
	return v.String()
}

func (d *dayDuration) Set(s string) error {
	v, err := parseDays(s)
	if err != nil {
		return err
	}
	*d = dayDuration(v)
	return nil
}

// sweepAudit deletes the audit records older than --audit-retention,
// logging how many or the failure.
func (m *Main) sweepAudit(ctx context.Context, log *slog.Logger) {
	n, err := m.DB.Audit().SweepAudit(ctx, m.DB.Now().Add(-m.Config.AuditRetention))
	switch {
	case err != nil && ctx.Err() == nil:
		log.Error("audit retention sweep failed", "err", err)
	case n > 0:
		log.Info("audit retention sweep", "audit_records_deleted", n)
	}
}
