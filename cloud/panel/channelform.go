package panel

import (
	"encoding/json"
	"errors"
	"math"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// A channel's configuration form follows shared/serialcfg's schema for
// the channel's kind, not the stored JSON: every member and section of the
// kind is in the form, a member the stored config lacks shows its default
// (an absent optional section, such as rs485's poll, shows switched off),
// allowed values are selects, numbers carry the schema's bounds, and
// lists (extra polls, points) have "Add" and "Remove" buttons that send
// the form back to be shown again with one item more or less, nothing
// saved (so they work without JavaScript). Each field is named by its JSON
// path, as serialcfg names a field in its errors ("tx.intervalMs",
// "points[2].order"), so an error lands beside its field. A submitted form
// becomes the config JSON the API's PUT takes and goes through the same
// serialcfg.DecodeFor.

// errForm marks a form whose own fields did not parse (the errors are on
// the fields).
var errForm = errors.New("form has errors")

// maxListIndex bounds the item indexes read from a submitted form.
const maxListIndex = 1000

// field is one input of a channel form.
type field struct {
	Path    string // the form field's name: the member's JSON path
	ID      string
	Label   string
	Help    string
	Kind    string // "bool", "number", "text", "select"
	Value   string
	Checked bool
	Options []string // a select's values; "" is shown as "—" (left out)
	// Min, Max and Step are a number input's attributes ("" none).
	Min, Max, Step string
	Error          string
	// Autofocus: the first field of an item just added.
	Autofocus bool
	def       *serialcfg.Field
}

// Described is the field's aria-describedby: its help and its error.
func (f field) Described() string {
	var ids []string
	if f.Help != "" {
		ids = append(ids, f.ID+"-hint")
	}
	if f.Error != "" {
		ids = append(ids, f.ID+"-error")
	}
	return strings.Join(ids, " ")
}

// block is a fieldset of a channel form: the top level (no legend), an
// object (tx, poll), a list or one of its items.
type block struct {
	ID     string
	Path   string
	Legend string
	Help   string
	Fields []field
	Blocks []*block
	// List: Blocks are its items; Add is the action value adding one ("",
	// the list is full), Empty says there are none.
	List     bool
	Add      string
	AddLabel string
	Empty    string
	// Remove is a list item's action value removing it.
	Remove      string
	RemoveLabel string
	Error       string
	def         *serialcfg.Field
	stored      bool // an optional section the stored config has
}

type channelForm struct {
	Channel resource.Channel
	// Action is the form's URL; Editable: the user may change it.
	Action   string
	Editable bool
	Top      *block
	Error    string // an error that names no field of the form
	Open     bool   // shown unfolded (after an error or Add/Remove)
	// DBC is the DBC import form of a canfd channel, nil for others.
	DBC *dbcForm
	doc map[string]any // the stored config as JSON
}

func newChannelForm(ch resource.Channel) channelForm {
	f := channelForm{Channel: ch}
	if ch.Config.CANFD != nil {
		f.DBC = &dbcForm{Channel: ch.ID}
	}
	fs := serialcfg.Schema(ch.Group)
	raw, err := json.Marshal(ch.Config)
	if fs == nil || err != nil {
		f.Error = "This channel has no configuration to edit."
		return f
	}
	d := json.NewDecoder(strings.NewReader(string(raw)))
	d.UseNumber()
	if err := d.Decode(&f.doc); err != nil || f.doc == nil {
		f.Error = "This channel has no configuration to edit."
		return f
	}
	f.Top = f.buildAt(fs, storedSource{f.doc}, "", "", nil, false)
	return f
}

// source gives the values a form is built from: the stored config or a
// submitted form.
type source interface {
	// value returns the member at path; ok is false when it is absent.
	value(path string, def *serialcfg.Field) (v string, checked, ok bool)
	// items returns the indexes of the list at path.
	items(path string) []int
}

// storedSource reads the stored config's JSON.
type storedSource struct{ doc map[string]any }

func (s storedSource) get(path string) (any, bool) {
	var cur any = s.doc
	for _, seg := range strings.Split(path, ".") {
		name, idx, isItem := strings.Cut(strings.TrimSuffix(seg, "]"), "[")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[name]; !ok {
			return nil, false
		}
		if isItem {
			a, _ := cur.([]any)
			i, err := strconv.Atoi(idx)
			if err != nil || i < 0 || i >= len(a) {
				return nil, false
			}
			cur = a[i]
		}
	}
	return cur, true
}

func (s storedSource) value(path string, _ *serialcfg.Field) (string, bool, bool) {
	v, ok := s.get(path)
	switch v := v.(type) {
	case bool:
		return "", v, ok
	case json.Number:
		return v.String(), false, ok
	case string:
		return v, false, ok
	}
	return "", false, false
}

func (s storedSource) items(path string) []int {
	v, _ := s.get(path)
	a, _ := v.([]any)
	out := make([]int, len(a))
	for i := range out {
		out[i] = i
	}
	return out
}

// formSource reads a submitted form; every member of a section shown is
// in it (an unchecked box is false).
type formSource struct{ form url.Values }

func (s formSource) value(path string, def *serialcfg.Field) (string, bool, bool) {
	v := strings.TrimSpace(s.form.Get(path))
	if def.Type == serialcfg.TypeBool {
		return "", v != "", true
	}
	return v, false, true
}

func (s formSource) items(path string) []int {
	seen := map[int]bool{}
	for k := range s.form {
		rest, ok := strings.CutPrefix(k, path+"[")
		if !ok {
			continue
		}
		idx, _, ok := strings.Cut(rest, "]")
		if i, err := strconv.Atoi(idx); ok && err == nil && i >= 0 && i <= maxListIndex {
			seen[i] = true
		}
	}
	out := make([]int, 0, len(seen))
	for i := range seen {
		out = append(out, i)
	}
	sort.Ints(out)
	return out
}

// defaultSource gives every member its default: a new list item.
type defaultSource struct{}

func (defaultSource) value(string, *serialcfg.Field) (string, bool, bool) { return "", false, false }
func (defaultSource) items(string) []int                                  { return nil }

// change is an Add or Remove of a submitted form: the list's path and, for
// a Remove, the index of the item in the form.
type change struct {
	add, remove string
	index       int
}

func parseChange(action string) (change, bool) {
	switch verb, arg, _ := strings.Cut(action, " "); verb {
	case "add":
		return change{add: arg}, true
	case "remove":
		list, idx, ok := strings.Cut(strings.TrimSuffix(arg, "]"), "[")
		i, err := strconv.Atoi(idx)
		return change{remove: list, index: i}, ok && err == nil
	}
	return change{}, false
}

// buildAt makes the block of the fields fs at path in the form, valued
// from src's members at srcPath, with its sections and lists (applying ch,
// an Add or Remove, to them); item: the block is a list item.
func (f *channelForm) buildAt(fs serialcfg.Fields, src source, path, srcPath string, ch *change, item bool) *block {
	b := &block{Path: path, ID: f.id("s", path)}
	for i := range fs {
		def := &fs[i]
		p, sp := join(path, def.Name), join(srcPath, def.Name)
		switch def.Type {
		case serialcfg.TypeObject:
			sub := f.buildAt(def.Fields, src, p, sp, ch, item)
			sub.Legend, sub.Help, sub.def = def.Label, def.Help, def
			if def.Optional {
				_, present := storedSource{f.doc}.get(p)
				sub.stored = present
				if _, isStored := src.(storedSource); isStored && !present {
					// An absent section is off; its other members show
					// their defaults.
					for j := range sub.Fields {
						if sub.Fields[j].def.Name == def.Toggle {
							sub.Fields[j].Checked = false
						}
					}
				}
			}
			b.Blocks = append(b.Blocks, sub)
		case serialcfg.TypeList:
			b.Blocks = append(b.Blocks, f.buildList(def, src, p, sp, ch))
		default:
			b.Fields = append(b.Fields, f.newField(def, p, sp, src, item))
		}
	}
	return b
}

func (f *channelForm) buildList(def *serialcfg.Field, src source, path, srcPath string, ch *change) *block {
	l := &block{Path: path, ID: f.id("s", path), Legend: def.Label, Help: def.Help, List: true, def: def}
	idx := src.items(srcPath)
	if ch != nil && ch.remove == path {
		idx = slices.DeleteFunc(idx, func(i int) bool { return i == ch.index })
	}
	add := ch != nil && ch.add == path
	for k, i := range idx {
		l.Blocks = append(l.Blocks, f.listItem(def, l, src, k, srcPath+"["+strconv.Itoa(i)+"]"))
	}
	if add && len(l.Blocks) < def.MaxItems {
		it := f.listItem(def, l, defaultSource{}, len(l.Blocks), "")
		if len(it.Fields) > 0 {
			it.Fields[0].Autofocus = true
		}
		l.Blocks = append(l.Blocks, it)
	}
	if len(l.Blocks) < def.MaxItems {
		l.Add, l.AddLabel = "add "+path, "Add "+strings.ToLower(def.ItemLabel[:1])+def.ItemLabel[1:]
	}
	if len(l.Blocks) == 0 {
		l.Empty = "None."
	}
	return l
}

// listItem makes item k of list l, valued from src at srcPath.
func (f *channelForm) listItem(def *serialcfg.Field, l *block, src source, k int, srcPath string) *block {
	path := l.Path + "[" + strconv.Itoa(k) + "]"
	it := f.buildAt(def.Fields, src, path, srcPath, nil, true)
	n := strconv.Itoa(k + 1)
	it.Legend, it.def = def.ItemLabel+" "+n, def
	it.Remove, it.RemoveLabel = "remove "+path, "Remove "+strings.ToLower(def.ItemLabel[:1])+def.ItemLabel[1:]+" "+n
	for j := range it.Fields {
		it.Fields[j].Label = def.ItemLabel + " " + n + ": " + lowerFirst(it.Fields[j].def.Label)
	}
	return it
}

// newField makes the input of member def at path, valued from src at
// srcPath or, when absent there, from the schema's default.
func (f *channelForm) newField(def *serialcfg.Field, path, srcPath string, src source, item bool) field {
	fd := field{Path: path, ID: f.id("f", path), Label: fieldLabel(path, def), Help: def.Help, def: def}
	v, checked, ok := src.value(srcPath, def)
	if !ok {
		v, checked = defaultValue(def, item)
	}
	fd.Value, fd.Checked = v, checked
	switch {
	case def.Type == serialcfg.TypeBool:
		fd.Kind = "bool"
	case def.Ints != nil || def.Strings != nil:
		fd.Kind = "select"
		fd.Options = def.Strings
		if def.Ints != nil {
			for _, n := range def.Ints {
				fd.Options = append(fd.Options, strconv.Itoa(n))
			}
		}
		if def.Optional {
			fd.Options = append([]string{""}, fd.Options...)
		}
		fd.Options = withValue(fd.Options, fd.Value)
	case def.Type == serialcfg.TypeInt || def.Type == serialcfg.TypeFloat:
		fd.Kind, fd.Step = "number", "1"
		if def.Type == serialcfg.TypeFloat {
			fd.Step = "any"
		}
		if def.Min != nil {
			fd.Min = strconv.FormatFloat(*def.Min, 'f', -1, 64)
			if def.ZeroOK && *def.Min > 0 {
				fd.Min = "0"
			}
		}
		if def.Max != nil {
			fd.Max = strconv.FormatFloat(*def.Max, 'f', -1, 64)
		}
	default:
		fd.Kind = "text"
	}
	return fd
}

// defaultValue is what a member the source lacks shows: the schema's
// default, else (outside a list item, for a member that must be there) the
// zero value the kind's default configuration has.
func defaultValue(def *serialcfg.Field, item bool) (string, bool) {
	if def.Type == serialcfg.TypeBool {
		return "", def.Default == "true"
	}
	if def.Default != "" || item || def.Optional || def.Type == serialcfg.TypeString {
		return def.Default, false
	}
	return "0", false
}

// id is the element id of the form field or section at path: f-rs485-1-
// points-0-name.
func (f *channelForm) id(kind, path string) string {
	r := strings.NewReplacer(".", "-", "[", "-", "]", "")
	if path == "" {
		return kind + "-" + f.Channel.ID
	}
	return kind + "-" + f.Channel.ID + "-" + r.Replace(path)
}

func withValue(opts []string, v string) []string {
	if slices.Contains(opts, v) {
		return opts
	}
	return append([]string{v}, opts...)
}

// fieldLabel is a field's visible label: "Send: interval (ms)" for
// tx.intervalMs ("Point 1: name" in lists, see listItem).
func fieldLabel(path string, def *serialcfg.Field) string {
	switch section, _, nested := strings.Cut(path, "."); {
	case !nested:
		return def.Label
	case section == "tx":
		return "Send: " + lowerFirst(def.Label)
	case section == "poll":
		return "Poll: " + lowerFirst(def.Label)
	}
	return def.Label
}

// lowerFirst lowercases a label's first letter unless it starts an
// abbreviation ("CAN id").
func lowerFirst(s string) string {
	if len(s) > 1 && s[1] >= 'A' && s[1] <= 'Z' {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// submit rebuilds the form from a submitted one. It reports whether the
// submission asked to add or remove a list item (then nothing is to be
// saved: the form is shown again).
func (f *channelForm) submit(form url.Values) (changed bool) {
	fs := serialcfg.Schema(f.Channel.Group)
	if fs == nil {
		return false
	}
	ch, changed := parseChange(form.Get("action"))
	var chp *change
	if changed {
		chp = &ch
	}
	f.Top = f.buildAt(fs, formSource{form}, "", "", chp, false)
	return changed
}

// config turns the form's values into the config JSON the API's PUT takes
// and decodes and validates it with serialcfg.DecodeFor. Fields that do
// not parse get their error and errForm is returned.
func (f *channelForm) config() (serialcfg.Config, error) {
	if f.Top == nil {
		return serialcfg.Config{}, errors.New(f.Error)
	}
	doc, ok := f.Top.json()
	if !ok {
		return serialcfg.Config{}, errForm
	}
	doc["kind"] = f.Channel.Group
	b, err := json.Marshal(doc)
	if err != nil {
		return serialcfg.Config{}, err
	}
	return serialcfg.DecodeFor(f.Channel.Group, b)
}

// json returns the block's members as JSON values; ok is false when a
// field did not parse (its Error says why).
func (b *block) json() (map[string]any, bool) {
	doc := map[string]any{}
	ok := true
	for i := range b.Fields {
		fd := &b.Fields[i]
		v, present, good := fd.json()
		ok = ok && good
		if present {
			doc[fd.def.Name] = v
		}
	}
	for _, sub := range b.Blocks {
		if sub.List {
			var items []any
			for _, it := range sub.Blocks {
				m, good := it.json()
				ok = ok && good
				items = append(items, m)
			}
			if len(items) > 0 {
				doc[sub.def.Name] = items
			}
			continue
		}
		m, good := sub.json()
		ok = ok && good
		if sub.def.Optional && !sub.stored && sub.off() {
			continue // left out, as the stored config had it
		}
		doc[sub.def.Name] = m
	}
	return doc, ok
}

// off reports whether an optional section is switched off and its other
// members are at their defaults: the same as the section left out.
func (b *block) off() bool {
	for _, fd := range b.Fields {
		if fd.def.Name == b.def.Toggle {
			if fd.Checked {
				return false
			}
			continue
		}
		v, _ := defaultValue(fd.def, false)
		if fd.Value != v {
			return false
		}
	}
	return true
}

// json returns the field's JSON value; present is false for an optional
// member left empty.
func (fd *field) json() (v any, present, ok bool) {
	def := fd.def
	fd.Value = strings.TrimSpace(fd.Value)
	switch {
	case def.Type == serialcfg.TypeBool:
		return fd.Checked, true, true
	case fd.Value == "" && def.Optional:
		return nil, false, true
	case def.Type == serialcfg.TypeString:
		return fd.Value, true, true
	case fd.Value == "":
		fd.Error = "Enter a number."
	case def.Type == serialcfg.TypeInt:
		n, err := strconv.ParseInt(fd.Value, 10, 64)
		if err == nil {
			return n, true, true
		}
		fd.Error = "Enter a whole number."
	default:
		x, err := strconv.ParseFloat(fd.Value, 64)
		if err == nil && !math.IsInf(x, 0) && !math.IsNaN(x) {
			return x, true, true
		}
		fd.Error = "Enter a number."
	}
	return nil, false, false
}

// setError puts msg beside the field or list at path; false when the form
// has none.
func (f *channelForm) setError(path, msg string) bool {
	if f.Top == nil {
		return false
	}
	return f.Top.setError(path, msg)
}

func (b *block) setError(path, msg string) bool {
	for i := range b.Fields {
		if b.Fields[i].Path == path {
			b.Fields[i].Error = msg
			return true
		}
	}
	if b.Path == path && b.Path != "" {
		b.Error = msg
		return true
	}
	for _, sub := range b.Blocks {
		if sub.setError(path, msg) {
			return true
		}
	}
	return false
}
