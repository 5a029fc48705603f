package agentlink

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// FuzzAgentOutputAccepted holds the two sides of shared/protocol's bounds
// table to each other: whatever an agent puts in a message, once the
// agent's clamps (protocol.Clamp*) have let it through, encoded as the agent
// encodes it (JSON, or CBOR from the spool's JSON), the relay's decoder and
// validation accept it. A message the relay refused would be sent again
// forever (a heartbeat at every beat, a record at every reconnect).
func FuzzAgentOutputAccepted(f *testing.F) {
	f.Add(false, "1.4.2", "10.0.0.7", "ttyS0,ttyS1,can0", int64(3), 42.5, uint64(1), uint8(0xff))
	f.Add(true, "é\xff\xfe", "fe80::1%eth0", strings.Repeat("c", 200)+",a,a,", int64(-1), math.NaN(), uint64(protocol.MaxSeq), uint8(0))
	f.Add(true, "<&>", `{"a":"<&>"}`, strings.Repeat("<", protocol.MaxEventDataBytes/2), int64(1<<40), math.Inf(-1), uint64(1<<63), uint8(0x0f))
	ids64 := make([]string, protocol.MaxChannels)
	for i := range ids64 {
		ids64[i] = strings.Repeat(string(rune('a'+i%26)), 1+i%protocol.MaxChannelID)
	}
	f.Add(false, strings.Repeat("<", 2*protocol.MaxLive), strings.Repeat("\x01", protocol.MaxChannelError), strings.Join(ids64, ","), int64(0), 1.0, uint64(1), uint8(0))
	f.Add(false, "PROVISIONING", "[1,2]", "device.online", int64(math.MinInt64), -1e300, uint64(0), uint8(0x31))
	f.Add(true, "boiler_temp", "modbus exception 2: illegal data address (slave 7)", "rs485-1,can0,gpio-1", int64(5e9), 21.5, uint64(7), uint8(0xe0))
	f.Add(false, "level", "", "gpio-1", int64(-3e9), math.Inf(1), uint64(9), uint8(0x60))
	now := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	var d decoder
	f.Fuzz(func(t *testing.T, cbor bool, s1, s2, s3 string, n int64, x float64, seq uint64, pick uint8) {
		codec := protocol.JSON
		if cbor {
			codec = protocol.CBOR
		}
		// accepted sends m as the agent would and fails unless the relay
		// takes it.
		accepted := func(codec protocol.Codec, m protocol.Message, validate func(protocol.Message) error) {
			t.Helper()
			b, err := codec.Marshal(&m)
			if err != nil {
				t.Fatalf("%s does not encode in %s: %v", m.Type, codec, err)
			}
			if len(b) > protocol.MaxMessageBytes {
				t.Fatalf("a clamped %s of %d bytes in %s, over MaxMessageBytes", m.Type, len(b), codec)
			}
			got, err := d.decode(codec, b)
			if err == nil {
				err = validate(got)
			}
			if err != nil {
				t.Fatalf("the relay refuses a clamped %s in %s: %v\n%q", m.Type, codec, err, b)
			}
		}
		after := time.Duration(n % int64(72*time.Hour))

		hello := protocol.Hello{AgentVersion: s1, FirmwareVersion: s2, Model: s3, DeviceName: s1 + s2, DeviceLocation: s2 + s3, Timezone: s3,
			AppliedVersion: n, HeartbeatInterval: protocol.Duration{Duration: time.Duration(n)}, MetricsInterval: protocol.Duration{Duration: -time.Duration(n)}}
		protocol.ClampHello(&hello)
		accepted(protocol.JSON, protocol.Message{Type: protocol.TypeHello, Hello: &hello}, func(m protocol.Message) error { return validateHello(m.Hello) })

		hb := protocol.Heartbeat{At: resource.T(now), Status: resource.DeviceStatus(s1), IPAddress: s2, AppliedVersion: -n,
			VPN: &protocol.VPN{Up: pick&1 != 0, InterfaceName: s1, Endpoint: s3, PeerCount: int(n)}}
		// Points: names, qualities and values from the fuzzer's, or
		// well-formed ones (pick's bits 5 and 6).
		name, quality := s1, s2
		if pick&32 != 0 {
			name = "boiler_temp"
		}
		if pick&64 != 0 {
			quality = []string{serialcfg.QualityGood, serialcfg.QualityBad, serialcfg.QualityStale}[int(pick>>4)%3]
		}
		for i, id := range strings.Split(s3, ",") {
			var points []protocol.PointState
			for j := range i % 3 * 40 {
				points = append(points, protocol.PointState{Name: name + strings.Repeat("x", j%2), Value: x * float64(j), Quality: quality,
					Error: strings.Repeat(s2, j%4), At: resource.T(now.Add(after * time.Duration(j%3)))})
			}
			hb.Channels = append(hb.Channels, protocol.ChannelState{ID: id, Live: strings.Repeat(s1, i%3), Error: s2, PassthroughAddress: s3, Points: points})
		}
		protocol.ClampHeartbeat(&hb)
		accepted(codec, protocol.Message{Type: protocol.TypeHeartbeat, Heartbeat: &hb}, func(m protocol.Message) error { return validateHeartbeat(m.Heartbeat) })

		res := protocol.ConfigApplied{Version: min(n, 0), Error: s1 + s3}
		protocol.ClampConfigApplied(&res)
		accepted(codec, protocol.Message{Type: protocol.TypeConfigApplied, ConfigApplied: &res}, func(m protocol.Message) error {
			return refused(protocol.CheckConfigApplied(m.ConfigApplied))
		})

		// A command status: the id of a command the agent took (a valid one,
		// CheckCommand refuses others) or the fuzzer's, which the clamp
		// refuses and the agent never sends.
		cmdID := s1
		if pick&2 != 0 {
			cmdID = ids.New()
		}
		cs := protocol.CommandStatus{ID: cmdID, State: s3, Error: s1 + s2 + s3, Version: s2}
		if pick&4 != 0 {
			cs.State = protocol.CommandRolledBack
		}
		if protocol.ClampCommandStatus(&cs) == nil {
			accepted(codec, protocol.Message{Type: protocol.TypeCommandStatus, CommandStatus: &cs}, func(m protocol.Message) error {
				return refused(protocol.CheckCommandStatus(m.CommandStatus))
			})
		}

		// Records: a metric and an event, each from the fuzzer's values or a
		// well-formed one (pick's bits), numbered as a spool numbers them.
		metric := &resource.MetricSample{CapturedAt: resource.T(now.Add(after)), CPUPct: x, MemPct: -x, DiskUsedPct: x * 1e6, TempCPU: math.Sqrt(x), LoadAvg1: float64(n),
			Missing: strings.Split(s1, ",")} // the metrics the host lacks: the fuzzer's names, known or not
		ev := &protocol.Event{ID: s1, Type: s2, Severity: resource.Severity(s3), Message: s1 + s2 + s3, Data: json.RawMessage(s2), CreatedAt: resource.T(now.Add(-after))}
		if pick&2 != 0 {
			ev.ID = ids.New()
		}
		if pick&4 != 0 {
			ev.Type = protocol.EventSerialError
		}
		if pick&8 != 0 {
			ev.Severity = resource.Severities[int(pick>>4)%len(resource.Severities)]
		}
		if pick&16 != 0 {
			b, _ := json.Marshal(map[string]string{"k": s3})
			ev.Data = b
		}
		var samples []protocol.PointSample
		for i, id := range strings.Split(s3, ",") {
			point := id + "." + name
			if pick&128 != 0 {
				point = serialcfg.PointID("rs485-1", name)
			}
			samples = append(samples, protocol.PointSample{Point: point, At: resource.T(now.Add(after * time.Duration(i%3-1))), Value: x * float64(i), Error: strings.Repeat(s2, i%3)})
		}
		recs := []protocol.Record{{Metric: metric}, {Event: ev}}
		for _, b := range protocol.SplitPointSamples(samples) {
			recs = append(recs, protocol.Record{Points: &protocol.PointBatch{Samples: b}})
		}
		var items []protocol.Record
		seq = max(seq%(protocol.MaxSeq+1), 1)
		for _, r := range recs {
			if protocol.ClampRecord(&r, now) != nil {
				continue // not spooled
			}
			// The spool keeps the agent's JSON; CBOR is made from it.
			payload, err := json.Marshal(r)
			if err != nil {
				t.Fatalf("spool payload: %v", err)
			}
			var spooled protocol.Record
			if err := json.Unmarshal(payload, &spooled); err != nil {
				t.Fatalf("spooled record does not decode: %v", err)
			}
			if seq > protocol.MaxSeq {
				break // the spool gives no number above MaxSeq
			}
			spooled.Seq = seq
			seq++
			items = append(items, spooled)
		}
		if len(items) > 0 {
			accepted(codec, protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: items}}, func(m protocol.Message) error {
				return validateRecords(m.Records.Items, items[0].Seq-1, now) // the relay's last, as welcomed
			})
		}
	})
}
