package serialcfg_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/fleet/fleet/shared/jsonstrict"
	"github.com/fleet/fleet/shared/serialcfg"
)

// withPoints returns body with its points array set to pts.
func withPoints(t *testing.T, body string, pts ...map[string]any) string {
	t.Helper()
	arr := make([]any, len(pts))
	for i, p := range pts {
		arr[i] = p
	}
	return set(t, body, "points", arr)
}

// rsPoint is a valid rs485 point named name with the members kv (name,
// value pairs; a nil value removes the member) set.
func rsPoint(name string, kv ...any) map[string]any {
	m := map[string]any{"name": name, "function": "holding", "register": 0, "type": "u16"}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(m, kv[i].(string))
			continue
		}
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// canPoint is a valid canfd point named name with the members kv set.
func canPoint(name string, kv ...any) map[string]any {
	m := map[string]any{"name": name, "canId": "0x123", "startBit": 0, "length": 8}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func TestPointValidation(t *testing.T) {
	ok1, ok2 := rsPoint("a"), rsPoint("b", "register", 1)
	type tc struct {
		name, group, body, field string
	}
	var cases []tc
	rs := func(name string, p map[string]any, field string) {
		cases = append(cases, tc{name, "rs485", withPoints(t, okRS485, ok1, ok2, p), field})
	}
	can := func(name string, p map[string]any, field string) {
		cases = append(cases, tc{name, "canfd", withPoints(t, okCANFD, canPoint("a"), canPoint("b"), p), field})
	}
	rs("name empty", rsPoint(""), "points[2].name")
	rs("name upper", rsPoint("Boiler"), "points[2].name")
	rs("name digit first", rsPoint("1a"), "points[2].name")
	rs("name dash", rsPoint("a-b"), "points[2].name")
	rs("name too long", rsPoint("a"+strings.Repeat("b", 32)), "points[2].name")
	rs("name twice", rsPoint("b"), "points[2].name")
	rs("slave 248", rsPoint("c", "slaveId", 248), "points[2].slaveId")
	rs("slave negative", rsPoint("c", "slaveId", -1), "points[2].slaveId")
	rs("function", rsPoint("c", "function", "write"), "points[2].function")
	rs("function missing", rsPoint("c", "function", nil), "points[2].function")
	rs("register 65536", rsPoint("c", "register", 65536), "points[2].register")
	rs("register negative", rsPoint("c", "register", -1), "points[2].register")
	rs("u32 past the end", rsPoint("c", "register", 65535, "type", "u32"), "points[2].register")
	rs("f64 past the end", rsPoint("c", "register", 65533, "type", "f64"), "points[2].register")
	rs("type", rsPoint("c", "type", "float"), "points[2].type")
	rs("type missing", rsPoint("c", "type", nil), "points[2].type")
	rs("coil u16", rsPoint("c", "function", "coil"), "points[2].type")
	rs("discrete f32", rsPoint("c", "function", "discrete", "type", "f32"), "points[2].type")
	rs("order", rsPoint("c", "order", "abcd"), "points[2].order")
	rs("order DCAB", rsPoint("c", "order", "DCAB"), "points[2].order")
	rs("order on a coil", rsPoint("c", "function", "coil", "type", "bool", "order", "ABCD"), "points[2].order")
	rs("bit 16", rsPoint("c", "type", "bool", "bit", 16), "points[2].bit")
	rs("bit negative", rsPoint("c", "type", "bool", "bit", -1), "points[2].bit")
	rs("bit on u16", rsPoint("c", "bit", 3), "points[2].bit")
	rs("bit on a coil", rsPoint("c", "function", "coil", "type", "bool", "bit", 0), "points[2].bit")
	rs("unit too long", rsPoint("c", "unit", strings.Repeat("m", 17)), "points[2].unit")
	rs("unit control", rsPoint("c", "unit", "m\n"), "points[2].unit")
	rs("interval 99", rsPoint("c", "intervalMs", 99), "points[2].intervalMs")
	rs("interval too long", rsPoint("c", "intervalMs", 86400001), "points[2].intervalMs")
	rs("deadband negative", rsPoint("c", "deadband", -0.5), "points[2].deadband")
	rs("unknown field", rsPoint("c", "scaling", 2), "points[2].scaling")
	rs("wrong type", rsPoint("c", "scale", "2"), "points[2].scale")
	many := make([]map[string]any, serialcfg.MaxPoints+1)
	for i := range many {
		many[i] = rsPoint(fmt.Sprintf("p%d", i), "register", i)
	}
	cases = append(cases, tc{"too many", "rs485", withPoints(t, okRS485, many...), "points"})

	can("name", canPoint("C"), "points[2].name")
	can("name twice", canPoint("a"), "points[2].name")
	can("canId", canPoint("c", "canId", "0x20000000"), "points[2].canId")
	can("canId missing", canPoint("c", "canId", ""), "points[2].canId")
	can("length 0", canPoint("c", "length", 0), "points[2].length")
	can("length 65", canPoint("c", "length", 65), "points[2].length")
	can("startBit 512", canPoint("c", "startBit", 512), "points[2].startBit")
	can("startBit negative", canPoint("c", "startBit", -1), "points[2].startBit")
	can("intel past the payload", canPoint("c", "startBit", 505, "length", 8), "points[2].length")
	// Motorola: start bit 7 of byte 63 is the MSB of the last byte; 9 bits
	// from there need a 65th byte.
	can("motorola past the payload", canPoint("c", "startBit", 511, "length", 9, "byteOrder", "big"), "points[2].length")
	can("motorola lsb first past the payload", canPoint("c", "startBit", 504, "length", 2, "byteOrder", "big"), "points[2].length")
	can("byteOrder", canPoint("c", "byteOrder", "motorola"), "points[2].byteOrder")
	can("min above max", canPoint("c", "min", 10, "max", 5), "points[2].min")
	can("unit", canPoint("c", "unit", strings.Repeat("x", 17)), "points[2].unit")
	can("interval", canPoint("c", "intervalMs", 50), "points[2].intervalMs")
	can("deadband", canPoint("c", "deadband", -1), "points[2].deadband")
	can("unknown field", canPoint("c", "bitOrder", "x"), "points[2].bitOrder")

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { refused(t, c.group, c.body, c.field) })
	}
}

func TestPointBoundariesAccepted(t *testing.T) {
	rs := []map[string]any{
		rsPoint("a", "register", 65535),
		rsPoint("b", "register", 65534, "type", "f32", "order", "CDAB"),
		rsPoint("c", "register", 65532, "type", "i64", "order", "DCBA"),
		rsPoint("d", "type", "bool", "bit", 15, "function", "input"),
		rsPoint("e", "type", "bool", "function", "coil", "register", 65535),
		rsPoint("f", "type", "bool", "function", "discrete"),
		rsPoint("g", "slaveId", 247, "intervalMs", 100, "unit", "°C", "deadband", 0.5, "scale", -0.1, "offset", -273.15),
		rsPoint("h"+strings.Repeat("x", 31), "intervalMs", 86400000, "unit", strings.Repeat("µ", 16)),
		rsPoint("i", "type", "bool"),
	}
	can := []map[string]any{
		canPoint("a", "startBit", 504, "length", 8),
		canPoint("b", "startBit", 0, "length", 64),
		canPoint("c", "startBit", 511, "length", 8, "byteOrder", "big"),
		canPoint("d", "startBit", 7, "length", 64, "byteOrder", "big", "signed", true),
		canPoint("e", "startBit", 448, "length", 64, "min", -5, "max", -5, "canId", "18DAF110"),
		canPoint("f", "startBit", 503, "length", 9, "byteOrder", "big"),
	}
	for _, body := range []string{withPoints(t, okRS485, rs...), withPoints(t, okCANFD, can...)} {
		kind, _ := serialcfg.PeekKind([]byte(body))
		if _, err := serialcfg.DecodeFor(kind, []byte(body)); err != nil {
			t.Errorf("%s: %v", kind, err)
		}
	}
	many := make([]map[string]any, serialcfg.MaxPoints)
	for i := range many {
		many[i] = rsPoint(fmt.Sprintf("p%d", i), "register", i)
	}
	if _, err := serialcfg.DecodeFor("rs485", []byte(withPoints(t, okRS485, many...))); err != nil {
		t.Errorf("%d points: %v", serialcfg.MaxPoints, err)
	}
}

// TestPointDefaultsStored: the config stored after a PUT shows what runs.
func TestPointDefaultsStored(t *testing.T) {
	body := withPoints(t, okRS485, rsPoint("temp", "type", "f32", "register", 10), rsPoint("run", "function", "coil", "type", "bool", "slaveId", 3, "scale", 2, "intervalMs", 500))
	c, err := serialcfg.DecodeFor("rs485", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(c.RS485.Points)
	want := `[{"name":"temp","slaveId":7,"function":"holding","register":10,"type":"f32","order":"ABCD","scale":1,"intervalMs":1000},` +
		`{"name":"run","slaveId":3,"function":"coil","register":0,"type":"bool","scale":2,"intervalMs":500}]`
	if string(got) != want {
		t.Fatalf("stored points\n got %s\nwant %s", got, want)
	}
	body = withPoints(t, okCANFD, canPoint("speed", "canId", "1a", "scale", 0.01))
	c, err = serialcfg.DecodeFor("canfd", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	got, _ = json.Marshal(c.CANFD.Points)
	want = `[{"name":"speed","canId":"0x1A","startBit":0,"length":8,"byteOrder":"little","scale":0.01,"intervalMs":1000}]`
	if string(got) != want {
		t.Fatalf("stored CAN points\n got %s\nwant %s", got, want)
	}
	defs := c.PointDefs("canfd-1")
	if len(defs) != 1 || defs[0].ID != "canfd-1.speed" || defs[0].Type != "f64" || defs[0].IntervalMs != 1000 {
		t.Fatalf("PointDefs = %+v", defs)
	}
}

// TestPointNonFiniteRefused: values JSON cannot carry can still come from
// Go callers (the agent validates what it applies).
func TestPointNonFiniteRefused(t *testing.T) {
	for _, tc := range []struct {
		field string
		mut   func(p *serialcfg.RS485Point)
	}{
		{"points[0].scale", func(p *serialcfg.RS485Point) { p.Scale = math.Inf(1) }},
		{"points[0].offset", func(p *serialcfg.RS485Point) { p.Offset = math.NaN() }},
		{"points[0].deadband", func(p *serialcfg.RS485Point) { p.Deadband = math.NaN() }},
	} {
		c, err := serialcfg.DecodeFor("rs485", []byte(okRS485))
		if err != nil {
			t.Fatal(err)
		}
		p := serialcfg.RS485Point{Name: "x", Function: "input", Type: "u16"}
		tc.mut(&p)
		c.RS485.Points = []serialcfg.RS485Point{p}
		var fe *jsonstrict.FieldError
		if err := c.Validate(); !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: err = %v", tc.field, err)
		}
	}
	inf := math.Inf(-1)
	c := serialcfg.CANFD{NominalBitrate: 500000, DataBitrate: 2000000, SamplePoint: 0.8,
		Points: []serialcfg.CANPoint{{Name: "x", CanID: "1", Length: 1, Min: &inf}}}
	var fe *jsonstrict.FieldError
	if err := c.Validate(); !errors.As(err, &fe) || fe.Field != "points[0].min" {
		t.Errorf("min -Inf: err = %v", err)
	}
}

func TestCANSignalEnd(t *testing.T) {
	for _, tc := range []struct {
		start, length int
		big           bool
		want          int
	}{
		{0, 8, false, 7},
		{7, 8, true, 7},   // Motorola byte 0 whole: MSB is bit 7
		{7, 16, true, 15}, // bytes 0 and 1
		{0, 1, true, 7},   // the LSB of byte 0 counted from its MSB
		{12, 4, true, 14}, // bits 4..1 of byte 1: 8+(7-4)+3
		{511, 8, true, 511},
	} {
		if got := serialcfg.CANSignalEnd(tc.start, tc.length, tc.big); got != tc.want {
			t.Errorf("CANSignalEnd(%d, %d, %v) = %d, want %d", tc.start, tc.length, tc.big, got, tc.want)
		}
	}
}
