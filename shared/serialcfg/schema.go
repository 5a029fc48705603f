package serialcfg

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/fleet/fleet/shared/jsonstrict"
)

// The schema: every member of each kind's JSON object described once, with
// its type, allowed values, bounds, default and a short help. Validate
// checks a config's single values against these fields (the rules between
// fields stay in code), Default builds each kind's default configuration
// from them, and the relay's panel builds its channel forms from them, so
// the three cannot disagree.

// FieldType is the JSON type of a Field.
type FieldType string

// Field types.
const (
	TypeInt    FieldType = "int"
	TypeFloat  FieldType = "float"
	TypeString FieldType = "string"
	TypeBool   FieldType = "bool"
	TypeObject FieldType = "object" // Fields are its members
	TypeList   FieldType = "list"   // an array of objects; Fields are an item's members
)

// Field describes one member of a channel config's JSON object. The
// tables are shared: callers must not modify a Field or its slices.
type Field struct {
	// Name is the JSON member's name.
	Name string
	Type FieldType
	// Label is what a form shows; ItemLabel names one item of a list.
	Label, ItemLabel string
	// Help says what the value means, in a few words.
	Help string
	// Ints or Strings, when set, are the only values allowed.
	Ints    []int
	Strings []string
	// Min and Max bound a number when not nil.
	Min, Max *float64
	// ZeroOK allows 0 outside Min..Max; ZeroMeans says what 0 stands for
	// (shown in the error).
	ZeroOK    bool
	ZeroMeans string
	// Optional members may be left out (an empty form field omits them);
	// an optional object is a section that may be absent.
	Optional bool
	// Default is the value of a new configuration or list item ("" none),
	// as JSON text ("9600", "holding", "true").
	Default string
	// DefaultOn: an optional object that the kind's default configuration
	// has (rs485's poll).
	DefaultOn bool
	// Toggle names the bool member that switches an optional object on.
	Toggle string
	// Fields are an object's members or a list item's.
	Fields []Field
	// MaxItems bounds a list; MaxLen a string's characters.
	MaxItems, MaxLen int
}

// Fields is a list of fields, as a kind's Schema or an object's members.
type Fields []Field

// Lookup returns the field at a dotted path ("tx.intervalMs"); list items
// are looked up by the list's name ("points.scale").
func (fs Fields) Lookup(path string) (*Field, bool) {
	name, rest, nested := strings.Cut(path, ".")
	for i := range fs {
		if fs[i].Name != name {
			continue
		}
		if !nested {
			return &fs[i], true
		}
		return Fields(fs[i].Fields).Lookup(rest)
	}
	return nil, false
}

// at is Lookup for the validators: a missing field is a mistake of this
// package, which its tests catch.
func (fs Fields) at(path string) *Field {
	f, ok := fs.Lookup(path)
	if !ok {
		panic("serialcfg: no field " + path + " in the schema")
	}
	return f
}

// Int checks v against field name's allowed values and bounds; the error
// names prefix.name.
func (fs Fields) Int(prefix, name string, v int) error {
	f, field := fs.at(name), join(prefix, name)
	switch {
	case v == 0 && f.ZeroOK:
		return nil
	case f.Ints != nil:
		return oneOfInt(field, v, f.Ints)
	case f.Min != nil && f.Max != nil && (float64(v) < *f.Min || float64(v) > *f.Max):
		if f.ZeroMeans != "" {
			return jsonstrict.Fieldf(field, "must be 0 (%s) or between %d and %d (got %d)", f.ZeroMeans, int(*f.Min), int(*f.Max), v)
		}
		return rangeInt(field, v, int(*f.Min), int(*f.Max))
	}
	return nil
}

// String checks v against field name's allowed values; the error names
// prefix.name.
func (fs Fields) String(prefix, name, v string) error {
	f := fs.at(name)
	if f.Strings == nil || (v == "" && f.Optional) {
		return nil
	}
	return oneOfString(join(prefix, name), v, f.Strings)
}

// Float checks v against field name's bounds; the error names prefix.name.
func (fs Fields) Float(prefix, name string, v float64) error {
	f := fs.at(name)
	if (f.Min != nil && v < *f.Min) || (f.Max != nil && v > *f.Max) || v != v {
		return jsonstrict.Fieldf(join(prefix, name), "must be between %g and %g (got %g)", *f.Min, *f.Max, v)
	}
	return nil
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

func num(v float64) *float64 { return &v }

func intEnum(name, label string, vals []int, def string) Field {
	return Field{Name: name, Type: TypeInt, Label: label, Ints: vals, Default: def}
}

func strEnum(name, label string, vals []string, def string) Field {
	return Field{Name: name, Type: TypeString, Label: label, Strings: vals, Default: def}
}

func intRange(name, label string, lo, hi int, def string) Field {
	return Field{Name: name, Type: TypeInt, Label: label, Min: num(float64(lo)), Max: num(float64(hi)), Default: def}
}

// txIntervalField is every tx's intervalMs.
var txIntervalField = Field{Name: "intervalMs", Type: TypeInt, Label: "Interval (ms)", Min: num(float64(MinTxIntervalMs)),
	Max: num(float64(MaxTxIntervalMs)), ZeroOK: true, ZeroMeans: "single send", Help: "0 sends once"}

var enabledField = Field{Name: "enabled", Type: TypeBool, Label: "Enabled"}

// pollFields are a Modbus poll's members (poll and each of polls).
var pollFields = Fields{
	{Name: "enabled", Type: TypeBool, Label: "Enabled", Default: "true"},
	intRange("intervalMs", "Interval (ms)", MinTxIntervalMs, MaxTxIntervalMs, "1000"),
	intRange("register", "Register", 0, 65535, "0"),
	intRange("count", "Count", 1, 125, "2"),
	strEnum("function", "Function", PollFunctions, "holding"),
	{Name: "slaveId", Type: TypeInt, Label: "Slave id", Min: num(1), Max: num(247), ZeroOK: true, Optional: true,
		Help: "empty: the channel's slave id (required in extra polls)"},
}

// pointCommonFields are the members an rs485 point and a CAN signal share
// after their own.
var pointCommonFields = Fields{
	{Name: "scale", Type: TypeFloat, Label: "Scale", Optional: true, Default: "1", Help: "value = raw × scale + offset"},
	{Name: "offset", Type: TypeFloat, Label: "Offset", Optional: true, Default: "0"},
	{Name: "unit", Type: TypeString, Label: "Unit", Optional: true, MaxLen: MaxPointUnit},
	{Name: "intervalMs", Type: TypeInt, Label: "Interval (ms)", Optional: true, ZeroOK: true, Default: strconv.Itoa(DefaultPointIntervalMs),
		Min: num(MinPointIntervalMs), Max: num(MaxPointIntervalMs)},
	{Name: "deadband", Type: TypeFloat, Label: "Deadband", Optional: true, Default: "0", Min: num(0),
		Help: "a sample is recorded when the value moved more than this"},
}

var pointNameField = Field{Name: "name", Type: TypeString, Label: "Name", MaxLen: MaxPointName,
	Help: "lowercase letters, digits and _, unique in the channel"}

var rs485PointFields = append(Fields{
	pointNameField,
	{Name: "slaveId", Type: TypeInt, Label: "Slave id", Min: num(1), Max: num(247), ZeroOK: true, Optional: true, Help: "empty: the channel's"},
	strEnum("function", "Function", PointFunctions, "holding"),
	intRange("register", "Register", 0, 65535, ""),
	strEnum("type", "Type", PointTypes, ""),
	{Name: "order", Type: TypeString, Label: "Byte order", Strings: ByteOrders, Optional: true, Default: ByteOrders[0],
		Help: "registers only"},
	{Name: "bit", Type: TypeInt, Label: "Bit", Min: num(0), Max: num(15), Optional: true,
		Help: "one bit of a bool register; empty: non-zero is 1"},
}, pointCommonFields...)

var canPointFields = append(Fields{
	pointNameField,
	{Name: "canId", Type: TypeString, Label: "CAN id", Help: "hex, such as 0x123 or 18DAF110"},
	intRange("startBit", "Start bit", 0, MaxCANPayloadBits-1, ""),
	intRange("length", "Length (bits)", 1, 64, ""),
	{Name: "byteOrder", Type: TypeString, Label: "Byte order", Strings: CANByteOrders, Optional: true, Default: CANByteOrders[0],
		Help: "little: Intel; big: Motorola"},
	{Name: "signed", Type: TypeBool, Label: "Signed", Optional: true},
	{Name: "min", Type: TypeFloat, Label: "Minimum", Optional: true, Help: "as the DBC states it"},
	{Name: "max", Type: TypeFloat, Label: "Maximum", Optional: true},
}, pointCommonFields...)

// serialFields are the serial settings of rs485 and uart.
func serialFields(bauds []int, defBaud string, dataBits Field) Fields {
	return Fields{
		intEnum("baudRate", "Baud rate", bauds, defBaud),
		dataBits,
		strEnum("parity", "Parity", Parities, "none"),
		intEnum("stopBits", "Stop bits", []int{1, 2}, "1"),
	}
}

var schemas = map[string]Fields{
	KindRS485: append(serialFields(RS485BaudRates, "9600", intEnum("dataBits", "Data bits", []int{7, 8}, "8")),
		strEnum("mode", "Mode", ModbusModes, "modbus_rtu_master"),
		intRange("slaveId", "Slave id", 1, 247, "1"),
		Field{Name: "tx", Type: TypeObject, Label: "Send", Help: "writes value to register of the slave (function 6)", Fields: Fields{
			enabledField, txIntervalField, intRange("register", "Register", 0, 65535, ""), intRange("value", "Value", 0, 65535, ""),
		}},
		Field{Name: "poll", Type: TypeObject, Label: "Poll", Optional: true, DefaultOn: true, Toggle: "enabled",
			Help: "reads count registers of the slave every interval", Fields: pollFields},
		Field{Name: "polls", Type: TypeList, Label: "Extra polls", ItemLabel: "Extra poll", MaxItems: MaxPolls, Optional: true,
			Help: "other slaves on the same bus", Fields: pollFields},
		Field{Name: "points", Type: TypeList, Label: "Points", ItemLabel: "Point", MaxItems: MaxPoints, Optional: true,
			Help: "named values read from the slaves (docs/serial.md)", Fields: rs485PointFields},
	),
	KindCANFD: {
		intEnum("nominalBitrate", "Nominal bitrate", NominalBitrates, "500000"),
		intEnum("dataBitrate", "Data bitrate", DataBitrates, "2000000"),
		{Name: "samplePoint", Type: TypeFloat, Label: "Sample point", Min: num(0.5), Max: num(0.95), Default: "0.875"},
		{Name: "listenOnly", Type: TypeBool, Label: "Listen only"},
		{Name: "tx", Type: TypeObject, Label: "Send", Help: "sends one frame", Fields: Fields{
			enabledField, txIntervalField,
			{Name: "canId", Type: TypeString, Label: "CAN id", Help: "hex, such as 0x123"},
			{Name: "dataHex", Type: TypeString, Label: "Data (hex)", Help: "bytes such as 01 A2 FF: 0-8, 12, 16, 20, 24, 32, 48 or 64"},
		}},
		{Name: "points", Type: TypeList, Label: "Points", ItemLabel: "Point", MaxItems: MaxPoints, Optional: true,
			Help: "signals of received frames, as a DBC file defines them", Fields: canPointFields},
	},
	KindUART: append(serialFields(UARTBaudRates, "115200", intRange("dataBits", "Data bits", 5, 8, "8")),
		strEnum("flowControl", "Flow control", FlowControls, "none"),
		Field{Name: "tx", Type: TypeObject, Label: "Send", Help: "sends the bytes", Fields: Fields{
			enabledField, txIntervalField,
			{Name: "dataHex", Type: TypeString, Label: "Data (hex)", Help: fmt.Sprintf("bytes such as 41 54 0D 0A, at most %d", MaxUARTTxBytes)},
		}},
	),
	KindGPIO: {
		strEnum("direction", "Direction", Directions, "in"),
		strEnum("pull", "Pull", Pulls, "up"),
		{Name: "debounceMs", Type: TypeInt, Label: "Debounce (ms)", Min: num(0), Max: num(1000), Default: "20", Help: "inputs only; 0 for an output"},
		{Name: "tx", Type: TypeObject, Label: "Send", Help: "drives an output to value", Fields: Fields{
			enabledField, txIntervalField, intRange("value", "Value", 0, 1, ""),
		}},
	},
}

// Schema returns the fields of kind's JSON object (without "kind"), nil
// for an unknown kind. The result is shared: do not modify it.
func Schema(kind string) Fields { return schemas[kind] }

// Default returns a fresh default configuration of kind, built from its
// schema's defaults (a gpio line is an input), or the zero Config for an
// unknown kind.
func Default(kind string) Config {
	fs, ok := schemas[kind]
	if !ok {
		return Config{}
	}
	doc := map[string]any{"kind": kind}
	defaults(fs, doc)
	b, err := json.Marshal(doc)
	if err == nil {
		var c Config
		if c, err = Decode(b); err == nil {
			return c
		}
	}
	panic(fmt.Sprintf("serialcfg: the schema's defaults of %s do not decode: %v", kind, err))
}

// defaults sets the default of every field of fs in doc, recursing into
// objects and optional objects that are on by default.
func defaults(fs Fields, doc map[string]any) {
	for _, f := range fs {
		switch {
		case f.Type == TypeObject && (!f.Optional || f.DefaultOn):
			sub := map[string]any{}
			defaults(f.Fields, sub)
			doc[f.Name] = sub
		case f.Default != "" && f.Type != TypeObject && f.Type != TypeList:
			doc[f.Name] = json.RawMessage(defaultJSON(f))
		}
	}
}

// defaultJSON is f's default as JSON.
func defaultJSON(f Field) string {
	if f.Type == TypeString {
		b, _ := json.Marshal(f.Default)
		return string(b)
	}
	return f.Default
}
