package api

import (
	"time"

	"github.com/fleet/fleet/cloud/internal/refusallog"
)

// FlushRefused ends the interval of the refused requests' log, as its
// timer does a minute after the first line it held back.
func (s *Server) FlushRefused() { s.refused.Flush() }

// HoldRefusedSummary makes the refused requests' interval an hour, so that
// a slow test's requests all fall in one (call it before any request).
func (s *Server) HoldRefusedSummary() {
	s.refused = refusallog.New(s.access, "request refused", "requests refused", time.Hour)
}
