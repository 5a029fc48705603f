package protocol

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// The agent's side of Table: each Clamp function brings a message within
// the bounds the relay checks (check.go), changing what it can and saying
// what it could not, so that the agent never sends what the relay refuses.
// The clamps work on copies where a message shares memory with its maker
// (a heartbeat's channels and VPN state).

// ErrClockNotSet is returned by ClampRecord for a record stamped before
// 2020: the gateway's clock has not been set (no RTC, no NTP yet).
var ErrClockNotSet = errors.New("system clock not set (before 2020)")

// truncatedData replaces event data over its bound or not an object.
var truncatedData = json.RawMessage(`{"truncated":true}`)

// text is s as valid UTF-8 (each run of invalid bytes replaced by U+FFFD)
// of at most n bytes, not splitting a rune. JSON's encoder replaces each
// invalid byte by U+FFFD (three bytes) by itself, and a CBOR text string
// must be valid, or the relay refuses the whole message.
func text(s string, n int) string {
	if len(s) <= n && utf8.ValidString(s) {
		return s
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

func clampTexts[T any](v *T, fs []textField[T]) {
	for _, f := range fs {
		p := f.get(v)
		*p = text(*p, f.max)
	}
}

// ClampHello brings a hello within Table.
func ClampHello(h *Hello) {
	clampTexts(h, helloTexts[:])
	h.AppliedVersion = max(h.AppliedVersion, 0)
	h.HeartbeatInterval.Duration = max(h.HeartbeatInterval.Duration, 0)
	h.MetricsInterval.Duration = max(h.MetricsInterval.Duration, 0)
}

// ClampHeartbeat brings a heartbeat within Table. It returns what it could
// not keep, one line each (a channel left out, a status or address
// replaced), for the agent's log; nil when it only shortened text.
func ClampHeartbeat(h *Heartbeat) []string {
	var lost []string
	if !ReportedStatus(h.Status) {
		lost = append(lost, fmt.Sprintf("status %q is not ONLINE, REBOOTING, UPDATING or ERROR: sent as ERROR", text(string(h.Status), 40)))
		h.Status = resource.StatusError
	}
	if h.IPAddress != "" {
		ip, err := netip.ParseAddr(h.IPAddress)
		if err != nil || len(ip.WithZone("").String()) > MaxTextField {
			lost = append(lost, fmt.Sprintf("ipAddress %q is not an IP address: sent empty", text(h.IPAddress, 45)))
			h.IPAddress = ""
		} else {
			h.IPAddress = ip.WithZone("").String()
		}
	}
	h.AppliedVersion = max(h.AppliedVersion, 0)
	chans := make([]ChannelState, 0, min(len(h.Channels), MaxChannels))
	for _, c := range h.Channels {
		switch {
		case c.ID == "" || len(c.ID) > MaxChannelID || !utf8.ValidString(c.ID):
			lost = append(lost, fmt.Sprintf("channel id %q is not 1 to %d bytes of UTF-8: channel left out", text(c.ID, 40), MaxChannelID))
			continue
		case indexOfID(chans, c.ID) >= 0:
			lost = append(lost, fmt.Sprintf("channel id %q repeated: the second left out", c.ID))
			continue
		case len(chans) == MaxChannels:
			lost = append(lost, fmt.Sprintf("over %d channels: channel %q left out", MaxChannels, c.ID))
			continue
		}
		clampTexts(&c, channelTexts[:])
		c.Points, lost = clampPointStates(c.ID, c.Points, h.At.Time, lost)
		chans = append(chans, c)
	}
	h.Channels = chans
	if h.VPN != nil {
		v := *h.VPN
		clampTexts(&v, vpnTexts[:])
		v.PeerCount = max(v.PeerCount, 0)
		h.VPN = &v
	}
	if fitHeartbeat(h) {
		lost = append(lost, fmt.Sprintf("over %d KiB as JSON: channels' live values and errors shortened, or their points left out", MaxMessageBytes>>10))
	}
	return lost
}

// notFinite is the error of a point whose value is NaN or infinite.
const notFinite = "not a finite number"

// clampPointStates returns a copy of a channel's point states within
// Table, their times seen from at, the heartbeat's, with lost extended by
// what it left out.
func clampPointStates(channel string, ps []PointState, at time.Time, lost []string) ([]PointState, []string) {
	if len(ps) == 0 {
		return nil, lost
	}
	out := make([]PointState, 0, min(len(ps), serialcfg.MaxPoints))
	for _, p := range ps {
		switch {
		case !serialcfg.ValidPointName(p.Name):
			lost = append(lost, fmt.Sprintf("channel %q: point name %q is not [a-z][a-z0-9_]* of at most %d bytes: point left out", channel, text(p.Name, 40), serialcfg.MaxPointName))
			continue
		case indexOfPoint(out, p.Name) >= 0:
			lost = append(lost, fmt.Sprintf("channel %q: point %q repeated: the second left out", channel, p.Name))
			continue
		case len(out) == serialcfg.MaxPoints:
			lost = append(lost, fmt.Sprintf("channel %q: over %d points: point %q left out", channel, serialcfg.MaxPoints, p.Name))
			continue
		}
		if !ValidQuality(p.Quality) {
			lost = append(lost, fmt.Sprintf("channel %q: point %q quality %q is not good, bad or stale: sent as bad", channel, p.Name, text(p.Quality, 20)))
			p.Quality = serialcfg.QualityBad
		}
		if !finite(p.Value) {
			p.Quality, p.Error = serialcfg.QualityBad, notFinite
		}
		if p.Quality == serialcfg.QualityBad {
			p.Value = 0
		}
		p.Error = text(p.Error, MaxChannelError)
		if !p.At.IsZero() && !SaneTime(p.At.Time, at) {
			p.At = resource.Time{}
		}
		out = append(out, p)
	}
	return out, lost
}

// heartbeatOverhead bounds the bytes of a heartbeat message besides its
// strings, and channelOverhead those of one channel besides its strings.
const (
	heartbeatOverhead = 512
	channelOverhead   = 160
	// pointOverhead bounds the bytes of one point state besides its name
	// and error (a value of up to 24 characters, a time, the quality).
	pointOverhead = 120
)

// fitHeartbeat shortens the channels' live values, then their errors, last
// channel first, then leaves out their points, last channel first, until
// the heartbeat is within MaxMessageBytes as JSON writes it (each string as
// long as jsonLen says; CBOR's is shorter). Each field within its bound,
// 64 channels of escaped text (or of 64 points each) would not be. It
// reports whether it shortened anything.
func fitHeartbeat(h *Heartbeat) bool {
	size := heartbeatOverhead + jsonLen(h.IPAddress)
	if v := h.VPN; v != nil {
		size += jsonLen(v.InterfaceName) + jsonLen(v.Endpoint)
	}
	for _, c := range h.Channels {
		size += channelOverhead + jsonLen(c.ID) + jsonLen(c.Live) + jsonLen(c.Error) + jsonLen(c.PassthroughAddress) + pointsLen(c.Points)
	}
	over := size - MaxMessageBytes
	for i := len(h.Channels) - 1; i >= 0 && over > 0; i-- {
		for _, p := range []*string{&h.Channels[i].Live, &h.Channels[i].Error} {
			n := jsonLen(*p)
			*p = shortenJSON(*p, max(n-over, 0))
			over -= n - jsonLen(*p)
		}
	}
	for i := len(h.Channels) - 1; i >= 0 && over > 0; i-- {
		over -= pointsLen(h.Channels[i].Points)
		h.Channels[i].Points = nil
	}
	return size > MaxMessageBytes
}

// pointsLen bounds the length of point states as JSON.
func pointsLen(ps []PointState) int {
	n := 0
	for _, p := range ps {
		n += pointOverhead + jsonLen(p.Name) + jsonLen(p.Error)
	}
	return n
}

// jsonLen bounds the length of s, valid UTF-8, inside a JSON string as
// encoding/json writes it (HTML characters and control characters as
// \u00XX, U+2028 and U+2029 escaped).
func jsonLen(s string) int {
	n := 0
	for _, r := range s {
		n += runeJSONLen(r)
	}
	return n
}

func runeJSONLen(r rune) int {
	switch {
	case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029' || r == utf8.RuneError:
		return 6
	case r == '"' || r == '\\':
		return 2
	}
	return utf8.RuneLen(r)
}

// shortenJSON returns the longest prefix of s, valid UTF-8, whose jsonLen
// is at most n.
func shortenJSON(s string, n int) string {
	used := 0
	for i, r := range s {
		if used += runeJSONLen(r); used > n {
			return s[:i]
		}
	}
	return s
}

// ClampRecord brings a record within Table, its times seen from now, the
// agent's clock. It returns a *BoundError, or ErrClockNotSet for a time
// before 2020, when the record cannot be made acceptable: it must then not
// be spooled. Metric values are made finite and clamped to their ranges,
// text is shortened, and event data that is not a JSON object or is over
// MaxEventDataBytes as the agent sends it (compact, HTML characters
// escaped) is replaced by {"truncated":true}.
func ClampRecord(r *Record, now time.Time) error {
	switch {
	case kinds(r) != 1:
		return outOfBound("", "holds exactly one of metric, event and points")
	case r.Points != nil:
		return clampPointSamples(r.Points, now)
	case r.Metric != nil:
		m := r.Metric
		if ClockNotSet(m.CapturedAt.Time) {
			return ErrClockNotSet
		}
		if !SaneTime(m.CapturedAt.Time, now) {
			return outOfBound("metric.capturedAt", "%s is more than %s ahead", resource.FormatTime(m.CapturedAt.Time), MaxFutureSkew)
		}
		for _, b := range MetricRanges() {
			v := b.Value(m)
			if math.IsNaN(*v) {
				*v = 0
			}
			*v = min(max(*v, b.Lo), b.Hi)
		}
		clampMissing(m)
	case r.Event != nil:
		e := r.Event
		if ClockNotSet(e.CreatedAt.Time) {
			return ErrClockNotSet
		}
		switch {
		case !SaneTime(e.CreatedAt.Time, now):
			return outOfBound("event.createdAt", "%s is more than %s ahead", resource.FormatTime(e.CreatedAt.Time), MaxFutureSkew)
		case !ids.Valid(e.ID):
			return outOfBound("event.id", "%q is not an id", text(e.ID, 40))
		case !ValidEventType(e.Type) || RelayEventType(e.Type):
			return outOfBound("event.type", "%q is not lowercase dotted words of at most %d bytes, or is the relay's own", text(e.Type, 80), MaxEventType)
		case !e.Severity.Valid():
			return outOfBound("event.severity", "%q is not INFO, WARNING, ERROR or CRITICAL", text(string(e.Severity), 20))
		}
		clampTexts(e, eventTexts[:])
		e.Data = clampData(e.Data)
	}
	return nil
}

// clampPointSamples brings a points record within Table: a sample whose
// point id or time the relay would refuse is left out (the error names the
// first, for the log, when any is; ErrClockNotSet when it is the time),
// a value that is not finite is recorded as a bad sample, errors are
// shortened. A record left without samples, or over MaxPointSamples or
// MaxPointBatchBytes (SplitPointSamples keeps within them), returns a
// *BoundError: it must not be spooled.
func clampPointSamples(b *PointBatch, now time.Time) error {
	if len(b.Samples) > MaxPointSamples || SamplesLen(b.Samples) > MaxPointBatchBytes {
		return outOfBound("points.samples", "over %d samples or %d KiB", MaxPointSamples, MaxPointBatchBytes>>10)
	}
	var first error
	kept := b.Samples[:0:0]
	for i, s := range b.Samples {
		var err error
		switch {
		case len(s.Point) > MaxPointID || !ValidPointID(s.Point):
			err = outOfBound(fmt.Sprintf("points.samples[%d].point", i), "%q is not <channelId>.<name>", text(s.Point, 80))
		case ClockNotSet(s.At.Time):
			err = ErrClockNotSet
		case !SaneTime(s.At.Time, now):
			err = outOfBound(fmt.Sprintf("points.samples[%d].at", i), "%s is more than %s ahead", resource.FormatTime(s.At.Time), MaxFutureSkew)
		}
		if err != nil {
			first = cmp.Or(first, err)
			continue
		}
		if !finite(s.Value) {
			s.Value, s.Error = 0, notFinite
		}
		if s.Error != "" {
			s.Value = 0
		}
		s.Error = text(s.Error, MaxChannelError)
		kept = append(kept, s)
	}
	b.Samples = kept
	if len(kept) == 0 {
		if first == nil {
			first = outOfBound("points.samples", "has no samples")
		}
		return first
	}
	return nil
}

// sampleOverhead bounds the bytes of one point sample as JSON besides its
// point id and error.
const sampleOverhead = 96

// SamplesLen bounds the length of point samples as JSON.
func SamplesLen(ss []PointSample) int {
	n := 0
	for _, s := range ss {
		n += SampleLen(s)
	}
	return n
}

// SampleLen bounds the length of one point sample as JSON once clamped
// (its error shortened to MaxChannelError bytes).
func SampleLen(s PointSample) int {
	return sampleOverhead + min(jsonLen(s.Point), 6*MaxPointID) + min(jsonLen(s.Error), 6*MaxChannelError)
}

// SplitPointSamples cuts a round's samples into batches of at most
// MaxPointSamples samples and MaxPointBatchBytes as JSON, in order.
func SplitPointSamples(ss []PointSample) [][]PointSample {
	var out [][]PointSample
	start, size := 0, 0
	for i, s := range ss {
		n := SampleLen(s)
		if i > start && (i-start == MaxPointSamples || size+n > MaxPointBatchBytes) {
			out = append(out, ss[start:i])
			start, size = i, 0
		}
		size += n
	}
	if start < len(ss) {
		out = append(out, ss[start:])
	}
	return out
}

// clampData returns d as the agent sends it (encoding/json writes a
// json.RawMessage compact, with <, > and & escaped), or truncatedData when
// that is not a JSON object within MaxEventDataBytes. Null data is absent.
func clampData(d json.RawMessage) json.RawMessage {
	if len(d) == 0 || bytes.Equal(bytes.TrimSpace(d), []byte("null")) {
		return nil
	}
	if !IsJSONObject(d) {
		return truncatedData
	}
	sent, err := json.Marshal(d)
	if err != nil || len(sent) > MaxEventDataBytes {
		return truncatedData
	}
	return sent
}

// ClampConfigApplied brings a configApplied within Table, but for its
// version's upper bound, which is the relay's state (the agent answers the
// version it was sent).
func ClampConfigApplied(a *ConfigApplied) {
	a.Version = max(a.Version, 0)
	clampTexts(a, configAppliedTexts[:])
}

// clampMissing keeps of a sample's missing the names of its metrics, each
// once, in the order of resource.MetricNames, and sends each named metric
// as 0 (nil when none is left).
func clampMissing(m *resource.MetricSample) {
	if m.Missing == nil {
		return
	}
	names := resource.MissingNames(resource.MissingMask(m.Missing))
	for _, r := range MetricRanges() {
		if m.Lacks(r.Name) {
			*r.Value(m) = 0
		}
	}
	m.Missing = names
}
