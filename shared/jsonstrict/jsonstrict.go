// Package jsonstrict decodes JSON strictly: unknown fields, wrong types,
// trailing data and invalid syntax are errors that name the offending field,
// so that an API can answer 400 with a message a customer can act on.
package jsonstrict

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
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
	return nil
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
		return &FieldError{Field: field, Msg: fmt.Sprintf("must be %s, not %s", goTypeToJSON(te.Type.String()), te.Value)}
	}
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return &FieldError{Field: strings.Trim(rest, `"`), Msg: "unknown field"}
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
