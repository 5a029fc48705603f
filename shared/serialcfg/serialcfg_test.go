package serialcfg_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/fleet/fleet/shared/jsonstrict"
	"github.com/fleet/fleet/shared/serialcfg"
)

const (
	okRS485 = `{"kind":"rs485","baudRate":9600,"dataBits":8,"parity":"none","stopBits":1,"mode":"modbus_rtu_master","slaveId":7,"tx":{"enabled":true,"intervalMs":1000,"register":40001,"value":123}}`
	okCANFD = `{"kind":"canfd","nominalBitrate":500000,"dataBitrate":2000000,"samplePoint":0.875,"listenOnly":false,"tx":{"enabled":true,"intervalMs":0,"canId":"0x123","dataHex":"01 02 03 04 05 06 07 08 09 0A 0B 0C"}}`
	okUART  = `{"kind":"uart","baudRate":230400,"dataBits":8,"parity":"even","stopBits":2,"flowControl":"rtscts","tx":{"enabled":true,"intervalMs":100,"dataHex":"48 49 0D 0A"}}`
	okGPIO  = `{"kind":"gpio","direction":"out","pull":"none","debounceMs":0,"tx":{"enabled":true,"intervalMs":86400000,"value":1}}`
)

// set replaces the JSON member at a dotted path of a valid body.
func set(t *testing.T, body, path string, v any) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(path, ".")
	cur := m
	for _, p := range parts[:len(parts)-1] {
		next, ok := cur[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			cur[p] = next
		}
		cur = next
	}
	if v == nil {
		delete(cur, parts[len(parts)-1])
	} else {
		cur[parts[len(parts)-1]] = v
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func TestValidConfigsRoundTrip(t *testing.T) {
	for _, tc := range []struct{ group, body string }{
		{"rs485", okRS485}, {"canfd", okCANFD}, {"uart", okUART}, {"gpio", okGPIO},
	} {
		t.Run(tc.group, func(t *testing.T) {
			c, err := serialcfg.DecodeFor(tc.group, []byte(tc.body))
			if err != nil {
				t.Fatalf("DecodeFor: %v", err)
			}
			if c.Kind != tc.group {
				t.Fatalf("kind = %q", c.Kind)
			}
			out, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			var a, b map[string]any
			json.Unmarshal([]byte(tc.body), &a)
			json.Unmarshal(out, &b)
			ja, _ := json.Marshal(a)
			jb, _ := json.Marshal(b)
			if string(ja) != string(jb) {
				t.Fatalf("round trip changed the config:\n in: %s\nout: %s", ja, jb)
			}
		})
	}
}

func TestValidationRules(t *testing.T) {
	type tc struct {
		name, group, body, field string
	}
	var cases []tc
	bad := func(name, group, base, path string, v any, field string) {
		cases = append(cases, tc{name, group, set(t, base, path, v), field})
	}
	// rs485
	for _, v := range []any{0, 300, 9601, 230400} {
		bad("rs485 baud", "rs485", okRS485, "baudRate", v, "baudRate")
	}
	bad("rs485 dataBits 6", "rs485", okRS485, "dataBits", 6, "dataBits")
	bad("rs485 dataBits 9", "rs485", okRS485, "dataBits", 9, "dataBits")
	bad("rs485 parity", "rs485", okRS485, "parity", "mark", "parity")
	bad("rs485 stopBits", "rs485", okRS485, "stopBits", 3, "stopBits")
	bad("rs485 mode", "rs485", okRS485, "mode", "modbus_rtu_slave", "mode")
	bad("rs485 slave 0", "rs485", okRS485, "slaveId", 0, "slaveId")
	bad("rs485 slave 248", "rs485", okRS485, "slaveId", 248, "slaveId")
	bad("rs485 register", "rs485", okRS485, "tx.register", 65536, "tx.register")
	bad("rs485 register neg", "rs485", okRS485, "tx.register", -1, "tx.register")
	bad("rs485 value", "rs485", okRS485, "tx.value", 65536, "tx.value")
	bad("rs485 interval 99", "rs485", okRS485, "tx.intervalMs", 99, "tx.intervalMs")
	bad("rs485 interval big", "rs485", okRS485, "tx.intervalMs", 86400001, "tx.intervalMs")
	bad("rs485 poll count", "rs485", okRS485, "poll", map[string]any{"enabled": true, "intervalMs": 1000, "register": 0, "count": 126, "function": "holding"}, "poll.count")
	bad("rs485 poll function", "rs485", okRS485, "poll", map[string]any{"enabled": true, "intervalMs": 1000, "register": 0, "count": 1, "function": "coil"}, "poll.function")
	bad("rs485 poll interval", "rs485", okRS485, "poll", map[string]any{"enabled": true, "intervalMs": 0, "register": 0, "count": 1, "function": "input"}, "poll.intervalMs")
	bad("rs485 unknown field", "rs485", okRS485, "parityBits", 1, "parityBits")
	bad("rs485 wrong type", "rs485", okRS485, "baudRate", "9600", "baudRate")
	// canfd
	bad("canfd nominal", "canfd", okCANFD, "nominalBitrate", 400000, "nominalBitrate")
	bad("canfd data", "canfd", okCANFD, "dataBitrate", 3000000, "dataBitrate")
	bad("canfd sample low", "canfd", okCANFD, "samplePoint", 0.49, "samplePoint")
	bad("canfd sample high", "canfd", okCANFD, "samplePoint", 0.96, "samplePoint")
	bad("canfd listenOnly with tx", "canfd", okCANFD, "listenOnly", true, "tx.enabled")
	bad("canfd canId std too big", "canfd", okCANFD, "tx.canId", "0x20000000", "tx.canId")
	bad("canfd canId not hex", "canfd", okCANFD, "tx.canId", "0xZZ", "tx.canId")
	bad("canfd canId empty", "canfd", okCANFD, "tx.canId", "", "tx.canId")
	bad("canfd length 9", "canfd", okCANFD, "tx.dataHex", "01 02 03 04 05 06 07 08 09", "tx.dataHex")
	bad("canfd length 65", "canfd", okCANFD, "tx.dataHex", strings.TrimSpace(strings.Repeat("AA ", 65)), "tx.dataHex")
	bad("canfd bad byte", "canfd", okCANFD, "tx.dataHex", "0G", "tx.dataHex")
	bad("canfd interval", "canfd", okCANFD, "tx.intervalMs", 50, "tx.intervalMs")
	// uart
	bad("uart baud", "uart", okUART, "baudRate", 460800, "baudRate")
	bad("uart dataBits 4", "uart", okUART, "dataBits", 4, "dataBits")
	bad("uart flow", "uart", okUART, "flowControl", "xonxoff", "flowControl")
	bad("uart tx empty", "uart", okUART, "tx.dataHex", "", "tx.dataHex")
	bad("uart tx too long", "uart", okUART, "tx.dataHex", strings.Repeat("AB", 257), "tx.dataHex")
	// gpio
	bad("gpio direction", "gpio", okGPIO, "direction", "inout", "direction")
	bad("gpio pull", "gpio", okGPIO, "pull", "weak", "pull")
	bad("gpio value", "gpio", okGPIO, "tx.value", 2, "tx.value")
	bad("gpio debounce on output", "gpio", okGPIO, "debounceMs", 10, "debounceMs")
	bad("gpio debounce too long", "gpio", set(t, set(t, okGPIO, "direction", "in"), "tx.enabled", false), "debounceMs", 1001, "debounceMs")
	bad("gpio input tx", "gpio", okGPIO, "direction", "in", "tx.enabled")
	// kind
	bad("missing kind", "rs485", okRS485, "kind", nil, "kind")

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { refused(t, c.group, c.body, c.field) })
	}
}

// refused checks that a PUT of body on a channel of group is refused with
// a *jsonstrict.FieldError naming field ("" for any) with a message.
func refused(t *testing.T, group, body, field string) {
	t.Helper()
	_, err := serialcfg.DecodeFor(group, []byte(body))
	var fe *jsonstrict.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v (%T), want *jsonstrict.FieldError", err, err)
	}
	if field != "" && fe.Field != field {
		t.Fatalf("field = %q (%v), want %q", fe.Field, fe, field)
	}
	if fe.Msg == "" {
		t.Fatal("empty message")
	}
}

func TestBoundaryValuesAccepted(t *testing.T) {
	for _, body := range []string{
		set(t, okRS485, "tx.intervalMs", 100),
		set(t, okRS485, "tx.intervalMs", 86400000),
		set(t, okRS485, "tx.intervalMs", 0),
		set(t, okRS485, "slaveId", 247),
		set(t, okRS485, "tx.register", 65535),
		set(t, okCANFD, "tx.canId", "7FF"),
		set(t, okCANFD, "tx.canId", "0x1FFFFFFF"),
		set(t, okCANFD, "tx.dataHex", ""),
		set(t, okCANFD, "tx.dataHex", strings.TrimSpace(strings.Repeat("AA ", 64))),
		set(t, okCANFD, "samplePoint", 0.5),
		set(t, set(t, okCANFD, "nominalBitrate", 1000000), "dataBitrate", 1000000), // equal is allowed
		set(t, set(t, okCANFD, "samplePoint", 0.95), "dataBitrate", 8000000),
		set(t, set(t, okCANFD, "listenOnly", true), "tx.enabled", false),
	} {
		kind, _ := serialcfg.PeekKind([]byte(body))
		if _, err := serialcfg.DecodeFor(kind, []byte(body)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}

func TestKindMismatch(t *testing.T) {
	_, err := serialcfg.DecodeFor("rs485", []byte(okCANFD))
	if !errors.Is(err, serialcfg.ErrKindMismatch) {
		t.Fatalf("err = %v, want ErrKindMismatch", err)
	}
	_, err = serialcfg.DecodeFor("rs485", []byte(`{"kind":"bogus"}`))
	if !errors.Is(err, serialcfg.ErrKindMismatch) {
		t.Fatalf("unknown kind: err = %v, want ErrKindMismatch", err)
	}
}

func TestSyntaxErrors(t *testing.T) {
	for _, body := range []string{``, `{`, `[1]x`, `{"kind":"rs485"} {}`, `nope`} {
		_, err := serialcfg.DecodeFor("rs485", []byte(body))
		var se *jsonstrict.SyntaxError
		var fe *jsonstrict.FieldError
		if !errors.As(err, &se) && !errors.As(err, &fe) {
			t.Errorf("%q: err = %v (%T)", body, err, err)
		}
	}
	_, err := serialcfg.DecodeFor("rs485", []byte(`{"kind":`))
	var se *jsonstrict.SyntaxError
	if !errors.As(err, &se) {
		t.Fatalf("truncated: %T %v", err, err)
	}
	_, err = serialcfg.DecodeFor("rs485", []byte(`[]`))
	var fe *jsonstrict.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("array body: %T %v", err, err)
	}
}

func TestCANIDAndHex(t *testing.T) {
	for _, tc := range []struct {
		in  string
		id  uint32
		ext bool
	}{{"0x123", 0x123, false}, {"7ff", 0x7FF, false}, {"0X800", 0x800, true}, {"1FFFFFFF", 0x1FFFFFFF, true}} {
		id, ext, err := serialcfg.ParseCANID(tc.in)
		if err != nil || id != tc.id || ext != tc.ext {
			t.Errorf("ParseCANID(%q) = %x %v %v", tc.in, id, ext, err)
		}
	}
	if got := serialcfg.FormatCANID(0x18, false); got != "018" {
		t.Errorf("FormatCANID std = %q", got)
	}
	if got := serialcfg.FormatCANID(0x18DAF110, true); got != "18DAF110" {
		t.Errorf("FormatCANID ext = %q", got)
	}
	b, err := serialcfg.ParseHexBytes("de AD 01")
	if err != nil || serialcfg.FormatHexBytes(b) != "DE AD 01" {
		t.Errorf("hex = %v %v", b, err)
	}
	b, err = serialcfg.ParseHexBytes("DEAD01")
	if err != nil || len(b) != 3 {
		t.Errorf("compact hex = %v %v", b, err)
	}
	if _, err := serialcfg.ParseHexBytes("DEA"); err == nil {
		t.Error("odd digit count accepted")
	}
}

func TestActivePollsResolvesSlave(t *testing.T) {
	c := serialcfg.RS485{SlaveID: 9,
		Poll:  &serialcfg.ModbusPoll{Enabled: true, Count: 2},
		Polls: []serialcfg.ModbusPoll{{Enabled: true, SlaveID: 3, Count: 1}, {Enabled: false, SlaveID: 4, Count: 1}},
	}
	got := c.ActivePolls()
	if len(got) != 2 || got[0].SlaveID != 9 || got[1].SlaveID != 3 {
		t.Fatalf("ActivePolls = %+v", got)
	}
}
