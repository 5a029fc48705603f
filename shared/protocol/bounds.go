package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// Bounds on what an agent reports, beyond the size of a message. They are
// written once, here: the relay checks every message against them (Check*,
// check.go), refusing one that breaks a rule (closing the connection), and
// the agent brings what it sends within them (Clamp*, clamp.go), dropping
// what it cannot, so that it never sends a message the relay refuses, which
// it would send again forever. Table lists every rule with what each side
// does; docs/protocol.md's "Limits and validation" table is its rendering
// (TestDocsBoundsTable keeps it so), and FuzzAgentOutputAccepted
// (cloud/agentlink) proves that what the agent's clamps let through, in
// either codec, the relay accepts.
const (
	// MaxTextField bounds the hello's strings, a heartbeat's ipAddress, a
	// channel's passthroughAddress and the VPN's names.
	MaxTextField = 200
	// MaxChannelID bounds a channel's id.
	MaxChannelID = 32
	// MaxLive bounds a channel's live value.
	MaxLive = 1024
	// MaxChannelError bounds a channel's error.
	MaxChannelError = 512
	// MaxEventMessage bounds an event's message.
	MaxEventMessage = 2048
	// MaxEventType bounds an event's type.
	MaxEventType = 64
	// MaxConfigError bounds a configApplied's error.
	MaxConfigError = 1024
	// MaxFutureSkew is how far after the relay's clock a record may be
	// stamped.
	MaxFutureSkew = 24 * time.Hour
	// MaxPointID bounds a point's id, "<channelId>.<name>".
	MaxPointID = MaxChannelID + 1 + serialcfg.MaxPointName
	// MaxMissingName bounds each name of a metric sample's missing
	// (the metrics its host has no sensor for).
	MaxMissingName = 32
	// MaxPointBatchBytes bounds the samples of one points record as the
	// agent spools it (JSON), so that a record always fits a message.
	MaxPointBatchBytes = 64 << 10
)

// earliestRecord is the oldest capturedAt or createdAt the relay accepts.
var earliestRecord = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// ClockNotSet reports whether t, a record's capturedAt or createdAt, is
// before 2020, the oldest the relay accepts: the gateway's clock was not set
// (no RTC, no NTP yet) when it stamped the record.
func ClockNotSet(t time.Time) bool { return t.Before(earliestRecord) }

// SaneTime reports whether t, a record's capturedAt or createdAt, is within
// the bounds seen from a clock reading now: from 2020 to MaxFutureSkew after
// now.
func SaneTime(t, now time.Time) bool {
	return !ClockNotSet(t) && !t.After(now.Add(MaxFutureSkew))
}

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

// ValidPointID reports whether id is a point's id, "<channelId>.<name>":
// a channel id of 1 to MaxChannelID bytes of UTF-8 and a point name
// (serialcfg.ValidPointName).
func ValidPointID(id string) bool {
	ch, name, ok := serialcfg.SplitPointID(id)
	return ok && len(ch) <= MaxChannelID && utf8.ValidString(ch) && serialcfg.ValidPointName(name)
}

// ValidQuality reports whether q is a point's quality: good, bad or stale.
func ValidQuality(q string) bool {
	switch q {
	case serialcfg.QualityGood, serialcfg.QualityBad, serialcfg.QualityStale:
		return true
	}
	return false
}

// RelayEventType reports whether t is one of the event types the relay
// records itself, which an agent must not send.
func RelayEventType(t string) bool {
	switch t {
	case EventHeartbeat, EventDeviceOnline, EventDeviceOffline, EventDeviceStatusChanged, EventAlertResolved, EventDeviceClaimed, EventIngestThrottled:
		return true
	}
	return false
}

// ReportedStatus reports whether s is a status an agent may report in a
// heartbeat: ONLINE, REBOOTING, UPDATING or ERROR.
func ReportedStatus(s resource.DeviceStatus) bool {
	switch s {
	case resource.StatusOnline, resource.StatusRebooting, resource.StatusUpdating, resource.StatusError:
		return true
	}
	return false
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

// textField is one free-text string field of a message of type T and its
// bound in bytes: the relay refuses a longer one, the agent makes it valid
// UTF-8 (JSON's encoder would replace each invalid byte by three) and
// shortens it.
type textField[T any] struct {
	name string // the field's JSON name
	max  int
	get  func(*T) *string
}

// The text fields of each message, the hello's, a heartbeat's (ipAddress
// is checked as an address too), a channel's (its id is an identity: never
// shortened), the VPN's, an event's and a configApplied's.
var (
	helloTexts = [...]textField[Hello]{
		{"agentVersion", MaxTextField, func(h *Hello) *string { return &h.AgentVersion }},
		{"firmwareVersion", MaxTextField, func(h *Hello) *string { return &h.FirmwareVersion }},
		{"model", MaxTextField, func(h *Hello) *string { return &h.Model }},
		{"deviceName", MaxTextField, func(h *Hello) *string { return &h.DeviceName }},
		{"deviceLocation", MaxTextField, func(h *Hello) *string { return &h.DeviceLocation }},
		{"timezone", MaxTextField, func(h *Hello) *string { return &h.Timezone }},
		{"arch", MaxTextField, func(h *Hello) *string { return &h.Arch }},
	}
	channelTexts = [...]textField[ChannelState]{
		{"live", MaxLive, func(c *ChannelState) *string { return &c.Live }},
		{"error", MaxChannelError, func(c *ChannelState) *string { return &c.Error }},
		{"passthroughAddress", MaxTextField, func(c *ChannelState) *string { return &c.PassthroughAddress }},
	}
	vpnTexts = [...]textField[VPN]{
		{"interfaceName", MaxTextField, func(v *VPN) *string { return &v.InterfaceName }},
		{"endpoint", MaxTextField, func(v *VPN) *string { return &v.Endpoint }},
	}
	eventTexts = [...]textField[Event]{
		{"message", MaxEventMessage, func(e *Event) *string { return &e.Message }},
	}
	configAppliedTexts = [...]textField[ConfigApplied]{
		{"error", MaxConfigError, func(a *ConfigApplied) *string { return &a.Error }},
	}
)

// A Bound is one rule of Table: the field it holds, as the relay's
// refusals and docs/protocol.md name it, the rule, and what the agent does
// with a value that breaks it.
type Bound struct {
	Field, Rule, Agent string
}

// Table returns every rule on what an agent sends, in the order of
// docs/protocol.md. The text bounds and the metric ranges are read from
// the same descriptors the checks and the clamps use.
func Table() []Bound {
	truncated := "shortened (valid UTF-8)"
	var t []Bound
	add := func(field, rule, agent string) { t = append(t, Bound{field, rule, agent}) }
	texts := func(prefix string, names []string, max int) {
		if len(names) > 0 {
			add(prefix+strings.Join(names, ", "), fmt.Sprintf("at most %d bytes", max), truncated)
		}
	}
	add("message", fmt.Sprintf("at most %d KiB, in either direction", MaxMessageBytes>>10), "records sent in batches that fit; a heartbeat's live values and errors shortened, then the last channels' points left out, until it fits (logged)")
	texts("hello.", names(helloTexts[:]), MaxTextField)
	add("hello.appliedVersion", "not negative", "raised to 0")
	add("hello.heartbeatInterval, hello.metricsInterval", "not negative (the relay clamps them to its own bounds)", "raised to 0")
	add("heartbeat.status", "`ONLINE`, `REBOOTING`, `UPDATING` or `ERROR`", "sent as `ERROR`")
	add("heartbeat.ipAddress", fmt.Sprintf("an IP address without a zone, or empty; at most %d bytes", MaxTextField), "zone dropped; sent empty when not an address")
	add("heartbeat.appliedVersion", "not negative", "raised to 0")
	add("heartbeat.channels", fmt.Sprintf("at most %d", MaxChannels), "the first kept")
	add("heartbeat.channels[].id", fmt.Sprintf("1 to %d bytes of UTF-8, unique within the heartbeat", MaxChannelID), "the channel left out, logged")
	for _, f := range channelTexts {
		add("heartbeat.channels[]."+f.name, fmt.Sprintf("at most %d bytes", f.max), truncated)
	}
	add("heartbeat.channels[].points", fmt.Sprintf("at most %d", serialcfg.MaxPoints), "the first kept")
	add("heartbeat.channels[].points[].name", fmt.Sprintf("`[a-z][a-z0-9_]*`, at most %d bytes, unique within the channel", serialcfg.MaxPointName), "the point left out, logged")
	add("heartbeat.channels[].points[].quality", "`good`, `bad` or `stale`", "sent as `bad`")
	add("heartbeat.channels[].points[].value", "finite; 0 when `bad` (`stale` keeps the last value read)", "not finite: sent as `bad` (`not a finite number`); 0 when `bad`")
	add("heartbeat.channels[].points[].error", fmt.Sprintf("at most %d bytes", MaxChannelError), truncated)
	add("heartbeat.channels[].points[].at", fmt.Sprintf("absent (not read yet), or from 2020-01-01 to %s after the heartbeat's `at`", hours(MaxFutureSkew)), "sent absent")
	texts("heartbeat.vpn.", names(vpnTexts[:]), MaxTextField)
	add("heartbeat.vpn.peerCount", "not negative", "raised to 0")
	add("records.items", fmt.Sprintf("1 to %d per message", MaxBatch), fmt.Sprintf("batches of at most %d", MaxBatch))
	add("records.items[].seq", "1 to 2⁶³−1 (`MaxSeq`), rising within a message, at most 2³² (`MaxSeqStep`) above the previous record's or, for the first, the relay's last stored one", "the spool numbers records one after another and no record above `MaxSeq`; when the relay holds a sequence it cannot number above, records are not sent (logged)")
	add("records.items[]", "exactly one of `metric`, `event` and `points`", "record not spooled, logged")
	add("metric.capturedAt, event.createdAt", fmt.Sprintf("from 2020-01-01 to %s after the relay's clock", hours(MaxFutureSkew)), "record not spooled, logged (before 2020: the clock is not set)")
	for _, r := range MetricRanges() {
		add("metric."+r.Name, fmt.Sprintf("finite, %g to %g", r.Lo, r.Hi), "clamped (NaN: 0)")
	}
	add("metric.missing", fmt.Sprintf("absent, or at most %d names of at most %d bytes (names other than the metrics above are ignored)", len(resource.MetricNames), MaxMissingName), "names other than the metrics left out, each once; a named metric sent as 0")
	add("points.samples", fmt.Sprintf("1 to %d per record", MaxPointSamples), fmt.Sprintf("a round's samples split into records of at most %d samples and %d KiB as JSON", MaxPointSamples, MaxPointBatchBytes>>10))
	add("points.samples[].point", fmt.Sprintf("`<channelId>.<name>`: a channel id as `heartbeat.channels[].id`, a name as `heartbeat.channels[].points[].name` (at most %d bytes in all)", MaxPointID), "the sample left out; a record left with none not spooled, logged")
	add("points.samples[].at", fmt.Sprintf("from 2020-01-01 to %s after the relay's clock", hours(MaxFutureSkew)), "the sample left out; a record left with none not spooled, logged (before 2020: the clock is not set)")
	add("points.samples[].value", "finite; 0 when `error` is set", "not finite: recorded as a bad sample (`not a finite number`)")
	add("points.samples[].error", fmt.Sprintf("at most %d bytes", MaxChannelError), truncated)
	add("event.id", "an id (lowercase letters and digits, 2 to 32)", "record not spooled, logged")
	add("event.type", fmt.Sprintf("lowercase dotted words (`usb.attached`), at most %d bytes; not `heartbeat`, `device.online`, `device.offline`, `device.status_changed`, `device.claimed`, `ingest.throttled` or `alert.resolved` (the relay's own)", MaxEventType), "record not spooled, logged")
	add("event.severity", "`INFO`, `WARNING`, `ERROR` or `CRITICAL`", "record not spooled, logged")
	for _, f := range eventTexts {
		add("event."+f.name, fmt.Sprintf("at most %d bytes", f.max), truncated)
	}
	add("event.data", fmt.Sprintf("a JSON object of at most %d KiB as sent, absent or `null`", MaxEventDataBytes>>10), "replaced by `{\"truncated\":true}` (`null`: left out)")
	add("configApplied.version", "0 to the highest desired version the relay sent or held at `hello`", "the version it was sent")
	for _, f := range configAppliedTexts {
		add("configApplied."+f.name, fmt.Sprintf("at most %d bytes", f.max), truncated)
	}
	add("commandStatus.id", fmt.Sprintf("the id of a command the relay sent: 1 to %d letters, digits, `-` and `_`", MaxCommandID), "not sent, logged (the agent takes no command with such an id)")
	add("commandStatus.state", "`accepted`, `downloading`, `installing`, `healthy`, `failed`, `rolled_back` or `rebooting`", "sent as `failed`, the state named in `error`")
	for _, f := range commandStatusTexts {
		add("commandStatus."+f.name, fmt.Sprintf("at most %d bytes", f.max), truncated)
	}
	return t
}

func names[T any](fs []textField[T]) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.name
	}
	return out
}

func hours(d time.Duration) string { return fmt.Sprintf("%d h", int(d/time.Hour)) }
