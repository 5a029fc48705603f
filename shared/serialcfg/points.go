package serialcfg

import "strings"

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
