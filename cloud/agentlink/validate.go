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

// Bounds on what agents report, beyond the protocol's limits.
const (
	maxTextField    = 200  // hello strings, ip address
	maxLive         = 1024 // channel live value
	maxChannelError = 512
	maxEventMessage = 2048
	maxEventType    = 64
)

// earliestRecord is the oldest capturedAt/createdAt accepted; records may be
// at most maxFutureSkew ahead of the relay's clock.
var earliestRecord = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

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
		if len(f.v) > maxTextField {
			return protoErr("hello.%s longer than %d bytes", f.name, maxTextField)
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
	if len(h.IPAddress) > maxTextField {
		return protoErr("heartbeat.ipAddress longer than %d bytes", maxTextField)
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
		case len(c.Live) > maxLive:
			return protoErr("heartbeat.channels[%d].live longer than %d bytes", i, maxLive)
		case len(c.Error) > maxChannelError:
			return protoErr("heartbeat.channels[%d].error longer than %d bytes", i, maxChannelError)
		case len(c.PassthroughAddress) > maxTextField:
			return protoErr("heartbeat.channels[%d].passthroughAddress too long", i)
		}
		seen[c.ID] = true
	}
	if v := h.VPN; v != nil && (len(v.InterfaceName) > maxTextField || len(v.Endpoint) > maxTextField || v.PeerCount < 0) {
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

// validEventType: lowercase dotted words, such as "usb.attached".
func validEventType(t string) bool {
	if t == "" || len(t) > maxEventType {
		return false
	}
	word := false
	for i := 0; i < len(t); i++ {
		ch := t[i]
		switch {
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

func saneTime(t time.Time, now time.Time) bool {
	return !t.Before(earliestRecord) && !t.After(now.Add(maxFutureSkew))
}

func finiteIn(v, lo, hi float64) bool {
	return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= lo && v <= hi
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
			switch {
			case !saneTime(m.CapturedAt.Time, now):
				return protoErr("records.items[%d].metric.capturedAt %s out of range", i, resource.FormatTime(m.CapturedAt.Time))
			case !finiteIn(m.CPUPct, 0, 100):
				return protoErr("records.items[%d].metric.cpuPct out of 0..100", i)
			case !finiteIn(m.MemPct, 0, 100):
				return protoErr("records.items[%d].metric.memPct out of 0..100", i)
			case !finiteIn(m.DiskUsedPct, 0, 100):
				return protoErr("records.items[%d].metric.diskUsedPct out of 0..100", i)
			case !finiteIn(m.TempCPU, -100, 300):
				return protoErr("records.items[%d].metric.tempCpu out of -100..300", i)
			case !finiteIn(m.LoadAvg1, 0, 100000):
				return protoErr("records.items[%d].metric.loadAvg1 out of 0..100000", i)
			}
		case r.Event != nil:
			e := r.Event
			switch {
			case !ids.Valid(e.ID):
				return protoErr("records.items[%d].event.id is not an id", i)
			case !validEventType(e.Type):
				return protoErr("records.items[%d].event.type %q is not a valid type", i, truncate(e.Type, 40))
			case reservedEventTypes[e.Type]:
				return protoErr("records.items[%d].event.type %q is recorded by the relay only", i, e.Type)
			case !e.Severity.Valid():
				return protoErr("records.items[%d].event.severity %q is not INFO, WARNING, ERROR or CRITICAL", i, truncate(string(e.Severity), 20))
			case len(e.Message) > maxEventMessage:
				return protoErr("records.items[%d].event.message longer than %d bytes", i, maxEventMessage)
			case len(e.Data) > protocol.MaxEventDataBytes:
				return protoErr("records.items[%d].event.data over %d bytes", i, protocol.MaxEventDataBytes)
			case !saneTime(e.CreatedAt.Time, now):
				return protoErr("records.items[%d].event.createdAt out of range", i)
			}
			if len(e.Data) > 0 {
				d := bytes.TrimSpace(e.Data)
				if bytes.Equal(d, []byte("null")) {
					e.Data = nil
				} else if len(d) == 0 || d[0] != '{' || !json.Valid(d) {
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
