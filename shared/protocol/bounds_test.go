package protocol

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

func TestValidEventType(t *testing.T) {
	for typ, want := range map[string]bool{
		"usb.attached": true, "serial.config_applied": true, "a": true, "a1.b_2": true, strings.Repeat("a", MaxEventType): true,
		"": false, "Serial.error": false, "serial error": false, "1usb": false, ".usb": false, "usb.": false, "usb..x": false,
		"usb._x": false, "usb-attached": false, strings.Repeat("a", MaxEventType+1): false, "é": false,
	} {
		if got := ValidEventType(typ); got != want {
			t.Errorf("ValidEventType(%q) = %v, want %v", typ, got, want)
		}
	}
}

func TestIsJSONObject(t *testing.T) {
	for d, want := range map[string]bool{
		`{}`: true, ` {"a":1} `: true, "\n{\"a\":[1,2]}\t": true,
		``: false, ` `: false, `[1]`: false, `null`: false, `"x"`: false, `{"a":`: false, `{} {}`: false,
	} {
		if got := IsJSONObject([]byte(d)); got != want {
			t.Errorf("IsJSONObject(%q) = %v, want %v", d, got, want)
		}
	}
}

func TestClockNotSet(t *testing.T) {
	if !ClockNotSet(time.Date(2019, 12, 31, 23, 59, 59, 0, time.UTC)) || !ClockNotSet(time.Unix(0, 0)) {
		t.Fatal("a time before 2020 passes as set")
	}
	if ClockNotSet(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)) || ClockNotSet(time.Now()) {
		t.Fatal("a time from 2020 on counts as not set")
	}
}

// TestMetricRangesCoverEverySampleField: every number of a metric sample has
// one range, named by its JSON name, pointing at that very field.
func TestMetricRangesCoverEverySampleField(t *testing.T) {
	ranges := MetricRanges()
	byName := map[string]MetricRange{}
	for _, r := range ranges {
		if r.Lo >= r.Hi {
			t.Errorf("%s: empty range %g..%g", r.Name, r.Lo, r.Hi)
		}
		byName[r.Name] = r
	}
	st := reflect.TypeOf(resource.MetricSample{})
	numbers := 0
	for i := 0; i < st.NumField(); i++ {
		f := st.Field(i)
		if f.Type.Kind() != reflect.Float64 {
			continue
		}
		numbers++
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		r, ok := byName[name]
		if !ok {
			t.Errorf("metric field %s (%s) has no range", f.Name, name)
			continue
		}
		var m resource.MetricSample
		*r.Value(&m) = 42
		if got := reflect.ValueOf(m).Field(i).Float(); got != 42 {
			t.Errorf("range %s does not point at field %s", name, f.Name)
		}
	}
	if numbers != len(ranges) {
		t.Errorf("%d number fields, %d ranges", numbers, len(ranges))
	}
}

// TestChannelIDBoundAgrees is the disagreement that made the table: the
// agent shortened a channel id to 200 bytes where the relay refused more
// than 32, so a heartbeat with a long id was refused at every beat. An id
// the relay refuses is now left out by the agent, never shortened (two
// shortened ids could be one).
func TestChannelIDBoundAgrees(t *testing.T) {
	long := strings.Repeat("c", MaxChannelID+1)
	hb := Heartbeat{Status: resource.StatusOnline, Channels: []ChannelState{
		{ID: long}, {ID: "ttyS0"}, {ID: ""}, {ID: "ttyS0"}, {ID: "bad\xff"}, {ID: strings.Repeat("d", MaxChannelID)},
	}}
	if err := CheckHeartbeat(&hb); err == nil || !strings.Contains(err.Error(), "channels[0].id") {
		t.Fatalf("the relay's check of a %d-byte id: %v", len(long), err)
	}
	lost := ClampHeartbeat(&hb)
	if len(lost) != 4 {
		t.Errorf("lost %q, want 4 lines", lost)
	}
	if len(hb.Channels) != 2 || hb.Channels[0].ID != "ttyS0" || len(hb.Channels[1].ID) != MaxChannelID {
		t.Fatalf("channels after the clamp: %+v", hb.Channels)
	}
	if err := CheckHeartbeat(&hb); err != nil {
		t.Fatalf("the relay refuses the clamped heartbeat: %v", err)
	}
}

// TestBounds: each rule of the table at its edge, on both sides: the
// relay's check accepts the value at the bound and refuses the one past
// it, and the agent's clamp turns the one past it into one the check
// accepts (or refuses the record, when nothing can be made of it).
func TestBounds(t *testing.T) {
	now := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	at := resource.T(now)
	ev := func(mod func(e *Event)) *Record {
		e := &Event{ID: "ckabcdefgh0123", Type: "usb.attached", Severity: resource.SeverityInfo, CreatedAt: at}
		mod(e)
		return &Record{Event: e}
	}
	met := func(mod func(m *resource.MetricSample)) *Record {
		m := &resource.MetricSample{CapturedAt: at}
		mod(m)
		return &Record{Metric: m}
	}
	hbt := func(mod func(h *Heartbeat)) *Heartbeat {
		h := &Heartbeat{At: at, Status: resource.StatusOnline, Channels: []ChannelState{{ID: "ttyS0"}}}
		mod(h)
		return h
	}
	pst := func(mod func(p *PointState)) *Heartbeat {
		return hbt(func(h *Heartbeat) {
			p := PointState{Name: "boiler_temp", Value: 21.5, Quality: "good", At: at}
			mod(&p)
			h.Channels[0].Points = []PointState{p}
		})
	}
	pts := func(mod func(s *PointSample)) *Record {
		s := PointSample{Point: "rs485-1.boiler_temp", At: at, Value: 21.5}
		mod(&s)
		return &Record{Points: &PointBatch{Samples: []PointSample{s}}}
	}
	samples := func(n int) *Record {
		b := &PointBatch{Samples: make([]PointSample, n)}
		for i := range b.Samples {
			b.Samples[i] = PointSample{Point: "can0.s" + strconv.Itoa(i), At: at, Value: float64(i)}
		}
		return &Record{Points: b}
	}
	states := func(n int) *Heartbeat {
		return hbt(func(h *Heartbeat) {
			for i := range n {
				h.Channels[0].Points = append(h.Channels[0].Points, PointState{Name: "p" + strconv.Itoa(i), Quality: "stale"})
			}
		})
	}
	n := func(s string, k int) string { return strings.Repeat(s, k) }
	type side int
	const (
		clamped    side = iota // the clamp makes it acceptable
		notSpooled             // the clamp refuses the record
	)
	tests := []struct {
		name   string
		msg    any // *Hello, *Heartbeat, *Record, *ConfigApplied
		field  string
		clamp  side
		within any // the same at the bound, which both accept
	}{
		{"hello text", &Hello{Model: n("m", MaxTextField+1)}, "hello.model", clamped, &Hello{Model: n("m", MaxTextField)}},
		{"hello applied version", &Hello{AppliedVersion: -1}, "hello.appliedVersion", clamped, &Hello{}},
		{"hello interval", &Hello{MetricsInterval: Duration{-time.Second}}, "hello intervals", clamped, &Hello{HeartbeatInterval: Duration{time.Hour}}},
		{"status", hbt(func(h *Heartbeat) { h.Status = resource.StatusProvisioning }), "heartbeat.status", clamped, hbt(func(h *Heartbeat) { h.Status = resource.StatusUpdating })},
		{"ip", hbt(func(h *Heartbeat) { h.IPAddress = "10.0.0.256" }), "heartbeat.ipAddress", clamped, hbt(func(h *Heartbeat) { h.IPAddress = "::ffff:10.0.0.1" })},
		{"ip zone", hbt(func(h *Heartbeat) { h.IPAddress = "fe80::1%eth0" }), "heartbeat.ipAddress", clamped, hbt(func(h *Heartbeat) { h.IPAddress = "fe80::1" })},
		{"heartbeat applied version", hbt(func(h *Heartbeat) { h.AppliedVersion = -5 }), "heartbeat.appliedVersion", clamped, hbt(func(h *Heartbeat) { h.AppliedVersion = math.MaxInt64 })},
		{"channels", hbt(func(h *Heartbeat) { h.Channels = channels(MaxChannels + 1) }), "heartbeat.channels", clamped, hbt(func(h *Heartbeat) { h.Channels = channels(MaxChannels) })},
		{"live", hbt(func(h *Heartbeat) { h.Channels[0].Live = n("é", MaxLive) }), "heartbeat.channels[0].live", clamped, hbt(func(h *Heartbeat) { h.Channels[0].Live = n("é", MaxLive/2) })},
		{"channel error", hbt(func(h *Heartbeat) { h.Channels[0].Error = n("e", MaxChannelError+1) }), "heartbeat.channels[0].error", clamped, hbt(func(h *Heartbeat) { h.Channels[0].Error = n("e", MaxChannelError) })},
		{"passthrough", hbt(func(h *Heartbeat) { h.Channels[0].PassthroughAddress = n("p", MaxTextField+1) }), "heartbeat.channels[0].passthroughAddress", clamped, hbt(func(h *Heartbeat) {})},
		{"vpn", hbt(func(h *Heartbeat) { h.VPN = &VPN{Endpoint: n("v", MaxTextField+1)} }), "heartbeat.vpn.endpoint", clamped, hbt(func(h *Heartbeat) { h.VPN = &VPN{Endpoint: n("v", MaxTextField)} })},
		{"peers", hbt(func(h *Heartbeat) { h.VPN = &VPN{PeerCount: -1} }), "heartbeat.vpn.peerCount", clamped, hbt(func(h *Heartbeat) { h.VPN = &VPN{PeerCount: 0} })},
		{"point states", states(serialcfg.MaxPoints + 1), "heartbeat.channels[0].points", clamped, states(serialcfg.MaxPoints)},
		{"point name", pst(func(p *PointState) { p.Name = "Boiler" }), "heartbeat.channels[0].points[0].name", clamped, pst(func(p *PointState) { p.Name = n("b", serialcfg.MaxPointName) })},
		{"point name repeated", hbt(func(h *Heartbeat) {
			h.Channels[0].Points = []PointState{{Name: "a", Quality: "bad"}, {Name: "a", Quality: "bad"}}
		}), "heartbeat.channels[0].points[1].name", clamped,
			hbt(func(h *Heartbeat) {
				h.Channels[0].Points = []PointState{{Name: "a", Quality: "bad"}, {Name: "b", Quality: "bad"}}
			})},
		{"point quality", pst(func(p *PointState) { p.Quality = "ok" }), "heartbeat.channels[0].points[0].quality", clamped, pst(func(p *PointState) { p.Quality = "stale" })},
		{"point value", pst(func(p *PointState) { p.Value = math.Inf(1) }), "heartbeat.channels[0].points[0].value", clamped, pst(func(p *PointState) { p.Value = math.MaxFloat64 })},
		{"bad point's value", pst(func(p *PointState) { p.Quality, p.Error = "bad", "timeout" }), "heartbeat.channels[0].points[0].value", clamped,
			pst(func(p *PointState) { p.Quality, p.Error, p.Value = "bad", n("e", MaxChannelError), 0 })},
		{"point error", pst(func(p *PointState) { p.Quality, p.Value, p.Error = "bad", 0, n("e", MaxChannelError+1) }), "heartbeat.channels[0].points[0].error", clamped, pst(func(p *PointState) {})},
		{"point at", pst(func(p *PointState) { p.At = resource.T(now.Add(MaxFutureSkew + time.Second)) }), "heartbeat.channels[0].points[0].at", clamped,
			pst(func(p *PointState) { p.At = resource.Time{} })},
		{"point samples", samples(MaxPointSamples + 1), "records.items[0].points.samples", notSpooled, samples(MaxPointSamples)},
		{"no point samples", samples(0), "records.items[0].points.samples", notSpooled, samples(1)},
		{"point id", pts(func(s *PointSample) { s.Point = "rs485-1.Boiler" }), "records.items[0].points.samples[0].point", notSpooled,
			pts(func(s *PointSample) { s.Point = n("c", MaxChannelID) + "." + n("b", serialcfg.MaxPointName) })},
		{"point id's channel", pts(func(s *PointSample) { s.Point = n("c", MaxChannelID+1) + ".b" }), "records.items[0].points.samples[0].point", notSpooled,
			pts(func(s *PointSample) { s.Point = "a.b.c" })},
		{"point id without a channel", pts(func(s *PointSample) { s.Point = "boiler" }), "records.items[0].points.samples[0].point", notSpooled, pts(func(s *PointSample) {})},
		{"point sample before 2020", pts(func(s *PointSample) { s.At = resource.T(earliestRecord.Add(-time.Millisecond)) }), "records.items[0].points.samples[0].at", notSpooled,
			pts(func(s *PointSample) { s.At = resource.T(earliestRecord) })},
		{"point sample ahead", pts(func(s *PointSample) { s.At = resource.T(now.Add(MaxFutureSkew + time.Second)) }), "records.items[0].points.samples[0].at", notSpooled,
			pts(func(s *PointSample) { s.At = resource.T(now.Add(MaxFutureSkew)) })},
		{"point sample value", pts(func(s *PointSample) { s.Value = math.NaN() }), "records.items[0].points.samples[0].value", clamped, pts(func(s *PointSample) { s.Value = -math.MaxFloat64 })},
		{"bad sample's value", pts(func(s *PointSample) { s.Error = "modbus timeout (slave 7)" }), "records.items[0].points.samples[0].value", clamped,
			pts(func(s *PointSample) { s.Value, s.Error = 0, "modbus timeout (slave 7)" })},
		{"point sample error", pts(func(s *PointSample) { s.Value, s.Error = 0, n("é", MaxChannelError) }), "records.items[0].points.samples[0].error", clamped,
			pts(func(s *PointSample) { s.Value, s.Error = 0, n("é", MaxChannelError/2) })},
		{"cpu", met(func(m *resource.MetricSample) { m.CPUPct = 100.01 }), "metric.cpuPct", clamped, met(func(m *resource.MetricSample) { m.CPUPct = 100 })},
		{"temperature", met(func(m *resource.MetricSample) { m.TempCPU = math.Inf(-1) }), "metric.tempCpu", clamped, met(func(m *resource.MetricSample) { m.TempCPU = -100 })},
		{"NaN", met(func(m *resource.MetricSample) { m.LoadAvg1 = math.NaN() }), "metric.loadAvg1", clamped, met(func(m *resource.MetricSample) { m.LoadAvg1 = 100000 })},
		{"captured before 2020", met(func(m *resource.MetricSample) { m.CapturedAt = resource.T(earliestRecord.Add(-time.Second)) }), "metric.capturedAt", notSpooled, met(func(m *resource.MetricSample) { m.CapturedAt = resource.T(earliestRecord) })},
		{"captured ahead", met(func(m *resource.MetricSample) { m.CapturedAt = resource.T(now.Add(MaxFutureSkew + time.Second)) }), "metric.capturedAt", notSpooled, met(func(m *resource.MetricSample) { m.CapturedAt = resource.T(now.Add(MaxFutureSkew)) })},
		{"event id", ev(func(e *Event) { e.ID = "Not-An-Id" }), "event.id", notSpooled, ev(func(e *Event) {})},
		{"event type", ev(func(e *Event) { e.Type = n("a", MaxEventType+1) }), "event.type", notSpooled, ev(func(e *Event) { e.Type = n("a", MaxEventType) })},
		{"relay's type", ev(func(e *Event) { e.Type = EventDeviceOffline }), "event.type", notSpooled, ev(func(e *Event) { e.Type = EventUSBDetached })},
		{"severity", ev(func(e *Event) { e.Severity = "LOUD" }), "event.severity", notSpooled, ev(func(e *Event) { e.Severity = resource.SeverityCritical })},
		{"created ahead", ev(func(e *Event) { e.CreatedAt = resource.T(now.Add(48 * time.Hour)) }), "event.createdAt", notSpooled, ev(func(e *Event) {})},
		{"message", ev(func(e *Event) { e.Message = n("m", MaxEventMessage+1) }), "event.message", clamped, ev(func(e *Event) { e.Message = n("m", MaxEventMessage) })},
		{"data size", ev(func(e *Event) { e.Data = json.RawMessage(`{"x":"` + n("y", MaxEventDataBytes) + `"}`) }), "event.data", clamped,
			ev(func(e *Event) { e.Data = json.RawMessage(`{"x":"` + n("y", MaxEventDataBytes-8) + `"}`) })},
		{"data not an object", ev(func(e *Event) { e.Data = json.RawMessage(`[1]`) }), "event.data", clamped, ev(func(e *Event) { e.Data = json.RawMessage(`{}`) })},
		{"both", &Record{Metric: &resource.MetricSample{CapturedAt: at}, Event: ev(func(e *Event) {}).Event}, "record", notSpooled, met(func(m *resource.MetricSample) {})},
		{"config error", &ConfigApplied{Error: n("e", MaxConfigError+1)}, "configApplied.error", clamped, &ConfigApplied{Error: n("e", MaxConfigError)}},
		{"config version", &ConfigApplied{Version: -1}, "configApplied.version", clamped, &ConfigApplied{}},
	}
	check := func(msg any) error {
		switch m := msg.(type) {
		case *Hello:
			return CheckHello(m)
		case *Heartbeat:
			return CheckHeartbeat(m)
		case *Record:
			return CheckRecords([]Record{{Seq: 1, Metric: m.Metric, Event: m.Event, Points: m.Points}}, 0, now)
		case *ConfigApplied:
			return CheckConfigApplied(m)
		}
		panic(msg)
	}
	clamp := func(msg any) error {
		switch m := msg.(type) {
		case *Hello:
			ClampHello(m)
		case *Heartbeat:
			ClampHeartbeat(m)
		case *Record:
			return ClampRecord(m, now)
		case *ConfigApplied:
			ClampConfigApplied(m)
		}
		return nil
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := check(tc.within); err != nil {
				t.Fatalf("the relay refuses the value at the bound: %v", err)
			}
			err := check(tc.msg)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("the relay's check: %v, want a refusal naming %s", err, tc.field)
			}
			switch err := clamp(tc.msg); {
			case tc.clamp == notSpooled && err == nil:
				t.Fatal("the clamp let through a record the relay refuses")
			case tc.clamp == clamped && err != nil:
				t.Fatalf("the clamp refused it: %v", err)
			case tc.clamp == clamped:
				if err := check(tc.msg); err != nil {
					t.Fatalf("the relay refuses the clamped message: %v", err)
				}
			}
			before, _ := json.Marshal(tc.within)
			if err := clamp(tc.within); err != nil {
				t.Fatalf("the clamp refuses a message within bounds: %v", err)
			}
			if after, _ := json.Marshal(tc.within); string(after) != string(before) {
				t.Errorf("the clamp changed a message within bounds:\n%s\n%s", before, after)
			}
		})
	}
}

func channels(n int) []ChannelState {
	cs := make([]ChannelState, n)
	for i := range cs {
		cs[i].ID = "c" + strconv.Itoa(i)
	}
	return cs
}

// TestSeqBound: a record numbered 2^63-1 (MaxSeq) is the last a spool gives
// out and the relay takes, and only in steps of at most 2^32 from the last
// stored; one above it, not rising, or jumping further, is refused.
func TestSeqBound(t *testing.T) {
	now := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	rec := func(seq uint64) Record {
		return Record{Seq: seq, Metric: &resource.MetricSample{CapturedAt: resource.T(now)}}
	}
	for _, tc := range []struct {
		last  uint64
		items []Record
	}{
		{MaxSeq - 2, []Record{rec(MaxSeq - 1), rec(MaxSeq)}},
		{0, []Record{rec(1), rec(1 + MaxSeqStep), rec(1 + 2*MaxSeqStep)}},
		{0, []Record{rec(MaxSeqStep)}},
		{100, []Record{rec(5), rec(100 + MaxSeqStep)}}, // a resend, then the gap of a spool that dropped
	} {
		if err := CheckRecords(tc.items, tc.last, now); err != nil {
			t.Errorf("after %d: %v", tc.last, err)
		}
	}
	for _, tc := range []struct {
		last  uint64
		items []Record
	}{
		{0, []Record{rec(0)}},
		{MaxSeq, []Record{rec(MaxSeq + 1)}},
		{MaxSeq, []Record{rec(math.MaxUint64)}},
		{0, []Record{rec(2), rec(2)}},
		{0, []Record{rec(3), rec(2)}},
		{0, []Record{rec(MaxSeq)}},
		{0, []Record{rec(MaxSeqStep + 1)}},
		{0, []Record{rec(1), rec(2 + MaxSeqStep)}},
		{MaxSeq - MaxSeqStep - 1, []Record{rec(MaxSeq)}},
	} {
		if err := CheckRecords(tc.items, tc.last, now); err == nil || !strings.Contains(err.Error(), "seq") {
			t.Errorf("after %d, seqs %d, %v: %v", tc.last, tc.items[0].Seq, len(tc.items), err)
		}
	}
}

// TestDocsBoundsTable: docs/protocol.md's table of limits is Table's.
func TestDocsBoundsTable(t *testing.T) {
	doc, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("| field | rule | the agent, for a value that breaks it |\n| --- | --- | --- |\n")
	for _, r := range Table() {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.Field, r.Rule, r.Agent)
	}
	if !strings.Contains(string(doc), b.String()) {
		t.Errorf("docs/protocol.md does not hold the bounds table; it should read:\n%s", b.String())
	}
}

// TestCheckHeartbeatAllocatesNothing: the relay checks every heartbeat;
// one within bounds costs no allocation.
func TestCheckHeartbeatAllocatesNothing(t *testing.T) {
	h := &Heartbeat{Status: resource.StatusOnline, IPAddress: "2001:db8::7", VPN: &VPN{InterfaceName: "wg0", Endpoint: "1.2.3.4:51820"},
		Channels: []ChannelState{{ID: "ttyS0", Live: "rx 12"}, {ID: "ttyS1"}, {ID: "can0", Error: "bus off"}}}
	if n := testing.AllocsPerRun(100, func() {
		if err := CheckHeartbeat(h); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per heartbeat", n)
	}
}

// TestHeartbeatFitsTheMessageBound: 64 channels, each field within its
// bound, can still make a heartbeat over MaxMessageBytes once JSON escapes
// its text (a '<' is six bytes); the relay would refuse it (4001) at every
// beat. The clamp shortens the live values and errors until it fits.
func TestHeartbeatFitsTheMessageBound(t *testing.T) {
	hb := Heartbeat{At: resource.T(time.Now()), Status: resource.StatusOnline, Channels: channels(MaxChannels)}
	for i := range hb.Channels {
		hb.Channels[i].Live = strings.Repeat("<\u2028", MaxLive)
		hb.Channels[i].Error = strings.Repeat("\x01", MaxChannelError)
		hb.Channels[i].PassthroughAddress = strings.Repeat("\"", MaxTextField)
	}
	lost := ClampHeartbeat(&hb)
	if len(lost) != 1 || !strings.Contains(lost[0], "shortened") {
		t.Errorf("lost %q", lost)
	}
	for _, codec := range []Codec{JSON, CBOR} {
		b, err := codec.Marshal(&Message{Type: TypeHeartbeat, Heartbeat: &hb})
		if err != nil || len(b) > MaxMessageBytes || (codec == JSON && len(b) < MaxMessageBytes*3/4) {
			t.Errorf("%s: %d bytes, %v; want at most %d (JSON: not much less)", codec, len(b), err, MaxMessageBytes)
		}
	}
	if err := CheckHeartbeat(&hb); err != nil {
		t.Error(err)
	}
	if len(hb.Channels[0].Live) != MaxLive {
		t.Errorf("the first channel's live value was shortened too: %d bytes", len(hb.Channels[0].Live))
	}
}

// TestHeartbeatWithPointsFitsTheMessageBound: 64 channels of 64 points,
// each within its bounds, are over MaxMessageBytes as JSON; the clamp
// leaves out the last channels' points until the heartbeat fits.
func TestHeartbeatWithPointsFitsTheMessageBound(t *testing.T) {
	at := resource.T(time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC))
	hb := Heartbeat{At: at, Status: resource.StatusOnline, Channels: channels(MaxChannels)}
	for i := range hb.Channels {
		for j := range serialcfg.MaxPoints {
			hb.Channels[i].Points = append(hb.Channels[i].Points, PointState{Name: "point_" + strconv.Itoa(j), Value: -1.2345678901234567e-300,
				Quality: "good", Error: strings.Repeat("<", 40), At: at})
		}
	}
	lost := ClampHeartbeat(&hb)
	if len(lost) != 1 || !strings.Contains(lost[0], "points left out") {
		t.Errorf("lost %q", lost)
	}
	for _, codec := range []Codec{JSON, CBOR} {
		b, err := codec.Marshal(&Message{Type: TypeHeartbeat, Heartbeat: &hb})
		if err != nil || len(b) > MaxMessageBytes {
			t.Errorf("%s: %d bytes, %v; want at most %d", codec, len(b), err, MaxMessageBytes)
		}
	}
	if err := CheckHeartbeat(&hb); err != nil {
		t.Error(err)
	}
	if len(hb.Channels[0].Points) != serialcfg.MaxPoints || hb.Channels[MaxChannels-1].Points != nil {
		t.Errorf("points kept: first channel %d, last %d", len(hb.Channels[0].Points), len(hb.Channels[MaxChannels-1].Points))
	}
}

// TestSplitPointSamples: a round's samples go out in records the relay
// takes, each within MaxPointSamples and, as the agent spools it (JSON),
// within MaxPointBatchBytes, in order and all of them.
func TestSplitPointSamples(t *testing.T) {
	now := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	var ss []PointSample
	for i := range 1500 {
		s := PointSample{Point: "rs485-1.p" + strconv.Itoa(i%64), At: resource.T(now), Value: 1.0 / float64(i+1)}
		if i >= 1100 {
			s.Value, s.Error = 0, strings.Repeat("<\x01", MaxChannelError)
		}
		ss = append(ss, s)
	}
	batches := SplitPointSamples(ss)
	n := 0
	for i, b := range batches {
		r := Record{Points: &PointBatch{Samples: b}}
		if err := ClampRecord(&r, now); err != nil {
			t.Fatalf("batch %d of %d samples: %v", i, len(b), err)
		}
		payload, _ := json.Marshal(r)
		if len(b) > MaxPointSamples || len(payload) > MaxPointBatchBytes {
			t.Errorf("batch %d: %d samples, %d bytes as JSON", i, len(b), len(payload))
		}
		if err := CheckRecords([]Record{{Seq: 1, Points: r.Points}}, 0, now); err != nil {
			t.Errorf("batch %d: %v", i, err)
		}
		for _, s := range b {
			if s.Point != ss[n].Point {
				t.Fatalf("sample %d is %s, want %s", n, s.Point, ss[n].Point)
			}
			n++
		}
	}
	if n != len(ss) || len(batches) < 3 {
		t.Errorf("%d samples in %d batches, want %d", n, len(batches), len(ss))
	}
}
