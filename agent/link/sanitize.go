package link

import (
	"time"

	"github.com/fleet/fleet/shared/protocol"
)

// ErrClockNotSet is returned by Sanitize for a record stamped before 2020:
// the gateway's clock has not been set (no RTC, no NTP yet).
var ErrClockNotSet = protocol.ErrClockNotSet

// Sanitize brings a record within the relay's bounds (shared/protocol's
// table, protocol.ClampRecord): metric values are made finite and clamped
// to their ranges, an event's message is shortened, and event data over
// its bound or not a JSON object is replaced by {"truncated":true}. It
// returns an error (and the record must not be spooled, or the relay would
// refuse it at every resend) when the record cannot be made acceptable: a
// timestamp before 2020 (ErrClockNotSet) or over a day ahead, an event
// whose id, type or severity is not one.
func Sanitize(r *protocol.Record) error { return protocol.ClampRecord(r, time.Now()) }
