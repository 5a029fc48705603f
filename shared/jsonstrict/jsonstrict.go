// Package jsonstrict decodes JSON strictly: unknown fields, member names
// that match a field only when case is ignored, a member given twice, wrong
// types, trailing data and invalid syntax are errors that name the
// offending field, so that an API can answer 400 with a message a customer
// can act on. (encoding/json alone matches names case-insensitively and
// keeps the last of repeated members.)
package jsonstrict

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"
)

// SyntaxError reports a body that is not valid JSON.
type SyntaxError struct{ Msg string }

func (e *SyntaxError) Error() string { return e.Msg }

// FieldError reports a well-formed body with a bad field: unknown, of the
// wrong type, or outside its allowed values.
type FieldError struct {
	Field string // JSON path, for example "tx.intervalMs"
	Msg   string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Fieldf returns a *FieldError for field with a formatted message.
func Fieldf(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Decode decodes data into v, refusing unknown fields, type mismatches and
// anything after the first value. It returns *SyntaxError or *FieldError.
func Decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return classify(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &SyntaxError{Msg: "body must hold a single JSON value"}
	}
	return checkMembers(data, reflect.TypeOf(v))
}

// checkMembers walks data (valid JSON) beside the type it was decoded into:
// a member given twice in one object is an error, and so is a member of a
// struct whose name matches a field only when case is ignored.
func checkMembers(data []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return walk(dec, t, "")
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// walk consumes one value from dec. t is the Go type it went into, or nil
// when unknown (or when the type decodes itself: only repeated members are
// checked there).
func walk(dec *json.Decoder, t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && reflect.PointerTo(t).Implements(unmarshalerType) {
		t = nil
	}
	tok, err := dec.Token()
	if err != nil {
		return nil // the decode above reported it
	}
	switch tok {
	case json.Delim('{'):
		var fields map[string]reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			fields = map[string]reflect.Type{}
			structFields(t, fields)
		}
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil
			}
			key, _ := kt.(string)
			field := join(path, key)
			if seen[key] {
				return Fieldf(echo(field), "is given twice")
			}
			seen[key] = true
			var ft reflect.Type
			switch {
			case fields != nil:
				var ok bool
				if ft, ok = fields[key]; !ok {
					for name := range fields {
						if strings.EqualFold(name, key) {
							return Fieldf(echo(field), "unknown field (names are case-sensitive: %s)", echo(join(path, name)))
						}
					}
				}
			case t != nil && t.Kind() == reflect.Map:
				ft = t.Elem()
			}
			if err := walk(dec, ft, field); err != nil {
				return err
			}
		}
		_, _ = dec.Token() // '}'
	case json.Delim('['):
		var et reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			et = t.Elem()
		}
		for dec.More() {
			if err := walk(dec, et, path); err != nil {
				return err
			}
		}
		_, _ = dec.Token() // ']'
	}
	return nil
}

// structFields adds the JSON member names of struct t (embedded structs'
// fields promoted, as encoding/json does) with their types.
func structFields(t reflect.Type, out map[string]reflect.Type) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				structFields(ft, out)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
}

// maxEcho bounds how much of the body's own text (a member name, a path
// of them, a literal) an error repeats, so that a message stays short
// whatever the body held.
const maxEcho = 64

// echo returns s cut to at most maxEcho bytes at a character boundary,
// with "..." where it was cut.
func echo(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	i := maxEcho
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func classify(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &SyntaxError{Msg: "body is empty or truncated JSON"}
	case errors.As(err, &se):
		return &SyntaxError{Msg: fmt.Sprintf("invalid JSON at offset %d: %s", se.Offset, se.Error())}
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return &FieldError{Msg: fmt.Sprintf("body must be a JSON %s", goTypeToJSON(te.Type.String()))}
		}
		return &FieldError{Field: echo(field), Msg: fmt.Sprintf("must be %s, not %s", goTypeToJSON(te.Type.String()), echo(te.Value))}
	}
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return &FieldError{Field: echo(strings.Trim(rest, `"`)), Msg: "unknown field"}
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe
	}
	return &FieldError{Msg: msg}
}

func goTypeToJSON(t string) string {
	switch {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "string", strings.HasSuffix(t, "string"):
		return "a string"
	case t == "bool", t == "*bool":
		return "a boolean"
	case strings.HasPrefix(t, "[]"):
		return "an array"
	default:
		return "an object"
	}
}
