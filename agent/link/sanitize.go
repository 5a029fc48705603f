package link

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

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
		if protocol.ClockNotSet(m.CapturedAt.Time) {
			return ErrClockNotSet
		}
		for _, b := range protocol.MetricRanges() {
			v := b.Value(m)
			*v = clamp(*v, b.Lo, b.Hi)
		}
	case r.Event != nil && r.Metric == nil:
		e := r.Event
		if protocol.ClockNotSet(e.CreatedAt.Time) {
			return ErrClockNotSet
		}
		if !protocol.ValidEventType(e.Type) {
			return errors.New("event type is not lowercase dotted words of at most 64 bytes: " + e.Type)
		}
		e.Message = truncate(e.Message, protocol.MaxEventMessage)
		if len(e.Data) > 0 && (len(bytes.TrimSpace(e.Data)) > protocol.MaxEventDataBytes || !protocol.IsJSONObject(e.Data)) {
			e.Data = json.RawMessage(`{"truncated":true}`)
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

// text is s as valid UTF-8 (each run of invalid bytes replaced by U+FFFD)
// of at most n bytes. JSON's encoder replaces invalid UTF-8 by itself; a
// CBOR text string must be valid, or the relay refuses the whole message.
func text(s string, n int) string {
	return truncate(strings.ToValidUTF8(s, "\uFFFD"), n)
}

func sanitizeHello(h *protocol.Hello) {
	for _, p := range []*string{&h.AgentVersion, &h.FirmwareVersion, &h.Model, &h.DeviceName, &h.DeviceLocation, &h.Timezone} {
		*p = text(*p, protocol.MaxTextField)
	}
}

func sanitizeHeartbeat(h *protocol.Heartbeat) {
	h.Status = resource.DeviceStatus(text(string(h.Status), protocol.MaxTextField))
	h.IPAddress = text(h.IPAddress, protocol.MaxTextField)
	if len(h.Channels) > protocol.MaxChannels {
		h.Channels = h.Channels[:protocol.MaxChannels]
	}
	for i := range h.Channels {
		c := &h.Channels[i]
		c.ID = text(c.ID, protocol.MaxTextField)
		c.Live = text(c.Live, protocol.MaxLive)
		c.Error = text(c.Error, protocol.MaxChannelError)
		c.PassthroughAddress = text(c.PassthroughAddress, protocol.MaxTextField)
	}
	if v := h.VPN; v != nil {
		v.InterfaceName = text(v.InterfaceName, protocol.MaxTextField)
		v.Endpoint = text(v.Endpoint, protocol.MaxTextField)
	}
}
