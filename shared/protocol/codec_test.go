package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	jsonv2 "github.com/go-json-experiment/json"
	segjson "github.com/segmentio/encoding/json"

	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// sampleMessages are messages of every type with the edge cases of each
// field: zero and extreme numbers, empty and non-ASCII strings, strings
// JSON escapes, nil and empty lists, absent and present optional parts,
// times before 1970 and to the millisecond.
func sampleMessages(t testing.TB) []Message {
	at := resource.T(time.Date(2026, 11, 22, 2, 46, 10, 563e6, time.UTC))
	whole := resource.T(time.Date(2026, 11, 22, 2, 46, 10, 0, time.UTC))
	old := resource.T(time.Date(1969, 7, 20, 20, 17, 40, 1e6, time.UTC))
	lh := resource.T(time.Date(2026, 11, 22, 2, 45, 58, 999e6, time.UTC))
	odd := "quote \" backslash \\ newline \n tab \t nul \x00 <script>&amp; café ☃ 𝄞 \u2028"
	cfg := func(kind, js string) serialcfg.Config {
		c, err := serialcfg.DecodeFor(kind, []byte(js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return c
	}
	return []Message{
		{Type: TypeHello, Hello: &Hello{AgentVersion: "0.1.0", FirmwareVersion: "fw-2.1", Model: "IG-500", DeviceName: "gw-hall-3", DeviceLocation: "Hall 3",
			Timezone: "Europe/Berlin", AppliedVersion: 4, HeartbeatInterval: Duration{30 * time.Second}, MetricsInterval: Duration{5 * time.Minute}, Codecs: []Codec{CBOR}}},
		{Type: TypeHello, Hello: &Hello{DeviceName: odd, HeartbeatInterval: Duration{1500 * time.Microsecond}, AppliedVersion: math.MaxInt64}},
		{Type: TypeHello, Hello: &Hello{Codecs: []Codec{"msgpack", JSON, CBOR}}},
		{Type: TypeHello, Hello: &Hello{}},
		{Type: TypeWelcome, Welcome: &Welcome{DeviceID: "afrnlhc14yj0f32pljzr9b99", ServerTime: at, LastSeq: 40, Codec: CBOR}},
		{Type: TypeWelcome, Welcome: &Welcome{LastSeq: math.MaxUint64}},
		{Type: TypeHeartbeat, Heartbeat: &Heartbeat{At: at, Status: resource.StatusOnline, IPAddress: "10.8.0.12", AppliedVersion: 4,
			VPN: &VPN{Up: true, InterfaceName: "wg0", Endpoint: "vpn.example.com:51820", PeerCount: 1, LastHandshake: &lh},
			Channels: []ChannelState{
				{ID: "rs485-1", Available: true, Live: "120 34"},
				{ID: "canfd-1", Available: true, Live: "0x123#DEADBEEF", TxOn: true},
				{ID: "uart-1", Error: "port closed", PassthroughAddress: "10.8.0.12:4001"},
				{ID: "gpio-1", Live: odd, Error: strings.Repeat("e", 512)},
			}}},
		{Type: TypeHeartbeat, Heartbeat: &Heartbeat{At: whole, Status: resource.StatusError, VPN: &VPN{}, Channels: []ChannelState{}}},
		{Type: TypeHeartbeat, Heartbeat: &Heartbeat{At: old, Status: resource.StatusRebooting, AppliedVersion: -1}},
		{Type: TypeHeartbeat, Heartbeat: &Heartbeat{}},
		{Type: TypeHeartbeat},
		{Type: TypeRecords, Records: &Records{Items: []Record{
			{Seq: 41, Metric: &resource.MetricSample{CapturedAt: at, CPUPct: 12.5, MemPct: 48.1, DiskUsedPct: 61, TempCPU: -47.2, LoadAvg1: 0.31}},
			{Seq: 42, Event: &Event{ID: "k28xelzoylsbs884om6wsbbs", Type: EventUSBAttached, Severity: resource.SeverityInfo, Message: odd,
				Data: json.RawMessage(`{"path":"/dev/ttyUSB0","nested":{"a":[1,2.5,"x",null,true]}}`), CreatedAt: at}},
			{Seq: 43, Event: &Event{ID: "x", Type: EventSpoolDropped, Severity: resource.SeverityError, Data: json.RawMessage(`{}`), CreatedAt: whole}},
			{Seq: 44, Metric: &resource.MetricSample{CapturedAt: old, CPUPct: math.SmallestNonzeroFloat64, MemPct: math.MaxFloat64, LoadAvg1: 1e-7}},
			{Seq: 45, Metric: &resource.MetricSample{CapturedAt: at, CPUPct: 9.5, MemPct: 48, DiskUsedPct: 61, LoadAvg1: 0.12, Missing: []string{"tempCpu"}}},
			{Seq: math.MaxUint64},
		}}},
		{Type: TypeRecords, Records: &Records{Items: []Record{}}},
		{Type: TypeRecords, Records: &Records{}},
		{Type: TypeConfigApplied, ConfigApplied: &ConfigApplied{Version: 5, Error: "rs485-1: port busy; " + odd}},
		{Type: TypeConfigApplied, ConfigApplied: &ConfigApplied{}},
		{Type: TypeAck, Ack: &Ack{Seq: 42}},
		{Type: TypeAck, Ack: &Ack{Seq: math.MaxUint64}},
		{Type: TypeConfig, Config: &Config{Version: 5, Enabled: true, Mode: "managed", Channels: []ChannelConfig{
			{ID: "rs485-1", Config: cfg("rs485", `{"kind":"rs485","baudRate":19200,"dataBits":8,"parity":"even","stopBits":1,"mode":"modbus_rtu_master","slaveId":7,
				"poll":{"enabled":true,"intervalMs":1000,"register":0,"count":2,"function":"holding"}}`)},
			{ID: "canfd-1", Config: cfg("canfd", `{"kind":"canfd","nominalBitrate":500000,"dataBitrate":2000000,"samplePoint":0.875,"tx":{"enabled":true,"intervalMs":1000,"canId":"0x123","dataHex":"DEADBEEF"}}`)},
			{ID: "uart-1", Config: cfg("uart", `{"kind":"uart","baudRate":115200,"dataBits":8,"parity":"none","stopBits":1,"flowControl":"rtscts"}`)},
			{ID: "gpio-1", Config: cfg("gpio", `{"kind":"gpio","direction":"out","pull":"up","tx":{"enabled":true,"intervalMs":500,"value":1}}`)},
		}}},
		{Type: TypeConfig, Config: &Config{Channels: []ChannelConfig{}}},
		{Type: TypeCommand, Command: &Command{ID: "c1kq8v0d2m3n4p5q6r7s8t9u", Kind: CommandReboot}},
		{Type: TypeCommand, Command: &Command{ID: "c2", Kind: CommandUpdate, Update: &UpdateOrder{RolloutID: "r1", ReleaseID: "rel1", Version: "1.4.2",
			Path: ReleasePath("rel1"), Size: MaxUpdateSize, SHA256: strings.Repeat("ab", 32),
			Signature: "untrusted comment: signature from minisign secret key\nRWQ...\ntrusted comment: " + odd, HealthFor: Duration{90 * time.Second}}}},
		{Type: TypeCommand, Command: &Command{}},
		{Type: TypeCommandStatus, CommandStatus: &CommandStatus{ID: "c2", State: CommandRolledBack, Error: "link not up within 1m30s; " + odd, Version: "1.4.1"}},
		{Type: TypeCommandStatus, CommandStatus: &CommandStatus{}},
		{Type: "reboot"},
		{},
	}
}

// randomMessages are heartbeats and records in the shapes agents send, with
// random values.
func randomMessages(n int) []Message {
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"", "0", "1", "12 34", "0x123#DEADBEEF", "port closed", "modbus timeout (slave 7)", "wg0", "10.0.0.1:4001", "café", "a\"b"}
	word := func() string { return words[rng.IntN(len(words))] }
	tm := func() resource.Time { return resource.T(time.UnixMilli(rng.Int64N(4e12) - 1e12)) }
	var out []Message
	for range n {
		if rng.IntN(4) == 0 {
			var items []Record
			for k := range rng.IntN(20) {
				r := Record{Seq: uint64(k + 1)}
				if rng.IntN(2) == 0 {
					r.Metric = &resource.MetricSample{CapturedAt: tm(), CPUPct: rng.Float64() * 100, MemPct: float64(rng.IntN(101)), TempCPU: rng.NormFloat64() * 50, LoadAvg1: rng.ExpFloat64()}
					if rng.IntN(4) == 0 {
						r.Metric.TempCPU, r.Metric.Missing = 0, []string{"tempCpu"}
					}
				} else {
					r.Event = &Event{ID: word(), Type: word(), Severity: resource.SeverityWarning, Message: word(), CreatedAt: tm()}
					if rng.IntN(2) == 0 {
						r.Event.Data = json.RawMessage(fmt.Sprintf(`{"n":%d,"s":%q}`, rng.IntN(1000), word()))
					}
				}
				items = append(items, r)
			}
			out = append(out, Message{Type: TypeRecords, Records: &Records{Items: items}})
			continue
		}
		hb := Heartbeat{At: tm(), Status: resource.DeviceStatus([]string{"ONLINE", "REBOOTING", "ERROR"}[rng.IntN(3)]), IPAddress: word(), AppliedVersion: rng.Int64N(1000)}
		if rng.IntN(2) == 0 {
			hb.VPN = &VPN{Up: rng.IntN(2) == 0, InterfaceName: word(), Endpoint: word(), PeerCount: rng.IntN(5)}
			if rng.IntN(2) == 0 {
				lh := tm()
				hb.VPN.LastHandshake = &lh
			}
		}
		for i := range rng.IntN(9) {
			hb.Channels = append(hb.Channels, ChannelState{ID: fmt.Sprintf("gpio-%d", i+1), Available: rng.IntN(2) == 0, Live: word(), TxOn: rng.IntN(2) == 0, Error: word(), PassthroughAddress: word()})
		}
		out = append(out, Message{Type: TypeHeartbeat, Heartbeat: &hb})
	}
	return out
}

// TestCodecsDecodeTheSameValues is the differential test of the two codecs:
// every message, encoded in JSON and in CBOR, decodes to the same value
// from both; and what encoding/json reads from JSON text written by hand
// (other key orders, whitespace, escapes, unknown fields, nulls) reads the
// same after a trip through CBOR.
func TestCodecsDecodeTheSameValues(t *testing.T) {
	msgs := append(sampleMessages(t), randomMessages(500)...)
	for i, m := range msgs {
		js, err := JSON.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		cb, err := CBOR.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		var fromJSON, fromCBOR Message
		if err := JSON.Unmarshal(js, &fromJSON); err != nil {
			t.Fatalf("message %d: JSON: %v", i, err)
		}
		if err := CBOR.Unmarshal(cb, &fromCBOR); err != nil {
			t.Fatalf("message %d: CBOR: %v", i, err)
		}
		if !reflect.DeepEqual(fromJSON, fromCBOR) {
			t.Errorf("message %d decodes differently:\nJSON %s\nCBOR %s", i, dump(fromJSON), dump(fromCBOR))
		}
		if len(cb) > len(js) {
			t.Errorf("message %d: %d bytes in CBOR, %d in JSON", i, len(cb), len(js))
		}
	}
	for _, in := range handWrittenJSON {
		var fromJSON Message
		if err := JSON.Unmarshal([]byte(in), &fromJSON); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		cb, err := CBOR.Marshal(&fromJSON)
		if err != nil {
			t.Fatal(err)
		}
		var fromCBOR Message
		if err := CBOR.Unmarshal(cb, &fromCBOR); err != nil {
			t.Fatalf("%s: CBOR: %v", in, err)
		}
		if !reflect.DeepEqual(fromJSON, fromCBOR) {
			t.Errorf("%s reads differently after CBOR:\nJSON %s\nCBOR %s", in, dump(fromJSON), dump(fromCBOR))
		}
	}
}

// handWrittenJSON are messages as an agent from before CBOR, or a person,
// may write them.
var handWrittenJSON = []string{
	` { "type" : "heartbeat" , "heartbeat" : { "status" : "ONLINE" , "channels" : [ ] , "vpn" : null } } `,
	`{"heartbeat":{"at":"2026-01-02T03:04:05.123+02:00","status":"ONLINE","channels":null},"type":"heartbeat"}`,
	`{"type":"heartbeat","heartbeat":{"at":"2026-01-02T03:04:05Z","status":"ONLINE","ipAddress":"caf\u00e9 \ud834\udd1e \"q\""}}`,
	`{"type":"heartbeat","heartbeat":{"status":"ONLINE","extra":{"a":[1,2]},"vpn":{"up":true,"lastHandshake":null}}}`,
	`{"type":"heartbeat","heartbeat":{"Status":"ONLINE","IPADDRESS":"10.0.0.1"}}`,
	`{"type":"heartbeat","heartbeat":{"status":"ONLINE","vpn":{"up":true},"vpn":{"endpoint":"x"}}}`,
	`{"type":"heartbeat","heartbeat":null}`,
	`{"type":"records","records":{"items":[{"seq":1,"event":{"id":"e","type":"usb.attached","data":{ "path" : "/dev/ttyUSB0" },"createdAt":"2026-01-02T03:04:05.000Z"}},{"seq":2,"metric":{"capturedAt":"2026-01-02T03:04:05.000Z","cpuPct":1e2,"memPct":-0}}]}}`,
	`{"type":"records","records":{"items":[{"seq":3,"event":{"id":"e","data":null}}]}}`,
	`{"type":"hello","hello":{"heartbeatInterval":"1h2m3.5s","metricsInterval":"0s","codecs":["cbor","json"]}}`,
	`{"type":"config_applied","configApplied":{"version":7,"error":""}}`,
	`{"type":"config","config":{"version":2,"channels":[{"id":"gpio-2","config":{"kind":"gpio","direction":"in","pull":"down","debounceMs":20}}]}}`,
}

func dump(m Message) string {
	b, _ := json.Marshal(m)
	return string(b)
}

// TestCBORDifferencesFromJSON pins where the CBOR decoder is stricter than
// encoding/json: repeated keys, invalid UTF-8, indefinite lengths, nesting
// and array sizes beyond its bounds are errors (a relay closes the
// connection with 4000), and the maps' integer keys are the only names.
func TestCBORDifferencesFromJSON(t *testing.T) {
	var deep []byte
	for range 20 {
		deep = append(deep, 0x81) // [[[...
	}
	deep = append(deep, 0x00)
	many := []byte{0xa2, 0x01, 0x69}
	many = append(many, "heartbeat"...)
	many = append(many, 0x03, 0xa1, 0x06, 0x99, 0x13, 0x88) // {1:"heartbeat",3:{6:[5000 elements
	for range 5000 {
		many = append(many, 0xa0)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		err  string
	}{
		{"repeated key", []byte{0xa2, 0x01, 0x63, 'a', 'c', 'k', 0x01, 0x63, 'a', 'c', 'k'}, "duplicate map key"},
		{"invalid UTF-8", []byte{0xa1, 0x01, 0x62, 0xff, 0xfe}, "invalid UTF-8"},
		{"indefinite-length map", []byte{0xbf, 0x01, 0x63, 'a', 'c', 'k', 0xff}, "indefinite-length"},
		{"nested too deep", append([]byte{0xa2, 0x01, 0x63, 'a', 'c', 'k', 0x07}, deep...), "exceeded max nested level"},
		{"array over 4096 elements", many, "exceeded max number of elements"},
		{"trailing bytes", []byte{0xa1, 0x01, 0x63, 'a', 'c', 'k', 0x00}, "extraneous data"},
		{"a time after year 9999", []byte{0xa2, 0x01, 0x63, 'a', 'c', 'k', 0x03, 0xa1, 0x01, 0xc1, 0x1b, 0x00, 0x00, 0x00, 0x3a, 0xff, 0xf4, 0x41, 0x80}, "outside years 0001 to 9999"},
		{"a time that is not tag 0 or 1", []byte{0xa2, 0x01, 0x63, 'a', 'c', 'k', 0x03, 0xa1, 0x01, 0x1a, 0x60, 0x00, 0x00, 0x00}, "cbor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m Message
			err := CBOR.Unmarshal(tc.in, &m)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
	var m Message
	if err := CBOR.Unmarshal([]byte{0xa2, 0x64, 't', 'y', 'p', 'e', 0x63, 'a', 'c', 'k', 0x07, 0xa1, 0x01, 0x05}, &m); err != nil || m.Type != "" || m.Ack == nil || m.Ack.Seq != 5 {
		t.Errorf("a text key named like the JSON field: %+v %v (want it ignored as an unknown key)", m, err)
	}
}

// TestChooseCodec: CBOR when offered, else JSON.
func TestChooseCodec(t *testing.T) {
	for _, tc := range []struct {
		offered []Codec
		want    Codec
	}{
		{nil, JSON}, {[]Codec{}, JSON}, {[]Codec{"msgpack"}, JSON}, {[]Codec{JSON}, JSON},
		{[]Codec{CBOR}, CBOR}, {[]Codec{"msgpack", CBOR}, CBOR}, {[]Codec{JSON, CBOR}, CBOR},
	} {
		if got := ChooseCodec(tc.offered); got != tc.want {
			t.Errorf("ChooseCodec(%v) = %s, want %s", tc.offered, got, tc.want)
		}
	}
}

// FuzzCBORDecode feeds the CBOR decoder arbitrary bytes (seeds: every
// message type, testdata/fuzz/FuzzCBORDecode). It must not panic; what it
// accepts must encode again to the same bytes, and must read the same
// through JSON (the differential test's claim, compared as JSON sees it:
// values JSON cannot carry, such as NaN or years past 9999, are skipped).
func FuzzCBORDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Message
		if err := CBOR.Unmarshal(b, &m); err != nil {
			return
		}
		enc, err := CBOR.Marshal(&m)
		if err != nil {
			t.Fatalf("decoded %s but cannot encode it: %v", dump(m), err)
		}
		var again Message
		if err := CBOR.Unmarshal(enc, &again); err != nil {
			t.Fatalf("cannot decode what it encoded (%x): %v", enc, err)
		}
		if enc2, err := CBOR.Marshal(&again); err != nil || string(enc2) != string(enc) {
			t.Fatalf("encoding is not stable: %x then %x (%v)", enc, enc2, err)
		}
		js, err := JSON.Marshal(&m)
		if err != nil {
			return // NaN, infinities, event data that is not JSON
		}
		var fromJSON Message
		if err := JSON.Unmarshal(js, &fromJSON); err != nil {
			return // a time JSON's layout cannot carry
		}
		if a, b := dump(again), dump(fromJSON); a != b {
			t.Fatalf("CBOR and JSON read different values:\nCBOR %s\nJSON %s", a, b)
		}
	})
}

// TestDocumentedExamples: every JSON example of docs/protocol.md decodes,
// reads the same through CBOR, and the sizes the page gives for its
// heartbeat are those of the two codecs.
func TestDocumentedExamples(t *testing.T) {
	doc, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllSubmatch(doc, -1)
	var heartbeat *Message
	for _, b := range blocks {
		var fromJSON Message
		if err := JSON.Unmarshal(b[1], &fromJSON); err != nil {
			t.Fatalf("example does not decode: %v\n%s", err, b[1])
		}
		cb, err := CBOR.Marshal(&fromJSON)
		if err != nil {
			t.Fatal(err)
		}
		var fromCBOR Message
		if err := CBOR.Unmarshal(cb, &fromCBOR); err != nil || !reflect.DeepEqual(fromJSON, fromCBOR) {
			t.Errorf("example reads differently through CBOR (%v):\n%s\n%s", err, dump(fromJSON), dump(fromCBOR))
		}
		if fromJSON.Type == TypeHeartbeat {
			heartbeat = &fromJSON
		}
	}
	if len(blocks) < 7 || heartbeat == nil {
		t.Fatalf("%d examples found, no heartbeat among them", len(blocks))
	}
	js, _ := JSON.Marshal(heartbeat)
	cb, _ := CBOR.Marshal(heartbeat)
	if want := fmt.Sprintf("The heartbeat of the example below is %d bytes in CBOR, %d in JSON.", len(cb), len(js)); !strings.Contains(strings.Join(strings.Fields(string(doc)), " "), want) {
		t.Errorf("docs/protocol.md should say: %s", want)
	}
}

// FuzzJSONDecodeAsEncodingJSON holds the JSON codec's decoders to
// encoding/json itself, the decoder of every relay before them: on any
// input encoding/json and each decoder refuse it or read the same message.
// That is the codec (Codec.Unmarshal), encoding/json/v2's implementation
// with jsonv1's options on every input (it takes the messages with many
// brackets), and segmentio's on those it takes (at most jsonFastBrackets
// brackets and braces: on deeper nesting than encoding/json's 10,000
// levels it reads what encoding/json refuses). Seeds: every sample message
// and the inputs where the libraries' rules are easiest to tell apart
// (repeated and differently cased names, invalid UTF-8, escapes, nulls,
// wrong types, numbers out of range, trailing data).
func FuzzJSONDecodeAsEncodingJSON(f *testing.F) {
	for _, m := range sampleMessages(f) {
		b, err := JSON.Marshal(&m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		`{"type":"heartbeat","type":"ack"}`,
		`{"TYPE":"heartbeat","Heartbeat":{"STATUS":"ONLINE","channels":[{"ID":"gpio-1","live":"1"}]}}`,
		"{\"type\":\"heartbeat\",\"heartbeat\":{\"status\":\"\xff\xfe\",\"ip_address\":\"\\ud800\"}}",
		`{"type":null,"heartbeat":null}`,
		`{"type":"heartbeat","heartbeat":{"channels":null,"vpn":{"up":"yes"}}}`,
		`{"type":"heartbeat","heartbeat":{"at":"2026-11-22T02:46:10.563Z","channels":[{},{"available":1}]}}`,
		`{"type":"heartbeat"} {"type":"ack"}`,
		`{"type":"heartbeat",}`,
		`[1,2]`, `"heartbeat"`, ``, `{"type":"heartbeat","heartbeat":{"at":12}}`,
		`{"type":"heartbeat","heartbeat":{"status":"\u004fN\tL\"","x":{"":[1e999]}}}`,
		`{"type":"heartbeat","heartbeat":{"vpn":{"peer_count":1e3}}}`,
		`{"type":"heartbeat","heartbeat":{"vpn":{"peer_count":-1}}}`,
		`{"type":"heartbeat","x":"\ud800\udc00","y":[{"a":[]},{}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want Message
		wantErr := json.Unmarshal(b, &want)
		decoders := map[string]func([]byte, *Message) error{
			"the codec":               JSON.Unmarshal,
			"encoding/json/v2 (v1's)": func(b []byte, m *Message) error { return jsonv2.Unmarshal(b, m, jsonDecOptions) },
		}
		if jsonBrackets(b) <= jsonFastBrackets {
			decoders["segmentio"] = func(b []byte, m *Message) error { return segjson.Unmarshal(b, m) }
		}
		for name, decode := range decoders {
			var got Message
			err := decode(b, &got)
			if (err == nil) != (wantErr == nil) {
				t.Fatalf("%q: %s's error %v, encoding/json's %v", b, name, err, wantErr)
			}
			if err == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("%q: %s read\n%s\nencoding/json\n%s", b, name, dump(got), dump(want))
			}
		}
	})
}

// TestJSONNestingAsEncodingJSON: nesting around the two decoders' bound
// (jsonFastBrackets) and encoding/json's limit of 10,000 levels, in a field
// the protocol does not know and in one it does: the codec refuses or
// reads each message as encoding/json does, whichever decoder takes it,
// and reads the heartbeat around junk nested within the limit.
func TestJSONNestingAsEncodingJSON(t *testing.T) {
	for _, depth := range []int{1, jsonFastBrackets - 10, jsonFastBrackets + 1, 10000, 10001, 100000} {
		for _, field := range []string{"unknown", "channels"} {
			b := []byte(`{"type":"heartbeat","heartbeat":{"status":"ONLINE","` + field + `":` +
				strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}}`)
			var got, want Message
			err := JSON.Unmarshal(b, &got)
			wantErr := json.Unmarshal(b, &want)
			if (err == nil) != (wantErr == nil) {
				t.Errorf("depth %d in %s: the codec's error %v, encoding/json's %v", depth, field, err, wantErr)
				continue
			}
			if err == nil && !reflect.DeepEqual(got, want) {
				t.Errorf("depth %d in %s: the codec read\n%s\nencoding/json\n%s", depth, field, dump(got), dump(want))
			}
			if field == "unknown" && depth+2 <= 10000 && (err != nil || got.Heartbeat == nil || got.Heartbeat.Status != "ONLINE") {
				t.Errorf("depth %d in an unknown field: %v, %+v; want the heartbeat read", depth, err, got.Heartbeat)
			}
		}
	}
}

// TestMissingRoundTrip: a sample's missing (the metrics its host has no
// sensor for) travels in JSON as "missing" and in CBOR under key 7, and
// reads back the same from both; a sample without it (an older agent's)
// has none in either encoding.
func TestMissingRoundTrip(t *testing.T) {
	at := resource.T(time.Date(2026, 11, 22, 2, 45, 0, 0, time.UTC))
	m := Message{Type: TypeRecords, Records: &Records{Items: []Record{
		{Seq: 1, Metric: &resource.MetricSample{CapturedAt: at, CPUPct: 9.5, Missing: []string{"tempCpu"}}},
		{Seq: 2, Metric: &resource.MetricSample{CapturedAt: at, CPUPct: 9.5, TempCPU: 41.5}},
	}}}
	js, err := JSON.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(js, []byte(`"tempCpu":0,"loadAvg1":0,"missing":["tempCpu"]}`)) || bytes.Count(js, []byte(`"missing"`)) != 1 {
		t.Errorf("JSON: %s", js)
	}
	cb, err := CBOR.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Records struct {
			Items []struct {
				Metric map[int]any `cbor:"2,keyasint"`
			} `cbor:"1,keyasint"`
		} `cbor:"4,keyasint"`
	}
	if err := cbor.Unmarshal(cb, &raw); err != nil {
		t.Fatal(err)
	}
	if it := raw.Records.Items; len(it) != 2 || !reflect.DeepEqual(it[0].Metric[7], []any{"tempCpu"}) || it[1].Metric[7] != nil {
		t.Errorf("CBOR key 7: %+v", raw.Records.Items)
	}
	for _, c := range []struct {
		codec Codec
		b     []byte
	}{{JSON, js}, {CBOR, cb}} {
		var got Message
		if err := c.codec.Unmarshal(c.b, &got); err != nil {
			t.Fatalf("%s: %v", c.codec, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%s reads back %s, want %s", c.codec, dump(got), dump(m))
		}
	}
	now := at.Time.Add(time.Minute)
	if err := CheckRecord(&m.Records.Items[0], now); err != nil {
		t.Errorf("check: %v", err)
	}
	six := Record{Seq: 3, Metric: &resource.MetricSample{CapturedAt: at, Missing: []string{"a", "b", "c", "d", "e", "f"}}}
	if err := CheckRecord(&six, now); err == nil {
		t.Error("six names passed the check")
	}
	// The agent's clamp keeps the known names once each and zeroes them.
	odd := Record{Seq: 4, Metric: &resource.MetricSample{CapturedAt: at, TempCPU: 12, Missing: []string{"tempCpu", "fanRpm", "tempCpu", strings.Repeat("x", 40)}}}
	if err := ClampRecord(&odd, now); err != nil || !reflect.DeepEqual(odd.Metric.Missing, []string{"tempCpu"}) || odd.Metric.TempCPU != 0 {
		t.Errorf("clamped: %v %q %v", err, odd.Metric.Missing, odd.Metric.TempCPU)
	}
	if err := CheckRecord(&odd, now); err != nil {
		t.Errorf("clamped record refused: %v", err)
	}
}
