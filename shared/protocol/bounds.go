package protocol

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/fleet/fleet/shared/resource"
)

// Bounds on what an agent reports, beyond the limits of a message. The
// relay refuses a message that breaks one (closing the connection), so a
// record breaking one would be resent forever: the agent keeps within them
// before it spools a record or sends a hello or a heartbeat
// (docs/protocol.md, "Limits and validation").
const (
	// MaxTextField bounds the hello's strings, a heartbeat's status and
	// ipAddress, a channel's passthroughAddress and the VPN's names.
	MaxTextField = 200
	// MaxLive bounds a channel's live value.
	MaxLive = 1024
	// MaxChannelError bounds a channel's error.
	MaxChannelError = 512
	// MaxEventMessage bounds an event's message.
	MaxEventMessage = 2048
	// MaxEventType bounds an event's type.
	MaxEventType = 64
)

// earliestRecord is the oldest capturedAt or createdAt the relay accepts.
var earliestRecord = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// ClockNotSet reports whether t, a record's capturedAt or createdAt, is
// before 2020, the oldest the relay accepts: the gateway's clock was not set
// (no RTC, no NTP yet) when it stamped the record.
func ClockNotSet(t time.Time) bool { return t.Before(earliestRecord) }

// ValidEventType reports whether t is an event type: lowercase dotted words
// such as "usb.attached" (each word a letter, then letters, digits and
// '_'), at most MaxEventType bytes.
func ValidEventType(t string) bool {
	if t == "" || len(t) > MaxEventType {
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

// IsJSONObject reports whether d, an event's data, is a JSON object (white
// space around it allowed).
func IsJSONObject(d []byte) bool {
	d = bytes.TrimSpace(d)
	return len(d) > 0 && d[0] == '{' && json.Valid(d)
}

// MetricRange is the range of one metric sample field; values must also be
// finite.
type MetricRange struct {
	Name   string // the field's JSON name
	Lo, Hi float64
	// Value points at the field in a sample.
	Value func(*resource.MetricSample) *float64
}

// MetricRanges returns the range of every metric sample field.
func MetricRanges() [5]MetricRange {
	return [...]MetricRange{
		{"cpuPct", 0, 100, func(m *resource.MetricSample) *float64 { return &m.CPUPct }},
		{"memPct", 0, 100, func(m *resource.MetricSample) *float64 { return &m.MemPct }},
		{"diskUsedPct", 0, 100, func(m *resource.MetricSample) *float64 { return &m.DiskUsedPct }},
		{"tempCpu", -100, 300, func(m *resource.MetricSample) *float64 { return &m.TempCPU }},
		{"loadAvg1", 0, 100000, func(m *resource.MetricSample) *float64 { return &m.LoadAvg1 }},
	}
}
