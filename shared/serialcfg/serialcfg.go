// Package serialcfg defines the configuration of an industrial I/O channel
// (the spec's "Channel config", one shape per kind: rs485, canfd, uart,
// gpio), its validation against the allowed values of DESIGN.md, its strict
// JSON decoding, and a channel's telemetry. The relay validates what a
// customer PUTs with it; the agent applies the same values. It does no I/O.
package serialcfg

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/fxamacker/cbor/v2"

	"github.com/fleet/fleet/shared/jsonstrict"
)

// Channel groups, which are also the config kinds.
const (
	KindRS485 = "rs485"
	KindCANFD = "canfd"
	KindUART  = "uart"
	KindGPIO  = "gpio"
)

// Kinds lists every kind.
var Kinds = []string{KindUART, KindRS485, KindCANFD, KindGPIO}

// ErrKindMismatch is returned by DecodeFor when the body's kind is not the
// channel's group.
var ErrKindMismatch = errors.New("kind does not match the channel's group")

// Telemetry is the last state a channel reported.
type Telemetry struct {
	Live  string `json:"live"`
	TxOn  bool   `json:"txOn"`
	Error string `json:"error"`
}

// Config is a channel configuration: exactly one of the kind-specific
// pointers is set, the one Kind names. It marshals to the flat JSON shape of
// the spec ({"kind":"rs485","baudRate":9600,...}).
type Config struct {
	Kind  string
	RS485 *RS485
	CANFD *CANFD
	UART  *UART
	GPIO  *GPIO
}

// RS485 configures an RS485 channel as a Modbus RTU master.
type RS485 struct {
	Kind     string  `json:"kind"`
	BaudRate int     `json:"baudRate"`
	DataBits int     `json:"dataBits"`
	Parity   string  `json:"parity"`
	StopBits int     `json:"stopBits"`
	Mode     string  `json:"mode"`
	SlaveID  int     `json:"slaveId"`
	Tx       RS485Tx `json:"tx"`
	// Poll optionally reads registers of SlaveID periodically into live.
	Poll *ModbusPoll `json:"poll,omitempty"`
	// Polls optionally reads several slaves on the same bus (an extension of
	// the spec's single slaveId); each entry names its own slaveId.
	Polls []ModbusPoll `json:"polls,omitempty"`
	// Points optionally name typed values the master reads (points.go).
	Points []RS485Point `json:"points,omitempty"`
}

// RS485Tx writes Value to Register of the slave (function 6).
type RS485Tx struct {
	Enabled    bool `json:"enabled"`
	IntervalMs int  `json:"intervalMs"`
	Register   int  `json:"register"`
	Value      int  `json:"value"`
}

// ModbusPoll reads Count registers from Register with function 3 (holding)
// or 4 (input) every IntervalMs.
type ModbusPoll struct {
	Enabled    bool   `json:"enabled"`
	IntervalMs int    `json:"intervalMs"`
	Register   int    `json:"register"`
	Count      int    `json:"count"`
	Function   string `json:"function"`
	// SlaveID overrides the channel's slaveId; 0 means the channel's.
	SlaveID int `json:"slaveId,omitempty"`
}

// CANFD configures a CAN-FD channel.
type CANFD struct {
	Kind           string  `json:"kind"`
	NominalBitrate int     `json:"nominalBitrate"`
	DataBitrate    int     `json:"dataBitrate"`
	SamplePoint    float64 `json:"samplePoint"`
	ListenOnly     bool    `json:"listenOnly"`
	Tx             CANFDTx `json:"tx"`
	// Points optionally name signals of received frames (points.go).
	Points []CANPoint `json:"points,omitempty"`
}

// CANFDTx sends one frame.
type CANFDTx struct {
	Enabled    bool   `json:"enabled"`
	IntervalMs int    `json:"intervalMs"`
	CanID      string `json:"canId"`
	DataHex    string `json:"dataHex"`
}

// UART configures a raw serial channel.
type UART struct {
	Kind        string `json:"kind"`
	BaudRate    int    `json:"baudRate"`
	DataBits    int    `json:"dataBits"`
	Parity      string `json:"parity"`
	StopBits    int    `json:"stopBits"`
	FlowControl string `json:"flowControl"`
	Tx          UARTTx `json:"tx"`
}

// UARTTx sends DataHex bytes.
type UARTTx struct {
	Enabled    bool   `json:"enabled"`
	IntervalMs int    `json:"intervalMs"`
	DataHex    string `json:"dataHex"`
}

// GPIO configures one GPIO line.
type GPIO struct {
	Kind       string `json:"kind"`
	Direction  string `json:"direction"`
	Pull       string `json:"pull"`
	DebounceMs int    `json:"debounceMs"`
	Tx         GPIOTx `json:"tx"`
}

// GPIOTx drives an output to Value.
type GPIOTx struct {
	Enabled    bool `json:"enabled"`
	IntervalMs int  `json:"intervalMs"`
	Value      int  `json:"value"`
}

// Allowed values.
var (
	RS485BaudRates   = []int{1200, 2400, 4800, 9600, 19200, 38400, 57600, 115200}
	UARTBaudRates    = []int{1200, 2400, 4800, 9600, 19200, 38400, 57600, 115200, 230400}
	NominalBitrates  = []int{10000, 20000, 50000, 100000, 125000, 250000, 500000, 800000, 1000000}
	DataBitrates     = []int{1000000, 2000000, 4000000, 5000000, 8000000}
	CANFDLengths     = []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24, 32, 48, 64}
	Parities         = []string{"none", "even", "odd"}
	ModbusModes      = []string{"modbus_rtu_master"}
	FlowControls     = []string{"none", "rtscts"}
	Directions       = []string{"in", "out"}
	Pulls            = []string{"none", "up", "down"}
	PollFunctions    = []string{"holding", "input"}
	MaxUARTTxBytes   = 256
	MaxPolls         = 16
	MinTxIntervalMs  = 100
	MaxTxIntervalMs  = 86_400_000
	MaxStandardCANID = uint32(0x7FF)
	MaxExtendedCANID = uint32(0x1FFFFFFF)
)

// MarshalJSON implements json.Marshaler with the flat shape.
func (c Config) MarshalJSON() ([]byte, error) {
	switch {
	case c.RS485 != nil:
		v := *c.RS485
		v.Kind = KindRS485
		return json.Marshal(v)
	case c.CANFD != nil:
		v := *c.CANFD
		v.Kind = KindCANFD
		return json.Marshal(v)
	case c.UART != nil:
		v := *c.UART
		v.Kind = KindUART
		return json.Marshal(v)
	case c.GPIO != nil:
		v := *c.GPIO
		v.Kind = KindGPIO
		return json.Marshal(v)
	}
	return []byte("null"), nil
}

// UnmarshalJSON implements json.Unmarshaler strictly (see Decode).
func (c *Config) UnmarshalJSON(b []byte) error {
	v, err := Decode(b)
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// MarshalCBOR implements cbor.Marshaler: in CBOR (the agent link's binary
// codec) a Config is a byte string holding its JSON object, so that it is
// validated by the same strict decoding (Decode) either way; the zero
// Config is null.
func (c Config) MarshalCBOR() ([]byte, error) {
	if c.IsZero() {
		return cbor.Marshal(nil)
	}
	b, err := c.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return cbor.Marshal(b)
}

// UnmarshalCBOR implements cbor.Unmarshaler (see MarshalCBOR); null leaves
// c as it is, as in JSON.
func (c *Config) UnmarshalCBOR(b []byte) error {
	var js []byte
	if err := cbor.Unmarshal(b, &js); err != nil {
		return err
	}
	if js == nil {
		return nil
	}
	return c.UnmarshalJSON(js)
}

// IsZero reports whether no kind is set.
func (c Config) IsZero() bool {
	return c.RS485 == nil && c.CANFD == nil && c.UART == nil && c.GPIO == nil
}

// PeekKind returns the "kind" member of a JSON object without validating the
// rest. It returns "" when the member is missing or not a string.
func PeekKind(b []byte) (string, error) {
	var obj map[string]json.RawMessage
	if err := jsonstrict.Decode(b, &obj); err != nil {
		return "", err
	}
	raw, ok := obj["kind"]
	if !ok {
		return "", nil
	}
	var kind string
	if err := json.Unmarshal(raw, &kind); err != nil {
		return "", jsonstrict.Fieldf("kind", "must be a string")
	}
	return kind, nil
}

// Decode decodes a channel config strictly, without validating its values.
// Errors are *jsonstrict.SyntaxError or *jsonstrict.FieldError.
func Decode(b []byte) (Config, error) {
	kind, err := PeekKind(b)
	if err != nil {
		return Config{}, err
	}
	var c Config
	c.Kind = kind
	switch kind {
	case KindRS485:
		c.RS485 = new(RS485)
		err = jsonstrict.Decode(b, c.RS485)
	case KindCANFD:
		c.CANFD = new(CANFD)
		err = jsonstrict.Decode(b, c.CANFD)
	case KindUART:
		c.UART = new(UART)
		err = jsonstrict.Decode(b, c.UART)
	case KindGPIO:
		c.GPIO = new(GPIO)
		err = jsonstrict.Decode(b, c.GPIO)
	case "":
		return Config{}, jsonstrict.Fieldf("kind", "is required (one of %s)", strings.Join(Kinds, ", "))
	default:
		return Config{}, jsonstrict.Fieldf("kind", "must be one of %s", strings.Join(Kinds, ", "))
	}
	if err != nil {
		switch kind {
		case KindRS485:
			err = firstErr(pointsErr[RS485Point](b), err)
		case KindCANFD:
			err = firstErr(pointsErr[CANPoint](b), err)
		}
		return Config{}, err
	}
	return c, nil
}

// DecodeFor decodes and validates a config PUT on a channel of group. A body
// whose kind is present but differs from group returns an error wrapping
// ErrKindMismatch; other errors are *jsonstrict.SyntaxError or
// *jsonstrict.FieldError.
func DecodeFor(group string, b []byte) (Config, error) {
	kind, err := PeekKind(b)
	if err != nil {
		return Config{}, err
	}
	if kind == "" {
		return Config{}, jsonstrict.Fieldf("kind", "is required and must be %q", group)
	}
	if kind != group {
		return Config{}, fmt.Errorf("%w: kind %q on a %s channel", ErrKindMismatch, kind, group)
	}
	c, err := Decode(b)
	if err != nil {
		return Config{}, err
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	c.Normalize()
	return c, nil
}

// Normalize rewrites the fields that have more than one spelling into their
// one stored spelling: a CAN id as 0x and uppercase hex digits ("0x1A"),
// hex bytes uppercase and separated by single spaces ("01 A2 FF"). It
// leaves a field it cannot parse (Validate refuses those) as it is. It
// fills the defaults of points (RS485Point.WithDefaults,
// CANPoint.WithDefaults), so the stored config shows what runs.
func (c *Config) Normalize() {
	hex := func(s *string) {
		if b, err := ParseHexBytes(*s); err == nil {
			*s = FormatHexBytes(b)
		}
	}
	switch {
	case c.CANFD != nil:
		if id, _, err := ParseCANID(c.CANFD.Tx.CanID); err == nil {
			c.CANFD.Tx.CanID = fmt.Sprintf("0x%X", id)
		}
		hex(&c.CANFD.Tx.DataHex)
		for i, pt := range c.CANFD.Points {
			c.CANFD.Points[i] = pt.WithDefaults()
		}
	case c.RS485 != nil:
		for i, pt := range c.RS485.Points {
			c.RS485.Points[i] = pt.WithDefaults(c.RS485.SlaveID)
		}
	case c.UART != nil:
		hex(&c.UART.Tx.DataHex)
	}
}

// hexSpelling refuses whitespace in hex bytes other than single spaces
// between them.
func hexSpelling(field, s string) error {
	if s != strings.TrimSpace(s) || strings.ContainsAny(s, "\t\n\r\v\f") || strings.Contains(s, "  ") {
		return jsonstrict.Fieldf(field, "must be hex bytes separated by single spaces, such as \"01 A2 FF\" (got %q)", s)
	}
	return nil
}

// Validate checks every field against its allowed values and returns the
// first violation as a *jsonstrict.FieldError.
func (c Config) Validate() error {
	switch {
	case c.RS485 != nil:
		return c.RS485.Validate()
	case c.CANFD != nil:
		return c.CANFD.Validate()
	case c.UART != nil:
		return c.UART.Validate()
	case c.GPIO != nil:
		return c.GPIO.Validate()
	}
	return jsonstrict.Fieldf("kind", "is required")
}

func oneOfInt(field string, v int, allowed []int) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	s := make([]string, len(allowed))
	for i, a := range allowed {
		s[i] = strconv.Itoa(a)
	}
	return jsonstrict.Fieldf(field, "must be one of %s (got %d)", strings.Join(s, ", "), v)
}

func oneOfString(field, v string, allowed []string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return jsonstrict.Fieldf(field, "must be one of %s (got %q)", strings.Join(allowed, ", "), v)
}

func rangeInt(field string, v, lo, hi int) error {
	if v < lo || v > hi {
		return jsonstrict.Fieldf(field, "must be between %d and %d (got %d)", lo, hi, v)
	}
	return nil
}

func txInterval(field string, v int) error {
	if v == 0 || (v >= MinTxIntervalMs && v <= MaxTxIntervalMs) {
		return nil
	}
	return jsonstrict.Fieldf(field, "must be 0 (single send) or between %d and %d (got %d)", MinTxIntervalMs, MaxTxIntervalMs, v)
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// Validate checks an RS485 config.
func (c *RS485) Validate() error {
	s := schemas[KindRS485]
	if err := firstErr(
		s.Int("", "baudRate", c.BaudRate),
		s.Int("", "dataBits", c.DataBits),
		s.String("", "parity", c.Parity),
		s.Int("", "stopBits", c.StopBits),
		s.String("", "mode", c.Mode),
		s.Int("", "slaveId", c.SlaveID),
		s.Int("", "tx.intervalMs", c.Tx.IntervalMs),
		s.Int("", "tx.register", c.Tx.Register),
		s.Int("", "tx.value", c.Tx.Value),
	); err != nil {
		return err
	}
	if c.Poll != nil {
		if err := c.Poll.validate("poll"); err != nil {
			return err
		}
	}
	if len(c.Polls) > MaxPolls {
		return jsonstrict.Fieldf("polls", "at most %d entries", MaxPolls)
	}
	for i := range c.Polls {
		if err := c.Polls[i].validate(fmt.Sprintf("polls[%d]", i)); err != nil {
			return err
		}
		if c.Polls[i].SlaveID == 0 {
			return jsonstrict.Fieldf(fmt.Sprintf("polls[%d].slaveId", i), "is required")
		}
	}
	return c.validatePoints()
}

func (p *ModbusPoll) validate(prefix string) error {
	if err := firstErr(
		pollFields.Int(prefix, "intervalMs", p.IntervalMs),
		pollFields.Int(prefix, "register", p.Register),
		pollFields.Int(prefix, "count", p.Count),
		pollFields.String(prefix, "function", p.Function),
	); err != nil {
		return err
	}
	if p.Register+p.Count > 65536 {
		return jsonstrict.Fieldf(prefix+".count", "register+count must not pass 65535")
	}
	return pollFields.Int(prefix, "slaveId", p.SlaveID)
}

// ActivePolls returns the enabled polls, each with its slave id resolved.
func (c *RS485) ActivePolls() []ModbusPoll {
	var out []ModbusPoll
	add := func(p ModbusPoll) {
		if !p.Enabled {
			return
		}
		if p.SlaveID == 0 {
			p.SlaveID = c.SlaveID
		}
		out = append(out, p)
	}
	if c.Poll != nil {
		add(*c.Poll)
	}
	for _, p := range c.Polls {
		add(p)
	}
	return out
}

// Validate checks a CAN-FD config.
func (c *CANFD) Validate() error {
	s := schemas[KindCANFD]
	if err := firstErr(
		s.Int("", "nominalBitrate", c.NominalBitrate),
		s.Int("", "dataBitrate", c.DataBitrate),
	); err != nil {
		return err
	}
	if c.DataBitrate < c.NominalBitrate {
		return jsonstrict.Fieldf("dataBitrate", "must not be below nominalBitrate (%d)", c.NominalBitrate)
	}
	if err := s.Float("", "samplePoint", c.SamplePoint); err != nil {
		return err
	}
	if c.Tx.Enabled && c.ListenOnly {
		return jsonstrict.Fieldf("tx.enabled", "cannot be true while listenOnly is true")
	}
	if err := s.Int("", "tx.intervalMs", c.Tx.IntervalMs); err != nil {
		return err
	}
	if c.Tx.Enabled || c.Tx.CanID != "" {
		if _, _, err := ParseCANID(c.Tx.CanID); err != nil {
			return jsonstrict.Fieldf("tx.canId", "%v", err)
		}
	}
	if err := hexSpelling("tx.dataHex", c.Tx.DataHex); err != nil {
		return err
	}
	b, err := ParseHexBytes(c.Tx.DataHex)
	if err != nil {
		return jsonstrict.Fieldf("tx.dataHex", "%v", err)
	}
	if !ValidCANFDLength(len(b)) {
		return jsonstrict.Fieldf("tx.dataHex", "%d bytes is not a CAN-FD length (0-8, 12, 16, 20, 24, 32, 48, 64)", len(b))
	}
	return c.validatePoints()
}

// ValidCANFDLength reports whether n is a valid CAN-FD payload length.
func ValidCANFDLength(n int) bool {
	for _, l := range CANFDLengths {
		if n == l {
			return true
		}
	}
	return false
}

// ParseCANID parses a CAN identifier written in hex, with or without 0x.
// Identifiers above 0x7FF are extended (29-bit).
func ParseCANID(s string) (id uint32, extended bool, err error) {
	if strings.IndexFunc(s, unicode.IsSpace) >= 0 {
		return 0, false, fmt.Errorf("%q must not contain spaces", s)
	}
	h := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	if h == "" {
		return 0, false, errors.New("is required: a hex identifier such as 0x123")
	}
	if len(h) > 8 {
		return 0, false, fmt.Errorf("%q is too long", s)
	}
	v, err := strconv.ParseUint(h, 16, 32)
	if err != nil {
		return 0, false, fmt.Errorf("%q is not hexadecimal", s)
	}
	if uint32(v) > MaxExtendedCANID {
		return 0, false, fmt.Errorf("%q is above 0x1FFFFFFF", s)
	}
	return uint32(v), uint32(v) > MaxStandardCANID, nil
}

// FormatCANID formats an identifier as the live telemetry shows it: three hex
// digits for a standard id, eight for an extended one, uppercase.
func FormatCANID(id uint32, extended bool) string {
	if extended {
		return fmt.Sprintf("%08X", id)
	}
	return fmt.Sprintf("%03X", id)
}

// ParseHexBytes parses hex bytes separated by spaces ("01 A2 ff"); a run of
// hex digits without spaces ("01A2FF") is accepted too.
func ParseHexBytes(s string) ([]byte, error) {
	fields := strings.Fields(s)
	if len(fields) == 1 && len(fields[0]) > 2 {
		f := fields[0]
		if len(f)%2 != 0 {
			return nil, fmt.Errorf("%q has an odd number of hex digits", f)
		}
		fields = fields[:0]
		for i := 0; i < len(f); i += 2 {
			fields = append(fields, f[i:i+2])
		}
	}
	out := make([]byte, 0, len(fields))
	for _, f := range fields {
		if len(f) != 2 {
			return nil, fmt.Errorf("%q is not a two-digit hex byte", f)
		}
		v, err := strconv.ParseUint(f, 16, 8)
		if err != nil {
			return nil, fmt.Errorf("%q is not a hex byte", f)
		}
		out = append(out, byte(v))
	}
	return out, nil
}

// FormatHexBytes formats b as uppercase hex bytes separated by spaces.
func FormatHexBytes(b []byte) string {
	var sb strings.Builder
	for i, c := range b {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%02X", c)
	}
	return sb.String()
}

// Validate checks a UART config.
func (c *UART) Validate() error {
	s := schemas[KindUART]
	if err := firstErr(
		s.Int("", "baudRate", c.BaudRate),
		s.Int("", "dataBits", c.DataBits),
		s.String("", "parity", c.Parity),
		s.Int("", "stopBits", c.StopBits),
		s.String("", "flowControl", c.FlowControl),
		s.Int("", "tx.intervalMs", c.Tx.IntervalMs),
		hexSpelling("tx.dataHex", c.Tx.DataHex),
	); err != nil {
		return err
	}
	b, err := ParseHexBytes(c.Tx.DataHex)
	if err != nil {
		return jsonstrict.Fieldf("tx.dataHex", "%v", err)
	}
	if len(b) > MaxUARTTxBytes {
		return jsonstrict.Fieldf("tx.dataHex", "at most %d bytes (got %d)", MaxUARTTxBytes, len(b))
	}
	if c.Tx.Enabled && len(b) == 0 {
		return jsonstrict.Fieldf("tx.dataHex", "is required when tx.enabled is true")
	}
	return nil
}

// Validate checks a GPIO config.
func (c *GPIO) Validate() error {
	s := schemas[KindGPIO]
	if err := firstErr(
		s.String("", "direction", c.Direction),
		s.String("", "pull", c.Pull),
		s.Int("", "debounceMs", c.DebounceMs),
		s.Int("", "tx.intervalMs", c.Tx.IntervalMs),
		s.Int("", "tx.value", c.Tx.Value),
	); err != nil {
		return err
	}
	if c.Direction == "out" && c.DebounceMs != 0 {
		return jsonstrict.Fieldf("debounceMs", "applies to inputs only; must be 0 for direction out")
	}
	if c.Direction == "in" && c.Tx.Enabled {
		return jsonstrict.Fieldf("tx.enabled", "an input cannot transmit; set direction out")
	}
	return nil
}
