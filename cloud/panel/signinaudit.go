package panel

import (
	"net/http"

	"github.com/fleet/fleet/cloud"
)

// The audit records of signing in and out (issue 30): sign-in and
// sign-out change nothing in the store, so the panel writes their records
// itself (Config.Audit's RecordAudit; none when it is nil), as the act of
// the user from the client's address. A failed sign-in is recorded only for a known account
// (an unknown email has no organization).

// auditSession writes the record of action (cloud.ActionSignedIn,
// ActionSignedOut, ActionSignInFailed) about u, as u's act.
func (s *Server) auditSession(r *http.Request, u cloud.User, action string, details any) error {
	if s.cfg.Audit == nil {
		return nil
	}
	ctx := cloud.WithActor(r.Context(), userActor(r, u))
	return s.cfg.Audit.RecordAudit(ctx, u.OrgID, action, cloud.AuditTarget{Kind: cloud.TargetMember, ID: u.ID}, details)
}

// auditSignInFailed records a refused sign-in of u ("" ID: an unknown
// email, not recorded) for reason ("password"); a failure to record it is
// logged, the sign-in is refused all the same.
func (s *Server) auditSignInFailed(r *http.Request, u cloud.User, reason string) {
	if u.ID == "" {
		return
	}
	if err := s.auditSession(r, u, cloud.ActionSignInFailed, map[string]string{"reason": reason}); err != nil {
		s.log.Error("failed panel sign-in not recorded", "user_id", u.ID, "err", err)
	}
}
