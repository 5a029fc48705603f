package panel

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// A channel's configuration form is its config's JSON flattened: one field
// per scalar, named by its JSON path ("tx.intervalMs"), in the order the
// config marshals; lists (Modbus polls) are kept as they are. The submitted
// form is put back into that JSON and decoded and validated by serialcfg,
// the same code that validates the API's PUT.

// errForm marks a form whose own fields did not parse (the errors are on
// the fields).
var errForm = errors.New("form has errors")

type field struct {
	Path    string
	ID      string
	Label   string
	Kind    string // "bool", "number", "text", "select"
	Value   string
	Checked bool
	Options []string
	Error   string
}

type channelForm struct {
	Channel resource.Channel
	Fields  []field
	Error   string // an error that names no field of the form
	Open    bool   // shown unfolded (after an error)
	// DBC is the DBC import form of a canfd channel, nil for others.
	DBC *dbcForm
	raw []byte
}

func newChannelForm(ch resource.Channel) channelForm {
	f := channelForm{Channel: ch}
	if ch.Config.CANFD != nil {
		f.DBC = &dbcForm{Channel: ch.ID}
	}
	raw, err := json.Marshal(ch.Config)
	if err != nil || bytes.Equal(raw, []byte("null")) {
		f.Error = "This channel has no configuration to edit."
		return f
	}
	f.raw = raw
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // {
		f.Error = err.Error()
		return f
	}
	f.walk(dec, "")
	return f
}

func (f *channelForm) walk(dec *json.Decoder, prefix string) {
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return
		}
		key, _ := tok.(string)
		path := key
		if prefix != "" {
			path = prefix + "." + key
		}
		v, err := dec.Token()
		if err != nil {
			return
		}
		fd := field{Path: path, ID: "f-" + f.Channel.ID + "-" + strings.ReplaceAll(path, ".", "-"), Label: label(path)}
		switch v := v.(type) {
		case json.Delim:
			if v == '{' {
				f.walk(dec, path)
				dec.Token() // }
			} else {
				skipArray(dec)
			}
			continue
		case bool:
			fd.Kind, fd.Checked = "bool", v
		case json.Number:
			fd.Kind, fd.Value = "number", v.String()
		case string:
			if path == "kind" {
				continue
			}
			fd.Kind, fd.Value = "text", v
		default:
			continue
		}
		if opts := fieldOptions(f.Channel.Group, key); opts != nil && fd.Kind != "bool" {
			fd.Kind, fd.Options = "select", withValue(opts, fd.Value)
		}
		f.Fields = append(f.Fields, fd)
	}
}

func skipArray(dec *json.Decoder) {
	for depth := 1; depth > 0; {
		tok, err := dec.Token()
		if err != nil {
			return
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '[', '{':
				depth++
			default:
				depth--
			}
		}
	}
}

func withValue(opts []string, v string) []string {
	for _, o := range opts {
		if o == v {
			return opts
		}
	}
	return append([]string{v}, opts...)
}

var labels = map[string]string{
	"baudRate": "Baud rate", "dataBits": "Data bits", "parity": "Parity", "stopBits": "Stop bits",
	"mode": "Mode", "slaveId": "Slave id", "enabled": "Enabled", "intervalMs": "Interval (ms)",
	"register": "Register", "value": "Value", "count": "Count", "function": "Function",
	"nominalBitrate": "Nominal bitrate", "dataBitrate": "Data bitrate", "samplePoint": "Sample point",
	"listenOnly": "Listen only", "canId": "CAN id", "dataHex": "Data (hex)", "flowControl": "Flow control",
	"direction": "Direction", "pull": "Pull", "debounceMs": "Debounce (ms)",
}

// label is a field's visible label: "Send: interval (ms)" for
// tx.intervalMs.
func label(path string) string {
	parts := strings.Split(path, ".")
	last := parts[len(parts)-1]
	l, ok := labels[last]
	if !ok {
		l = last
	}
	switch {
	case len(parts) == 1:
		return l
	case parts[0] == "tx":
		return "Send: " + strings.ToLower(l[:1]) + l[1:]
	case parts[0] == "poll":
		return "Poll: " + strings.ToLower(l[:1]) + l[1:]
	}
	return path
}

// apply puts the submitted values into the channel's config and decodes
// and validates it with serialcfg. Fields that do not parse get their error
// and errForm is returned.
func (f *channelForm) apply(form map[string][]string) (serialcfg.Config, error) {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(f.raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return serialcfg.Config{}, err
	}
	bad := false
	for i := range f.Fields {
		fd := &f.Fields[i]
		got := ""
		if vs := form[fd.Path]; len(vs) > 0 {
			got = strings.TrimSpace(vs[0])
		}
		var v any
		switch fd.Kind {
		case "bool":
			fd.Checked = got != ""
			v = fd.Checked
		case "text":
			fd.Value, v = got, got
		default: // number, select of numbers or strings
			fd.Value = got
			if _, isNum := lookup(doc, fd.Path).(json.Number); isNum {
				if _, err := strconv.ParseFloat(got, 64); err != nil || got == "" {
					fd.Error, bad = "Enter a number.", true
					continue
				}
				v = json.Number(got)
			} else {
				v = got
			}
		}
		set(doc, fd.Path, v)
	}
	if bad {
		return serialcfg.Config{}, errForm
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return serialcfg.Config{}, err
	}
	return serialcfg.DecodeFor(f.Channel.Group, b)
}

// setError puts msg beside the field at path; false when the form has no
// such field.
func (f *channelForm) setError(path, msg string) bool {
	for i := range f.Fields {
		if f.Fields[i].Path == path {
			f.Fields[i].Error = msg
			return true
		}
	}
	return false
}

func lookup(doc map[string]any, path string) any {
	var cur any = doc
	for _, p := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func set(doc map[string]any, path string, v any) {
	parts := strings.Split(path, ".")
	m := doc
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			return
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
}
