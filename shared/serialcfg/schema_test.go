package serialcfg_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"testing"

	"github.com/fleet/fleet/shared/jsonstrict"
	"github.com/fleet/fleet/shared/serialcfg"
)

// TestDefaults: each kind's default configuration, built from the schema,
// is what the catalog has always given a fresh channel, and is valid.
func TestDefaults(t *testing.T) {
	want := map[string]serialcfg.Config{
		serialcfg.KindUART: {Kind: serialcfg.KindUART, UART: &serialcfg.UART{
			Kind: serialcfg.KindUART, BaudRate: 115200, DataBits: 8, Parity: "none", StopBits: 1, FlowControl: "none"}},
		serialcfg.KindRS485: {Kind: serialcfg.KindRS485, RS485: &serialcfg.RS485{
			Kind: serialcfg.KindRS485, BaudRate: 9600, DataBits: 8, Parity: "none", StopBits: 1, Mode: "modbus_rtu_master", SlaveID: 1,
			Poll: &serialcfg.ModbusPoll{Enabled: true, IntervalMs: 1000, Register: 0, Count: 2, Function: "holding"}}},
		serialcfg.KindCANFD: {Kind: serialcfg.KindCANFD, CANFD: &serialcfg.CANFD{
			Kind: serialcfg.KindCANFD, NominalBitrate: 500000, DataBitrate: 2000000, SamplePoint: 0.875}},
		serialcfg.KindGPIO: {Kind: serialcfg.KindGPIO, GPIO: &serialcfg.GPIO{Kind: serialcfg.KindGPIO, Direction: "in", Pull: "up", DebounceMs: 20}},
	}
	for _, kind := range serialcfg.Kinds {
		got := serialcfg.Default(kind)
		if !reflect.DeepEqual(got, want[kind]) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want[kind])
			t.Errorf("Default(%s) = %s, want %s", kind, g, w)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("Default(%s) is invalid: %v", kind, err)
		}
	}
	if !serialcfg.Default("nope").IsZero() {
		t.Error("an unknown kind has a default")
	}
}

// TestSchemaDescribesEveryMember: every JSON member of every kind (and of
// its sections and list items) has a field, of its JSON type, and every
// field is a member: the form shows all of a config and nothing else.
func TestSchemaDescribesEveryMember(t *testing.T) {
	types := map[string]reflect.Type{
		serialcfg.KindRS485: reflect.TypeOf(serialcfg.RS485{}), serialcfg.KindCANFD: reflect.TypeOf(serialcfg.CANFD{}),
		serialcfg.KindUART: reflect.TypeOf(serialcfg.UART{}), serialcfg.KindGPIO: reflect.TypeOf(serialcfg.GPIO{}),
	}
	for kind, typ := range types {
		checkMembers(t, kind, serialcfg.Schema(kind), typ)
	}
}

func checkMembers(t *testing.T, at string, fs serialcfg.Fields, typ reflect.Type) {
	t.Helper()
	seen := map[string]bool{}
	for i := 0; i < typ.NumField(); i++ {
		sf := typ.Field(i)
		name, _, _ := cutTag(sf.Tag.Get("json"))
		if name == "kind" {
			continue
		}
		seen[name] = true
		f, ok := fs.Lookup(name)
		if !ok {
			t.Errorf("%s.%s has no field in the schema", at, name)
			continue
		}
		ft := sf.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		want := map[reflect.Kind]serialcfg.FieldType{reflect.Int: serialcfg.TypeInt, reflect.Float64: serialcfg.TypeFloat,
			reflect.String: serialcfg.TypeString, reflect.Bool: serialcfg.TypeBool, reflect.Struct: serialcfg.TypeObject}[ft.Kind()]
		if sf.Type.Kind() == reflect.Slice {
			want = serialcfg.TypeList
		}
		if f.Type != want {
			t.Errorf("%s.%s is %s in the schema, %s in Go", at, name, f.Type, want)
		}
		if f.Label == "" {
			t.Errorf("%s.%s has no label", at, name)
		}
		if ft.Kind() == reflect.Struct {
			checkMembers(t, at+"."+name, f.Fields, ft)
		}
	}
	for _, f := range fs {
		if !seen[f.Name] {
			t.Errorf("%s.%s is in the schema, not in Go", at, f.Name)
		}
	}
}

func cutTag(tag string) (string, string, bool) {
	for i := 0; i < len(tag); i++ {
		if tag[i] == ',' {
			return tag[:i], tag[i+1:], true
		}
	}
	return tag, "", false
}

// TestSchemaBoundsAreValidators: a value just outside a field's bounds or
// allowed values is refused by Validate naming that field, and the bounds
// themselves pass: the form's min, max and options are the validator's.
func TestSchemaBoundsAreValidators(t *testing.T) {
	for _, tc := range []struct {
		kind, body string
		paths      []string
	}{
		{"rs485", okRS485, []string{"baudRate", "dataBits", "stopBits", "slaveId", "tx.intervalMs", "tx.register", "tx.value", "parity", "mode"}},
		{"canfd", okCANFD, []string{"nominalBitrate", "dataBitrate", "samplePoint"}},
		{"uart", okUART, []string{"baudRate", "dataBits", "stopBits", "tx.intervalMs", "parity", "flowControl"}},
		{"gpio", okGPIO, []string{"tx.value", "tx.intervalMs", "direction", "pull"}},
		{"gpio", set(t, set(t, okGPIO, "direction", "in"), "tx.enabled", false), []string{"debounceMs"}},
	} {
		for _, path := range tc.paths {
			f, ok := serialcfg.Schema(tc.kind).Lookup(path)
			if !ok {
				t.Fatalf("%s: no field %s", tc.kind, path)
			}
			var good, bad []any
			switch {
			case f.Ints != nil:
				good, bad = []any{f.Ints[0], f.Ints[len(f.Ints)-1]}, []any{f.Ints[len(f.Ints)-1] + 1}
			case f.Strings != nil:
				good, bad = []any{f.Strings[len(f.Strings)-1]}, []any{"nope"}
			case f.Type == serialcfg.TypeFloat:
				good, bad = []any{*f.Min, *f.Max}, []any{*f.Min - 0.01, *f.Max + 0.01}
			default:
				good, bad = []any{int(*f.Min), int(*f.Max)}, []any{int(*f.Max) + 1}
				if !f.ZeroOK && *f.Min > -1 {
					bad = append(bad, int(*f.Min)-1)
				}
			}
			for _, v := range good {
				if _, err := serialcfg.DecodeFor(tc.kind, []byte(set(t, tc.body, path, v))); err != nil {
					t.Errorf("%s %s = %v (a bound) refused: %v", tc.kind, path, v, err)
				}
			}
			for _, v := range bad {
				_, err := serialcfg.DecodeFor(tc.kind, []byte(set(t, tc.body, path, v)))
				var fe *jsonstrict.FieldError
				if !errors.As(err, &fe) || fe.Field != path {
					t.Errorf("%s %s = %v: err %v, want one naming %s", tc.kind, path, v, err, path)
				}
			}
		}
	}
}

// TestPointDefaultsAreTheSchemas: a point's defaults as they run
// (WithDefaults) are the schema's.
func TestPointDefaultsAreTheSchemas(t *testing.T) {
	rp := serialcfg.RS485Point{Function: "holding"}.WithDefaults(1)
	cp := serialcfg.CANPoint{}.WithDefaults()
	for _, tc := range []struct {
		kind, name, got string
	}{
		{"rs485", "order", rp.Order}, {"rs485", "scale", strconv.FormatFloat(rp.Scale, 'g', -1, 64)},
		{"rs485", "intervalMs", strconv.Itoa(rp.IntervalMs)},
		{"canfd", "byteOrder", cp.ByteOrder}, {"canfd", "scale", strconv.FormatFloat(cp.Scale, 'g', -1, 64)},
		{"canfd", "intervalMs", strconv.Itoa(cp.IntervalMs)},
	} {
		f, _ := serialcfg.Schema(tc.kind).Lookup("points." + tc.name)
		if f == nil || f.Default != tc.got {
			t.Errorf("%s points.%s: WithDefaults gives %q, the schema %+v", tc.kind, tc.name, tc.got, f)
		}
	}
}
