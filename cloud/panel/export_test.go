package panel

import (
	"time"

	"github.com/fleet/fleet/cloud/internal/refusallog"
)

// FlushSignInLog ends the interval of the refused sign-ins' log, as its
// timer does a minute after the first line it held back.
func (s *Server) FlushSignInLog() { s.signInLog.Flush() }

// HoldSignInSummary makes the refused sign-ins' interval an hour, so that a
// slow test's sign-ins all fall in one (call it before any sign-in).
func (s *Server) HoldSignInSummary() {
	s.signInLog = refusallog.New(s.log, "panel sign-in refused", "panel sign-ins refused", time.Hour)
}
