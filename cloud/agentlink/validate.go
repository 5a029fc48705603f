package agentlink

import (
	"bytes"
	"encoding/json"
	"math"
	"net/netip"
	"time"

	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// Bounds on what agents report are shared/protocol's (bounds.go), which the
// agent keeps within too. Records may be at most maxFutureSkew ahead of the
// relay's clock.
const maxFutureSkew = 24 * time.Hour

// storedDeadlineBeats is how many heartbeat intervals ahead the stored
// deadline is set (refreshed when fewer than three remain). The relay holding
// the connection takes a silent device OFFLINE after exactly three
// intervals; the stored deadline matters only when that relay died, and then
// the device goes OFFLINE within six.
const storedDeadlineBeats = 6

func newID() string { return ids.New() }

func validateHello(h *protocol.Hello) error {
	for _, f := range []struct{ name, v string }{
		{"agentVersion", h.AgentVersion}, {"firmwareVersion", h.FirmwareVersion}, {"model", h.Model},
		{"deviceName", h.DeviceName}, {"deviceLocation", h.DeviceLocation}, {"timezone", h.Timezone},
	} {
		if len(f.v) > protocol.MaxTextField {
			return protoErr("hello.%s longer than %d bytes", f.name, protocol.MaxTextField)
		}
	}
	if h.AppliedVersion < 0 {
		return protoErr("hello.appliedVersion must not be negative")
	}
	if h.HeartbeatInterval.Duration < 0 || h.MetricsInterval.Duration < 0 {
		return protoErr("hello intervals must not be negative")
	}
	return nil
}

func validateHeartbeat(h *protocol.Heartbeat) error {
	switch h.Status {
	case resource.StatusOnline, resource.StatusRebooting, resource.StatusUpdating, resource.StatusError:
	default:
		return protoErr("heartbeat.status %q is not ONLINE, REBOOTING, UPDATING or ERROR", h.Status)
	}
	if len(h.IPAddress) > protocol.MaxTextField {
		return protoErr("heartbeat.ipAddress longer than %d bytes", protocol.MaxTextField)
	}
	if h.IPAddress != "" {
		ip, err := netip.ParseAddr(h.IPAddress)
		if err != nil || ip.Zone() != "" {
			return protoErr("heartbeat.ipAddress %q is not an IP address", truncate(h.IPAddress, 45))
		}
		// One spelling stored: the canonical one (compared without a copy).
		var buf [64]byte
		if canon := ip.AppendTo(buf[:0]); string(canon) != h.IPAddress {
			h.IPAddress = ip.String()
		}
	}
	if len(h.Channels) > protocol.MaxChannels {
		return protoErr("heartbeat has %d channels, over %d", len(h.Channels), protocol.MaxChannels)
	}
	if h.AppliedVersion < 0 {
		return protoErr("heartbeat.appliedVersion must not be negative")
	}
	seen := make(map[string]bool, len(h.Channels))
	for i, c := range h.Channels {
		switch {
		case c.ID == "" || len(c.ID) > 32:
			return protoErr("heartbeat.channels[%d].id missing or too long", i)
		case seen[c.ID]:
			return protoErr("heartbeat.channels[%d].id %q repeated", i, c.ID)
		case len(c.Live) > protocol.MaxLive:
			return protoErr("heartbeat.channels[%d].live longer than %d bytes", i, protocol.MaxLive)
		case len(c.Error) > protocol.MaxChannelError:
			return protoErr("heartbeat.channels[%d].error longer than %d bytes", i, protocol.MaxChannelError)
		case len(c.PassthroughAddress) > protocol.MaxTextField:
			return protoErr("heartbeat.channels[%d].passthroughAddress too long", i)
		}
		seen[c.ID] = true
	}
	if v := h.VPN; v != nil && (len(v.InterfaceName) > protocol.MaxTextField || len(v.Endpoint) > protocol.MaxTextField || v.PeerCount < 0) {
		return protoErr("heartbeat.vpn fields out of bounds")
	}
	return nil
}

// reservedEventTypes are recorded by the relay only.
var reservedEventTypes = map[string]bool{
	protocol.EventHeartbeat:     true,
	protocol.EventDeviceOnline:  true,
	protocol.EventDeviceOffline: true,
	protocol.EventAlertResolved: true,
}

func saneTime(t time.Time, now time.Time) bool {
	return !protocol.ClockNotSet(t) && !t.After(now.Add(maxFutureSkew))
}

// metricOutOfRange returns the first field of m out of its range, if any.
func metricOutOfRange(m *resource.MetricSample) (protocol.MetricRange, bool) {
	for _, b := range protocol.MetricRanges() {
		if v := *b.Value(m); math.IsNaN(v) || math.IsInf(v, 0) || v < b.Lo || v > b.Hi {
			return b, true
		}
	}
	return protocol.MetricRange{}, false
}

func validateRecords(items []protocol.Record, now time.Time) error {
	var prev uint64
	for i, r := range items {
		if r.Seq > protocol.MaxSeq {
			return protoErr("records.items[%d].seq %d is above the protocol's bound 2^63-1", i, r.Seq)
		}
		if r.Seq == 0 || r.Seq <= prev {
			return protoErr("records.items[%d].seq %d is not above the previous %d", i, r.Seq, prev)
		}
		prev = r.Seq
		switch {
		case r.Metric != nil && r.Event != nil:
			return protoErr("records.items[%d] holds both a metric and an event", i)
		case r.Metric != nil:
			m := r.Metric
			if !saneTime(m.CapturedAt.Time, now) {
				return protoErr("records.items[%d].metric.capturedAt %s out of range", i, resource.FormatTime(m.CapturedAt.Time))
			}
			if b, out := metricOutOfRange(m); out {
				return protoErr("records.items[%d].metric.%s out of %g..%g", i, b.Name, b.Lo, b.Hi)
			}
		case r.Event != nil:
			e := r.Event
			switch {
			case !ids.Valid(e.ID):
				return protoErr("records.items[%d].event.id is not an id", i)
			case !protocol.ValidEventType(e.Type):
				return protoErr("records.items[%d].event.type %q is not a valid type", i, truncate(e.Type, 40))
			case reservedEventTypes[e.Type]:
				return protoErr("records.items[%d].event.type %q is recorded by the relay only", i, e.Type)
			case !e.Severity.Valid():
				return protoErr("records.items[%d].event.severity %q is not INFO, WARNING, ERROR or CRITICAL", i, truncate(string(e.Severity), 20))
			case len(e.Message) > protocol.MaxEventMessage:
				return protoErr("records.items[%d].event.message longer than %d bytes", i, protocol.MaxEventMessage)
			case len(e.Data) > protocol.MaxEventDataBytes:
				return protoErr("records.items[%d].event.data over %d bytes", i, protocol.MaxEventDataBytes)
			case !saneTime(e.CreatedAt.Time, now):
				return protoErr("records.items[%d].event.createdAt out of range", i)
			}
			if len(e.Data) > 0 {
				d := bytes.TrimSpace(e.Data)
				if bytes.Equal(d, []byte("null")) {
					e.Data = nil
				} else if !protocol.IsJSONObject(d) {
					return protoErr("records.items[%d].event.data must be a JSON object", i)
				} else {
					var buf bytes.Buffer
					if err := json.Compact(&buf, d); err == nil {
						e.Data = buf.Bytes()
					}
				}
			}
		default:
			return protoErr("records.items[%d] holds neither a metric nor an event", i)
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
