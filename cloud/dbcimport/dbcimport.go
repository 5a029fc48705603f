// Package dbcimport turns the signals of a DBC file (Vector's CAN database
// format) into canfd points (serialcfg.CANPoint), parsed with
// go.einride.tech/can/pkg/dbc. The admin command `fleet-relay channel
// import-dbc` and the panel's import form both use it.
//
// Each signal of the chosen messages becomes one point: its name in the
// point-name rule (snake_case, "EngineSpeed" → "engine_speed"), canId from
// the message id ("0x100"; an extended id, which a DBC file writes with bit
// 31 set, as eight hex digits, "0x18FEF100"), startBit, length, byte order
// (@1 Intel "little", @0 Motorola "big"), sign, factor and offset (scale
// and offset), unit, minimum and maximum as the file writes them.
//
// Signals a point cannot read are skipped, each with a note (Result.Skipped),
// never silently: multiplexed signals (m0, m1, ...: their meaning depends on
// the multiplexer's value, and a point decodes every frame of its id; the
// multiplexer switch itself is imported) and IEEE float signals (SIG_VALTYPE_
// 1 or 2). A file that is not UTF-8 is read as Latin-1 (CANdb++ writes
// Windows-1252). The pseudo-message of independent signals (VECTOR__INDEPENDENT_SIG_MSG)
// is not a frame and is skipped too.
package dbcimport

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"text/scanner"
	"unicode"
	"unicode/utf8"

	"go.einride.tech/can/pkg/dbc"

	"github.com/fleet/fleet/shared/serialcfg"
)

// Result is what an import found: the points of the chosen messages, in
// file order, and a note for each signal skipped or range dropped.
type Result struct {
	Points  []serialcfg.CANPoint
	Skipped []string
}

// Points returns the points of the signals of the DBC file src (name is
// its file name, for messages) in the messages named (all when messages is
// empty), in file order. A malformed file returns an error naming the line;
// an unknown message name is an error too.
func Points(name string, src []byte, messages []string) ([]serialcfg.CANPoint, error) {
	r, err := Import(name, src, messages)
	return r.Points, err
}

// maxFrameBytes is the largest CAN-FD payload.
const maxFrameBytes = 64

// independentSignals is the DBC message id of the pseudo-message that holds
// signals of no frame (VECTOR__INDEPENDENT_SIG_MSG).
const independentSignals = dbc.MessageID(0xC0000000)

// Import is Points with the notes of the signals it skipped. An error
// starts with name and, for a fault in the file, the line
// ("demo.dbc:12: ...").
func Import(name string, src []byte, messages []string) (Result, error) {
	defs, err := parse(name, src)
	if err != nil {
		return Result{}, err
	}
	at := func(pos scanner.Position) string { return fmt.Sprintf("%s:%d", name, pos.Line) }

	floats := map[string]bool{} // "<message id>/<signal>" of float signals
	var msgs []*dbc.MessageDef
	byName := map[string]*dbc.MessageDef{}
	for _, d := range defs {
		switch d := d.(type) {
		case *dbc.MessageDef:
			if prev, ok := byName[string(d.Name)]; ok {
				return Result{}, fmt.Errorf("%s: message %s is defined twice (first on line %d)", at(d.Pos), d.Name, prev.Pos.Line)
			}
			byName[string(d.Name)] = d
			msgs = append(msgs, d)
		case *dbc.SignalValueTypeDef:
			if d.SignalValueType != dbc.SignalValueTypeInt {
				floats[fmt.Sprintf("%d/%s", d.MessageID, d.SignalName)] = true
			}
		}
	}

	chosen := msgs
	if len(messages) > 0 {
		chosen = nil
		seen := map[string]bool{}
		var unknown []string
		for _, m := range messages {
			m = strings.TrimSpace(m)
			if m == "" || seen[m] {
				continue
			}
			seen[m] = true
			if d, ok := byName[m]; ok {
				chosen = append(chosen, d)
			} else {
				unknown = append(unknown, m)
			}
		}
		if len(unknown) > 0 {
			return Result{}, fmt.Errorf("%s: no message named %s (the file has %s)", name, strings.Join(unknown, ", "), messageNames(msgs))
		}
		// Keep file order whatever the order of the names.
		chosen = fileOrder(msgs, chosen)
	}

	var res Result
	from := map[string]string{} // point name -> "Signal (Message)"
	for _, m := range chosen {
		if m.MessageID == independentSignals {
			res.Skipped = append(res.Skipped, fmt.Sprintf("%s: %s holds signals of no frame: skipped", at(m.Pos), m.Name))
			continue
		}
		if err := m.MessageID.Validate(); err != nil {
			return Result{}, fmt.Errorf("%s: message %s: %v", at(m.Pos), m.Name, err)
		}
		if m.Size > maxFrameBytes {
			return Result{}, fmt.Errorf("%s: message %s: %d bytes is more than a CAN-FD frame carries (64)", at(m.Pos), m.Name, m.Size)
		}
		canID := "0x" + serialcfg.FormatCANID(m.MessageID.ToCAN(), m.MessageID.IsExtended())
		for _, s := range m.Signals {
			where := fmt.Sprintf("%s: signal %s of %s", at(s.Pos), s.Name, m.Name)
			switch {
			case s.IsMultiplexed:
				res.Skipped = append(res.Skipped, fmt.Sprintf("%s is multiplexed (m%d): skipped", where, s.MultiplexerSwitch))
				continue
			case floats[fmt.Sprintf("%d/%s", m.MessageID, s.Name)]:
				res.Skipped = append(res.Skipped, where+" is an IEEE float (SIG_VALTYPE_): skipped")
				continue
			}
			p, err := point(canID, m, s)
			if err != nil {
				return Result{}, fmt.Errorf("%s: %v", where, err)
			}
			if p.Min == nil && (s.Minimum != 0 || s.Maximum != 0) {
				res.Skipped = append(res.Skipped, fmt.Sprintf("%s: range [%g|%g] is not a range (minimum above maximum, or not finite): imported without min and max", where, s.Minimum, s.Maximum))
			}
			who := fmt.Sprintf("%s (%s, line %d)", s.Name, m.Name, s.Pos.Line)
			if prev, ok := from[p.Name]; ok {
				return Result{}, fmt.Errorf("%s: signals %s and %s both become point %q (choose messages with --messages, or rename one)", name, prev, who, p.Name)
			}
			from[p.Name] = who
			res.Points = append(res.Points, p)
		}
	}
	if len(res.Points) == 0 {
		return res, fmt.Errorf("%s: no signal to import in %s", name, messageNames(chosen))
	}
	return res, nil
}

// parse parses src with einride's parser; its errors become "name:line:
// reason".
func parse(name string, src []byte) (defs []dbc.Def, err error) {
	p := dbc.NewParser(name, utf8Text(src))
	defer func() {
		// The parser recovers its own parse errors; anything else it
		// panics with is still a malformed file, not a crash of the caller.
		if r := recover(); r != nil {
			defs, err = nil, fmt.Errorf("%s: cannot parse: %v", name, r)
		}
	}()
	if perr := p.Parse(); perr != nil {
		return nil, fmt.Errorf("%s:%d: %s", name, perr.Position().Line, perr.Reason())
	}
	return p.Defs(), nil
}

// utf8Text returns src as UTF-8: unchanged when it is valid UTF-8, else
// read as Windows-1252's Latin-1 subset, the encoding CANdb++ writes (its
// "°C" is the single byte 0xB0, which einride's scanner would refuse).
func utf8Text(src []byte) []byte {
	if utf8.Valid(src) {
		return src
	}
	out := make([]byte, 0, len(src)+len(src)/8)
	for _, b := range src {
		out = utf8.AppendRune(out, rune(b))
	}
	return out
}

// point turns one signal into a point, checking that it fits its message.
func point(canID string, m *dbc.MessageDef, s dbc.SignalDef) (serialcfg.CANPoint, error) {
	p := serialcfg.CANPoint{CanID: canID, StartBit: int(s.StartBit), Length: int(s.Size), ByteOrder: "little",
		Signed: s.IsSigned, Scale: s.Factor, Offset: s.Offset, Unit: s.Unit}
	if s.IsBigEndian {
		p.ByteOrder = "big"
	}
	var err error
	if p.Name, err = PointName(string(s.Name)); err != nil {
		return p, err
	}
	last, err := p.LastByte()
	if err != nil {
		return p, fmt.Errorf("bits %d|%d@%d: %w", s.StartBit, s.Size, endian(s.IsBigEndian), err)
	}
	if uint64(last) >= m.Size {
		return p, fmt.Errorf("bits %d|%d@%d do not fit the message's %d bytes", s.StartBit, s.Size, endian(s.IsBigEndian), m.Size)
	}
	if len([]rune(p.Unit)) > serialcfg.MaxPointUnit {
		return p, fmt.Errorf("unit %q is longer than %d characters", p.Unit, serialcfg.MaxPointUnit)
	}
	if !serialcfg.UnitPrintable(p.Unit) {
		return p, fmt.Errorf("unit %q has a character that is not printable", p.Unit)
	}
	// [0|0] is a DBC file's "no range"; an inverted or infinite one is
	// dropped (Import notes it), as min and max are only informative.
	if (s.Minimum != 0 || s.Maximum != 0) && s.Minimum <= s.Maximum && !math.IsInf(s.Minimum, 0) && !math.IsInf(s.Maximum, 0) {
		lo, hi := s.Minimum, s.Maximum
		p.Min, p.Max = &lo, &hi
	}
	return p, nil
}

func endian(big bool) int {
	if big {
		return 0
	}
	return 1
}

var pointNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// PointName converts a DBC signal name to the point-name rule
// [a-z][a-z0-9_]{0,31}: CamelCase words split with underscores and lower
// cased ("EngineSpeed" → "engine_speed", "ABSActive" → "abs_active"),
// other characters as underscores, runs of underscores as one, cut to 32
// characters. A name that starts with a digit is prefixed "s_".
func PointName(signal string) (string, error) {
	rs := []rune(signal)
	var b strings.Builder
	for i, r := range rs {
		if unicode.IsUpper(r) && i > 0 {
			prev := rs[i-1]
			nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
				b.WriteByte('_')
			}
		}
		r = unicode.ToLower(r)
		if r > unicode.MaxASCII || !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			r = '_'
		}
		b.WriteRune(r)
	}
	s := b.String()
	for strings.Contains(s, "__") {
		s = strings.ReplaceAll(s, "__", "_")
	}
	s = strings.Trim(s, "_")
	if s != "" && s[0] >= '0' && s[0] <= '9' {
		s = "s_" + s
	}
	if len(s) > serialcfg.MaxPointName {
		s = strings.TrimRight(s[:serialcfg.MaxPointName], "_")
	}
	if !pointNameRE.MatchString(s) {
		return "", fmt.Errorf("name %q gives no point name ([a-z][a-z0-9_]{0,31})", signal)
	}
	return s, nil
}

func messageNames(ms []*dbc.MessageDef) string {
	if len(ms) == 0 {
		return "no messages"
	}
	const most = 20
	var names []string
	for i, m := range ms {
		if i == most {
			names = append(names, fmt.Sprintf("and %d more", len(ms)-most))
			break
		}
		names = append(names, string(m.Name))
	}
	return "messages " + strings.Join(names, ", ")
}

func fileOrder(all, chosen []*dbc.MessageDef) []*dbc.MessageDef {
	want := map[*dbc.MessageDef]bool{}
	for _, m := range chosen {
		want[m] = true
	}
	var out []*dbc.MessageDef
	for _, m := range all {
		if want[m] {
			out = append(out, m)
		}
	}
	return out
}

// ErrTooManyPoints is returned (wrapped) by Merge when the channel would
// have more than serialcfg.MaxPoints points.
var ErrTooManyPoints = errors.New("too many points")

// Merge returns cfg with pts added to its points: a point of the same name
// is replaced, the others keep their order, new ones are appended. The
// result is validated (at most serialcfg.MaxPoints).
func Merge(cfg serialcfg.CANFD, pts []serialcfg.CANPoint) (serialcfg.CANFD, error) {
	out := cfg
	out.Points = append([]serialcfg.CANPoint(nil), cfg.Points...)
	index := map[string]int{}
	for i, p := range out.Points {
		index[p.Name] = i
	}
	for _, p := range pts {
		if i, ok := index[p.Name]; ok {
			out.Points[i] = p
			continue
		}
		index[p.Name] = len(out.Points)
		out.Points = append(out.Points, p)
	}
	if len(out.Points) > serialcfg.MaxPoints {
		return cfg, fmt.Errorf("%w: the channel would have %d points, at most %d (import fewer messages with --messages)", ErrTooManyPoints, len(out.Points), serialcfg.MaxPoints)
	}
	if err := out.Validate(); err != nil {
		return cfg, err
	}
	return out, nil
}
