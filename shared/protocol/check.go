package protocol

import (
	"bytes"
	"fmt"
	"math"
	"net/netip"
	"time"

	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// The relay's side of Table: each Check function returns a *BoundError
// naming the first field of a message out of its bound, or nil. They do not
// change the message, and allocate nothing when it is within its bounds
// (they run for every heartbeat).

// A BoundError is a field of a message out of its bound.
type BoundError struct {
	Field   string // "heartbeat.channels[2].id"
	Problem string // "longer than 32 bytes"
}

func (e *BoundError) Error() string { return e.Field + " " + e.Problem }

func outOfBound(field, format string, args ...any) error {
	return &BoundError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

func checkTexts[T any](prefix string, v *T, fs []textField[T]) error {
	for _, f := range fs {
		if len(*f.get(v)) > f.max {
			return outOfBound(prefix+f.name, "longer than %d bytes", f.max)
		}
	}
	return nil
}

// CheckHello checks a hello against Table.
func CheckHello(h *Hello) error {
	if err := checkTexts("hello.", h, helloTexts[:]); err != nil {
		return err
	}
	switch {
	case h.AppliedVersion < 0:
		return outOfBound("hello.appliedVersion", "must not be negative")
	case h.HeartbeatInterval.Duration < 0 || h.MetricsInterval.Duration < 0:
		return outOfBound("hello intervals", "must not be negative")
	}
	return nil
}

// CheckHeartbeat checks a heartbeat against Table.
func CheckHeartbeat(h *Heartbeat) error {
	if !ReportedStatus(h.Status) {
		return outOfBound("heartbeat.status", "%q is not ONLINE, REBOOTING, UPDATING or ERROR", clip(string(h.Status), 20))
	}
	if len(h.IPAddress) > MaxTextField {
		return outOfBound("heartbeat.ipAddress", "longer than %d bytes", MaxTextField)
	}
	if h.IPAddress != "" {
		if ip, err := netip.ParseAddr(h.IPAddress); err != nil || ip.Zone() != "" {
			return outOfBound("heartbeat.ipAddress", "%q is not an IP address", clip(h.IPAddress, 45))
		}
	}
	if h.AppliedVersion < 0 {
		return outOfBound("heartbeat.appliedVersion", "must not be negative")
	}
	if len(h.Channels) > MaxChannels {
		return outOfBound("heartbeat.channels", "has %d channels, over %d", len(h.Channels), MaxChannels)
	}
	for i := range h.Channels {
		c := &h.Channels[i]
		if c.ID == "" || len(c.ID) > MaxChannelID {
			return outOfBound(fmt.Sprintf("heartbeat.channels[%d].id", i), "missing or longer than %d bytes", MaxChannelID)
		}
		if j := indexOfID(h.Channels[:i], c.ID); j >= 0 {
			return outOfBound(fmt.Sprintf("heartbeat.channels[%d].id", i), "%q repeated", c.ID)
		}
		if err := checkTexts("", c, channelTexts[:]); err != nil {
			return within(fmt.Sprintf("heartbeat.channels[%d]", i), err)
		}
		if err := checkPointStates(c.Points, h.At.Time); err != nil {
			return within(fmt.Sprintf("heartbeat.channels[%d]", i), err)
		}
	}
	if v := h.VPN; v != nil {
		if err := checkTexts("heartbeat.vpn.", v, vpnTexts[:]); err != nil {
			return err
		}
		if v.PeerCount < 0 {
			return outOfBound("heartbeat.vpn.peerCount", "must not be negative")
		}
	}
	return nil
}

// checkPointStates checks a channel's point states, their times against
// the heartbeat's.
func checkPointStates(ps []PointState, at time.Time) error {
	if len(ps) > serialcfg.MaxPoints {
		return outOfBound("points", "has %d points, over %d", len(ps), serialcfg.MaxPoints)
	}
	for i := range ps {
		p := &ps[i]
		switch {
		case !serialcfg.ValidPointName(p.Name):
			return outOfBound(fmt.Sprintf("points[%d].name", i), "%q is not a point name", clip(p.Name, 40))
		case indexOfPoint(ps[:i], p.Name) >= 0:
			return outOfBound(fmt.Sprintf("points[%d].name", i), "%q repeated", p.Name)
		case !ValidQuality(p.Quality):
			return outOfBound(fmt.Sprintf("points[%d].quality", i), "%q is not good, bad or stale", clip(p.Quality, 20))
		case !finite(p.Value) || (p.Value != 0 && p.Quality == serialcfg.QualityBad):
			return outOfBound(fmt.Sprintf("points[%d].value", i), "not finite, or not 0 for quality bad")
		case len(p.Error) > MaxChannelError:
			return outOfBound(fmt.Sprintf("points[%d].error", i), "longer than %d bytes", MaxChannelError)
		case !p.At.IsZero() && !SaneTime(p.At.Time, at):
			return outOfBound(fmt.Sprintf("points[%d].at", i), "%s out of range", resource.FormatTime(p.At.Time))
		}
	}
	return nil
}

// indexOfPoint returns the index of the point name in ps, or -1.
func indexOfPoint(ps []PointState, name string) int {
	for j := range ps {
		if ps[j].Name == name {
			return j
		}
	}
	return -1
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// indexOfID returns the index of the channel id in cs, or -1.
func indexOfID(cs []ChannelState, id string) int {
	for j := range cs {
		if cs[j].ID == id {
			return j
		}
	}
	return -1
}

// CheckRecords checks the records of one Records message against Table,
// their sequences against last (the relay's last stored sequence of the
// device, which the agent was told: MaxSeqStep), their times against now,
// the relay's clock. The batch size (MaxBatch) is the relay's to check,
// with its own close code.
func CheckRecords(items []Record, last uint64, now time.Time) error {
	var prev uint64
	for i := range items {
		r := &items[i]
		if r.Seq > MaxSeq {
			return outOfBound(fmt.Sprintf("records.items[%d].seq", i), "%d is above the protocol's bound 2^63-1", r.Seq)
		}
		if r.Seq == 0 || r.Seq <= prev {
			return outOfBound(fmt.Sprintf("records.items[%d].seq", i), "%d is not above the previous %d", r.Seq, prev)
		}
		if from := max(prev, last); r.Seq > from && r.Seq-from > MaxSeqStep {
			return outOfBound(fmt.Sprintf("records.items[%d].seq", i),
				"%d is more than 2^32 above %d (the last stored, or the previous record): no agent's spool skips that many, and the device's agent could not number its records above it", r.Seq, from)
		}
		prev = r.Seq
		if err := CheckRecord(r, now); err != nil {
			return within(fmt.Sprintf("records.items[%d]", i), err)
		}
	}
	return nil
}

// within names err's field within the message: the field of prefix.
func within(prefix string, err error) error {
	be := err.(*BoundError)
	if be.Field == "" {
		be.Field = prefix
	} else {
		be.Field = prefix + "." + be.Field
	}
	return be
}

// CheckRecord checks one record, but for its seq, against Table, its
// time against now, the relay's clock. The field of a *BoundError it
// returns is relative to the record ("metric.cpuPct"; "" for the record).
func CheckRecord(r *Record, now time.Time) error {
	switch {
	case kinds(r) != 1:
		return outOfBound("", "holds %d of a metric, an event and points, not one", kinds(r))
	case r.Points != nil:
		return checkPointSamples(r.Points.Samples, now)
	case r.Metric != nil:
		m := r.Metric
		if !SaneTime(m.CapturedAt.Time, now) {
			return outOfBound("metric.capturedAt", "%s out of range", resource.FormatTime(m.CapturedAt.Time))
		}
		for _, b := range MetricRanges() {
			if v := *b.Value(m); math.IsNaN(v) || math.IsInf(v, 0) || v < b.Lo || v > b.Hi {
				return outOfBound("metric."+b.Name, "out of %g..%g", b.Lo, b.Hi)
			}
		}
		if len(m.Missing) > len(resource.MetricNames) {
			return outOfBound("metric.missing", "%d names, over %d", len(m.Missing), len(resource.MetricNames))
		}
		for _, n := range m.Missing {
			if len(n) > MaxMissingName {
				return outOfBound("metric.missing", "a name over %d bytes", MaxMissingName)
			}
		}
	case r.Event != nil:
		e := r.Event
		switch {
		case !ids.Valid(e.ID):
			return outOfBound("event.id", "is not an id")
		case !ValidEventType(e.Type):
			return outOfBound("event.type", "%q is not a valid type", clip(e.Type, 40))
		case RelayEventType(e.Type):
			return outOfBound("event.type", "%q is recorded by the relay only", e.Type)
		case !e.Severity.Valid():
			return outOfBound("event.severity", "%q is not INFO, WARNING, ERROR or CRITICAL", clip(string(e.Severity), 20))
		case !SaneTime(e.CreatedAt.Time, now):
			return outOfBound("event.createdAt", "out of range")
		case len(e.Data) > MaxEventDataBytes:
			return outOfBound("event.data", "over %d bytes", MaxEventDataBytes)
		case len(e.Data) > 0 && !IsJSONObject(e.Data) && !bytes.Equal(bytes.TrimSpace(e.Data), []byte("null")):
			return outOfBound("event.data", "must be a JSON object")
		}
		if err := checkTexts("event.", e, eventTexts[:]); err != nil {
			return err
		}
	}
	return nil
}

// kinds returns how many of a metric, an event and points r holds.
func kinds(r *Record) int {
	n := 0
	for _, set := range []bool{r.Metric != nil, r.Event != nil, r.Points != nil} {
		if set {
			n++
		}
	}
	return n
}

// checkPointSamples checks the samples of a points record.
func checkPointSamples(ss []PointSample, now time.Time) error {
	if len(ss) == 0 || len(ss) > MaxPointSamples {
		return outOfBound("points.samples", "has %d samples, not 1 to %d", len(ss), MaxPointSamples)
	}
	for i := range ss {
		if err := checkPointSample(&ss[i], now); err != nil {
			return within(fmt.Sprintf("points.samples[%d]", i), err)
		}
	}
	return nil
}

// checkPointSample checks one point sample; the field of its error is
// relative to the sample.
func checkPointSample(s *PointSample, now time.Time) error {
	switch {
	case len(s.Point) > MaxPointID || !ValidPointID(s.Point):
		return outOfBound("point", "%q is not <channelId>.<name>", clip(s.Point, MaxPointID))
	case !SaneTime(s.At.Time, now):
		return outOfBound("at", "%s out of range", resource.FormatTime(s.At.Time))
	case !finite(s.Value) || (s.Value != 0 && s.Error != ""):
		return outOfBound("value", "not finite, or not 0 beside an error")
	case len(s.Error) > MaxChannelError:
		return outOfBound("error", "longer than %d bytes", MaxChannelError)
	}
	return nil
}

// CheckConfigApplied checks a configApplied against Table, but for its
// version's upper bound, which is the relay's state.
func CheckConfigApplied(a *ConfigApplied) error {
	if a.Version < 0 {
		return outOfBound("configApplied.version", "must not be negative")
	}
	return checkTexts("configApplied.", a, configAppliedTexts[:])
}

// clip shortens s to at most n bytes, for an error message.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
