package link

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// Bounds the relay enforces beyond shared/protocol's limits (docs/protocol.md,
// "Limits and validation"). A message breaking one closes the connection, so
// a record breaking one would be resent forever: the agent keeps within them
// before spooling (Sanitize) and before sending hello and heartbeats.
const (
	maxTextField    = 200
	maxLive         = 1024
	maxChannelError = 512
	maxEventMessage = 2048
	maxEventType    = 64
)

// EarliestRecordTime is the oldest capturedAt/createdAt the relay accepts.
var earliestRecordTime = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// ErrClockNotSet is returned by Sanitize for a record stamped before 2020:
// the gateway's clock has not been set (no RTC, no NTP yet).
var ErrClockNotSet = errors.New("system clock not set (before 2020)")

// Sanitize brings a record within the relay's bounds: metric values are
// made finite and clamped to their ranges, an event's message is shortened
// to 2048 bytes, and event data over 8 KiB or not a JSON object is replaced
// by {"truncated":true}. It returns an error (and the record must not be
// spooled) when the record cannot be made acceptable: a timestamp before
// 2020, or an event type that is not lowercase dotted words.
func Sanitize(r *protocol.Record) error {
	switch {
	case r.Metric != nil && r.Event == nil:
		m := r.Metric
		if m.CapturedAt.Before(earliestRecordTime) {
			return ErrClockNotSet
		}
		m.CPUPct = clamp(m.CPUPct, 0, 100)
		m.MemPct = clamp(m.MemPct, 0, 100)
		m.DiskUsedPct = clamp(m.DiskUsedPct, 0, 100)
		m.TempCPU = clamp(m.TempCPU, -100, 300)
		m.LoadAvg1 = clamp(m.LoadAvg1, 0, 100000)
	case r.Event != nil && r.Metric == nil:
		e := r.Event
		if e.CreatedAt.Before(earliestRecordTime) {
			return ErrClockNotSet
		}
		if !validEventType(e.Type) {
			return errors.New("event type is not lowercase dotted words of at most 64 bytes: " + e.Type)
		}
		e.Message = truncate(e.Message, maxEventMessage)
		if len(e.Data) > 0 {
			d := bytes.TrimSpace(e.Data)
			if len(d) > protocol.MaxEventDataBytes || len(d) == 0 || d[0] != '{' || !json.Valid(d) {
				e.Data = json.RawMessage(`{"truncated":true}`)
			}
		}
	default:
		return errors.New("a record holds exactly one of metric and event")
	}
	return nil
}

func clamp(v, lo, hi float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return math.Min(math.Max(v, lo), hi)
}

// truncate shortens s to at most n bytes without splitting a UTF-8 rune.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

func validEventType(t string) bool {
	if t == "" || len(t) > maxEventType {
		return false
	}
	word := false
	for i := 0; i < len(t); i++ {
		switch ch := t[i]; {
		case ch >= 'a' && ch <= 'z':
			word = true
		case (ch >= '0' && ch <= '9') || ch == '_':
			if !word {
				return false
			}
		case ch == '.':
			if !word {
				return false
			}
			word = false
		default:
			return false
		}
	}
	return word
}

// text is s as valid UTF-8 (each run of invalid bytes replaced by U+FFFD)
// of at most n bytes. JSON's encoder replaces invalid UTF-8 by itself; a
// CBOR text string must be valid, or the relay refuses the whole message.
func text(s string, n int) string {
	return truncate(strings.ToValidUTF8(s, "\uFFFD"), n)
}

func sanitizeHello(h *protocol.Hello) {
	for _, p := range []*string{&h.AgentVersion, &h.FirmwareVersion, &h.Model, &h.DeviceName, &h.DeviceLocation, &h.Timezone} {
		*p = text(*p, maxTextField)
	}
}

func sanitizeHeartbeat(h *protocol.Heartbeat) {
	h.Status = resource.DeviceStatus(text(string(h.Status), maxTextField))
	h.IPAddress = text(h.IPAddress, maxTextField)
	if len(h.Channels) > protocol.MaxChannels {
		h.Channels = h.Channels[:protocol.MaxChannels]
	}
	for i := range h.Channels {
		c := &h.Channels[i]
		c.ID = text(c.ID, maxTextField)
		c.Live = text(c.Live, maxLive)
		c.Error = text(c.Error, maxChannelError)
		c.PassthroughAddress = text(c.PassthroughAddress, maxTextField)
	}
	if v := h.VPN; v != nil {
		v.InterfaceName = text(v.InterfaceName, maxTextField)
		v.Endpoint = text(v.Endpoint, maxTextField)
	}
}
