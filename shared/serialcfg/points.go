package serialcfg

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/fleet/fleet/shared/jsonstrict"
)

// Points: what the registers, frames and levels of a channel mean (DESIGN.md
// "Points"). A point's id is "<channelId>.<name>".

// Point limits and allowed values.
const (
	// MaxPoints bounds the points of one channel.
	MaxPoints = 64
	// MaxPointName bounds a point's name ([a-z][a-z0-9_]{0,31}).
	MaxPointName = 32
	// MaxPointUnit bounds a point's unit.
	MaxPointUnit = 16
	// DefaultPointIntervalMs is a point's read period when intervalMs is 0.
	DefaultPointIntervalMs = 1000
	// MinPointIntervalMs and MaxPointIntervalMs bound intervalMs.
	MinPointIntervalMs = 100
	MaxPointIntervalMs = 86_400_000
	// GPIOLevelPoint is the name of the one point of a gpio input channel.
	GPIOLevelPoint = "level"
)

// Point types, byte orders and Modbus functions of an rs485 point.
var (
	PointTypes     = []string{"u16", "i16", "u32", "i32", "u64", "i64", "f32", "f64", "bool"}
	ByteOrders     = []string{"ABCD", "CDAB", "BADC", "DCBA"}
	PointFunctions = []string{"holding", "input", "coil", "discrete"}
	CANByteOrders  = []string{"little", "big"}
)

// Point qualities, as the agent reports them and the API shows them.
const (
	QualityGood  = "good"
	QualityBad   = "bad"
	QualityStale = "stale"
)

// RS485Point reads one value of a Modbus slave: Register (0-based protocol
// address) of SlaveID with Function, decoded as Type in byte Order (libmodbus's
// names), then value = raw × Scale + Offset. Zero fields take their defaults
// when the config is normalized: SlaveID the channel's, Order "ABCD", Scale 1,
// IntervalMs 1000.
type RS485Point struct {
	Name     string `json:"name"`
	SlaveID  int    `json:"slaveId,omitempty"`
	Function string `json:"function"`
	Register int    `json:"register"`
	Type     string `json:"type"`
	Order    string `json:"order,omitempty"`
	// Bit selects one bit (0..15) of a register for a "bool" point read
	// with function holding or input; nil reads the register as non-zero.
	Bit        *int    `json:"bit,omitempty"`
	Scale      float64 `json:"scale,omitempty"`
	Offset     float64 `json:"offset,omitempty"`
	Unit       string  `json:"unit,omitempty"`
	IntervalMs int     `json:"intervalMs,omitempty"`
	Deadband   float64 `json:"deadband,omitempty"`
}

// CANPoint is one signal of a CAN frame with DBC semantics: StartBit as a
// DBC file writes it (for "big", Motorola, the most significant bit's
// position in the DBC's sawtooth numbering), Length 1..64 bits, value = raw
// × Scale + Offset, Min and Max as the DBC states them (informative). It is
// decoded from classic and 64-byte FD payloads of frames with CanID.
// IntervalMs and Deadband are as an rs485 point's (the latest value
// decoded is sampled every IntervalMs).
type CANPoint struct {
	Name       string   `json:"name"`
	CanID      string   `json:"canId"`
	StartBit   int      `json:"startBit"`
	Length     int      `json:"length"`
	ByteOrder  string   `json:"byteOrder,omitempty"`
	Signed     bool     `json:"signed,omitempty"`
	Scale      float64  `json:"scale,omitempty"`
	Offset     float64  `json:"offset,omitempty"`
	Unit       string   `json:"unit,omitempty"`
	Min        *float64 `json:"min,omitempty"`
	Max        *float64 `json:"max,omitempty"`
	IntervalMs int      `json:"intervalMs,omitempty"`
	Deadband   float64  `json:"deadband,omitempty"`
}

// PointDef is what every point is regardless of its bus: what the agent
// samples and the relay lists.
type PointDef struct {
	// ID is "<channelId>.<name>".
	ID         string
	ChannelID  string
	Name       string
	Type       string // one of PointTypes ("bool" for a gpio level)
	Unit       string
	IntervalMs int
	Deadband   float64
}

// PointID returns the id of point name of channel.
func PointID(channelID, name string) string { return channelID + "." + name }

// SplitPointID splits a point id into its channel id and name; ok is false
// when id has no dot.
func SplitPointID(id string) (channelID, name string, ok bool) {
	i := strings.LastIndexByte(id, '.')
	if i <= 0 || i == len(id)-1 {
		return "", "", false
	}
	return id[:i], id[i+1:], true
}

// PointDefs returns the points of the channel configured with c, in
// configuration order: an rs485 or canfd channel's points, a gpio input's
// level; none for others or the zero Config. Defaults apply to zero fields.
func (c Config) PointDefs(channelID string) []PointDef {
	var out []PointDef
	interval := func(ms int) int {
		if ms == 0 {
			return DefaultPointIntervalMs
		}
		return ms
	}
	switch {
	case c.RS485 != nil:
		for _, p := range c.RS485.Points {
			out = append(out, PointDef{ID: PointID(channelID, p.Name), ChannelID: channelID, Name: p.Name,
				Type: p.Type, Unit: p.Unit, IntervalMs: interval(p.IntervalMs), Deadband: p.Deadband})
		}
	case c.CANFD != nil:
		for _, p := range c.CANFD.Points {
			out = append(out, PointDef{ID: PointID(channelID, p.Name), ChannelID: channelID, Name: p.Name,
				Type: p.ValueType(), Unit: p.Unit, IntervalMs: interval(p.IntervalMs), Deadband: p.Deadband})
		}
	case c.GPIO != nil && c.GPIO.Direction == "in":
		out = append(out, PointDef{ID: PointID(channelID, GPIOLevelPoint), ChannelID: channelID, Name: GPIOLevelPoint,
			Type: "bool", IntervalMs: DefaultPointIntervalMs})
	}
	return out
}

// ValueType is the point type a CAN signal is listed with: "bool" for a
// one-bit unsigned signal without scaling, else "f64".
func (p CANPoint) ValueType() string {
	if p.Length == 1 && !p.Signed && (p.Scale == 0 || p.Scale == 1) && p.Offset == 0 {
		return "bool"
	}
	return "f64"
}

// Register widths of the rs485 point types (a 16-bit register each).
var pointRegisters = map[string]int{
	"u16": 1, "i16": 1, "bool": 1,
	"u32": 2, "i32": 2, "f32": 2,
	"u64": 4, "i64": 4, "f64": 4,
}

// Registers returns how many 16-bit registers the point spans (1 for a
// coil or discrete input, which is one bit), 0 for an unknown type.
func (p RS485Point) Registers() int {
	if p.Function == "coil" || p.Function == "discrete" {
		return 1
	}
	return pointRegisters[p.Type]
}

// WithDefaults returns p with its zero fields filled as they run: SlaveID
// the channel's (channelSlave), Order "ABCD" for a register, Scale 1,
// IntervalMs DefaultPointIntervalMs.
func (p RS485Point) WithDefaults(channelSlave int) RS485Point {
	if p.SlaveID == 0 {
		p.SlaveID = channelSlave
	}
	if p.Order == "" && isRegisterFunction(p.Function) {
		p.Order = "ABCD"
	}
	commonDefaults(&p.Scale, &p.IntervalMs)
	return p
}

// WithDefaults returns p with its zero fields filled as they run: CanID in
// its stored spelling (0x and uppercase hex), ByteOrder "little", Scale 1,
// IntervalMs DefaultPointIntervalMs.
func (p CANPoint) WithDefaults() CANPoint {
	if id, _, err := ParseCANID(p.CanID); err == nil {
		p.CanID = fmt.Sprintf("0x%X", id)
	}
	if p.ByteOrder == "" {
		p.ByteOrder = "little"
	}
	commonDefaults(&p.Scale, &p.IntervalMs)
	return p
}

// commonDefaults fills the defaults rs485 points and CAN signals share.
func commonDefaults(scale *float64, intervalMs *int) {
	if *scale == 0 {
		*scale = 1
	}
	if *intervalMs == 0 {
		*intervalMs = DefaultPointIntervalMs
	}
}

func isRegisterFunction(f string) bool { return f == "holding" || f == "input" }

// validatePoints checks an rs485 channel's points; errors name the field
// as points[i].field.
func (c *RS485) validatePoints() error {
	return eachPoint(len(c.Points), func(i int) string { return c.Points[i].Name }, func(i int, f func(string) string) error {
		p, s, at := c.Points[i], rs485PointFields, fmt.Sprintf("points[%d]", i)
		if err := firstErr(
			s.Int(at, "slaveId", p.SlaveID),
			s.String(at, "function", p.Function),
			s.Int(at, "register", p.Register),
			s.String(at, "type", p.Type),
		); err != nil {
			return err
		}
		reg := isRegisterFunction(p.Function)
		if !reg && p.Type != "bool" {
			return jsonstrict.Fieldf(f("type"), "must be \"bool\" for function %s (got %q)", p.Function, p.Type)
		}
		if n := p.Registers(); p.Register+n-1 > 65535 {
			return jsonstrict.Fieldf(f("register"), "a %s spans %d registers: register+%d must not pass 65535 (got %d)", p.Type, n, n-1, p.Register)
		}
		if p.Order != "" {
			if !reg {
				return jsonstrict.Fieldf(f("order"), "applies to registers only, not to function %s", p.Function)
			}
			if err := s.String(at, "order", p.Order); err != nil {
				return err
			}
		}
		if p.Bit != nil {
			if p.Type != "bool" || !reg {
				return jsonstrict.Fieldf(f("bit"), "applies only to a \"bool\" read from a holding or input register")
			}
			if err := s.Int(at, "bit", *p.Bit); err != nil {
				return err
			}
		}
		return pointCommon(f, p.Scale, p.Offset, p.Unit, p.IntervalMs, p.Deadband)
	})
}

// validatePoints checks a canfd channel's points (DBC semantics over a
// 64-byte payload).
func (c *CANFD) validatePoints() error {
	return eachPoint(len(c.Points), func(i int) string { return c.Points[i].Name }, func(i int, f func(string) string) error {
		p, s, at := c.Points[i], canPointFields, fmt.Sprintf("points[%d]", i)
		if _, _, err := ParseCANID(p.CanID); err != nil {
			return jsonstrict.Fieldf(f("canId"), "%v", err)
		}
		if err := firstErr(
			s.Int(at, "length", p.Length),
			s.Int(at, "startBit", p.StartBit),
			s.String(at, "byteOrder", p.ByteOrder),
		); err != nil {
			return err
		}
		if _, err := p.LastByte(); err != nil {
			var fe *jsonstrict.FieldError
			if errors.As(err, &fe) {
				return jsonstrict.Fieldf(f(fe.Field), "%s", fe.Msg)
			}
			return err
		}
		for _, m := range []struct {
			name string
			v    *float64
		}{{"min", p.Min}, {"max", p.Max}} {
			if m.v != nil && !finite(*m.v) {
				return jsonstrict.Fieldf(f(m.name), "must be a finite number")
			}
		}
		if p.Min != nil && p.Max != nil && *p.Min > *p.Max {
			return jsonstrict.Fieldf(f("min"), "must not be above max (%g > %g)", *p.Min, *p.Max)
		}
		return pointCommon(f, p.Scale, p.Offset, p.Unit, p.IntervalMs, p.Deadband)
	})
}

// MaxCANPayloadBits is the bits of the largest (64-byte FD) payload.
const MaxCANPayloadBits = 64 * 8

// CANSawtoothMSB returns where the most significant bit of a big-endian
// (Motorola) signal with DBC start bit startBit sits in the payload read
// as one MSB-first bit string (position 0 = bit 7 of byte 0). A DBC file
// numbers bits byte*8 + bit with bit 0 a byte's least significant, and a
// Motorola signal names its MSB there, then runs down within the byte and
// on from bit 7 of the next (the "sawtooth").
func CANSawtoothMSB(startBit int) int { return startBit/8*8 + 7 - startBit%8 }

// CANLastByte is the one rule for where a CAN signal sits in a frame: it
// returns the index of the last payload byte that a signal of length bits
// at DBC start bit startBit occupies, so a frame carries the signal when
// its payload has more than that many bytes. A little-endian (Intel, @1)
// signal has its least significant bit at startBit and runs on towards
// higher bits and bytes; a big-endian (Motorola, @0) one has its most
// significant bit there (CANSawtoothMSB) and runs on towards later bytes.
// It fails when length is not 1..64, startBit not 0..511 or the signal
// ends past the 64-byte FD payload; the error names the field at fault.
func CANLastByte(startBit, length int, bigEndian bool) (int, error) {
	if length < 1 || length > 64 {
		return 0, jsonstrict.Fieldf("length", "must be 1..64 (got %d)", length)
	}
	if startBit < 0 || startBit >= MaxCANPayloadBits {
		return 0, jsonstrict.Fieldf("startBit", "must be 0..%d (got %d)", MaxCANPayloadBits-1, startBit)
	}
	last := startBit + length - 1 // Intel: counted from byte 0's LSB
	order := "little"
	if bigEndian {
		last = CANSawtoothMSB(startBit) + length - 1 // counted from byte 0's MSB
		order = "big"
	}
	if last >= MaxCANPayloadBits {
		return 0, jsonstrict.Fieldf("length", "%d bits from start bit %d (%s) do not fit a 64-byte frame",
			length, startBit, order)
	}
	return last / 8, nil
}

// LastByte is CANLastByte for p (byte order "" is little).
func (p CANPoint) LastByte() (int, error) {
	return CANLastByte(p.StartBit, p.Length, p.ByteOrder == "big")
}

// eachPoint checks the count of n points and their names (name(i)), then
// runs check on each with f naming its fields (points[i].field).
func eachPoint(n int, name func(int) string, check func(i int, f func(string) string) error) error {
	if n > MaxPoints {
		return jsonstrict.Fieldf("points", "at most %d points per channel (got %d)", MaxPoints, n)
	}
	seen := map[string]int{}
	for i := range n {
		f := func(field string) string { return fmt.Sprintf("points[%d].%s", i, field) }
		if err := pointName(f("name"), name(i), seen, i); err != nil {
			return err
		}
		if err := check(i, f); err != nil {
			return err
		}
	}
	return nil
}

// pointName checks the name of point i and that no earlier point has it.
func pointName(field, name string, seen map[string]int, i int) error {
	if !ValidPointName(name) {
		return jsonstrict.Fieldf(field, "must match [a-z][a-z0-9_]{0,%d} (got %q)", MaxPointName-1, name)
	}
	if j, dup := seen[name]; dup {
		return jsonstrict.Fieldf(field, "%q is already the name of points[%d]", name, j)
	}
	seen[name] = i
	return nil
}

// ValidPointName reports whether s is a point's name:
// [a-z][a-z0-9_]{0,31} (at most MaxPointName bytes).
func ValidPointName(s string) bool {
	if len(s) == 0 || len(s) > MaxPointName || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// pointCommon checks the fields an rs485 point and a CAN signal share.
func pointCommon(f func(string) string, scale, offset float64, unit string, intervalMs int, deadband float64) error {
	if !finite(scale) {
		return jsonstrict.Fieldf(f("scale"), "must be a finite number (0 or absent means 1)")
	}
	if !finite(offset) {
		return jsonstrict.Fieldf(f("offset"), "must be a finite number")
	}
	if n := utf8.RuneCountInString(unit); n > MaxPointUnit || !utf8.ValidString(unit) {
		return jsonstrict.Fieldf(f("unit"), "at most %d characters (got %d)", MaxPointUnit, n)
	}
	if !UnitPrintable(unit) {
		return jsonstrict.Fieldf(f("unit"), "must be printable characters (got %q)", unit)
	}
	if err := pointCommonFields.Int(strings.TrimSuffix(f(""), "."), "intervalMs", intervalMs); err != nil {
		return err
	}
	if !finite(deadband) || deadband < 0 {
		return jsonstrict.Fieldf(f("deadband"), "must be a finite number ≥ 0 (got %g)", deadband)
	}
	return nil
}

// pointsErr decodes each member of the body's points array strictly on its
// own, so that a decoding error (an unknown field, a wrong type, a member
// given twice) names the point: points[2].scale. It returns nil when
// every point decodes or the body has no points array.
func pointsErr[T any](body []byte) error {
	var obj struct {
		Points []json.RawMessage `json:"points"`
	}
	if json.Unmarshal(body, &obj) != nil {
		return nil
	}
	for i, raw := range obj.Points {
		var p T
		if err := jsonstrict.Decode(raw, &p); err != nil {
			var fe *jsonstrict.FieldError
			if errors.As(err, &fe) {
				field := fmt.Sprintf("points[%d]", i)
				if fe.Field != "" {
					field += "." + fe.Field
				}
				return jsonstrict.Fieldf(field, "%s", strings.TrimPrefix(fe.Msg, "body "))
			}
			return err
		}
	}
	return nil
}

// UnitPrintable tells whether every character of a point's unit is
// printable, as a configuration's units must be.
func UnitPrintable(unit string) bool {
	for _, r := range unit {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
