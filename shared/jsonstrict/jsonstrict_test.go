package jsonstrict_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fleet/fleet/shared/jsonstrict"
)

type body struct {
	Mode    *string `json:"mode"`
	Enabled *bool   `json:"webhookEnabled"`
	Inner   struct {
		N int `json:"n"`
	} `json:"inner"`
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		in      string
		syntax  bool
		field   string
		wantErr bool
	}{
		{in: `{"mode":"managed"}`},
		{in: `{"mode":"managed","extra":1}`, wantErr: true, field: "extra"},
		{in: `{"webhookEnabled":"yes"}`, wantErr: true, field: "webhookEnabled"},
		{in: `{"inner":{"n":"x"}}`, wantErr: true, field: "inner.n"},
		{in: `{"mode":`, wantErr: true, syntax: true},
		{in: `{"mode":"a"}{}`, wantErr: true, syntax: true},
		{in: ``, wantErr: true, syntax: true},
		{in: `[]`, wantErr: true},
		{in: `{"Mode":"managed"}`, wantErr: true, field: "Mode"},
		{in: `{"mode":"a","mode":"b"}`, wantErr: true, field: "mode"},
		{in: `{"inner":{"N":1}}`, wantErr: true, field: "inner.N"},
		{in: `{"inner":{"n":1,"n":2}}`, wantErr: true, field: "inner.n"},
		{in: `{"inner":{"n":1},"inner":{"n":2}}`, wantErr: true, field: "inner"},
	} {
		var b body
		err := jsonstrict.Decode([]byte(tc.in), &b)
		if !tc.wantErr {
			if err != nil {
				t.Errorf("%s: %v", tc.in, err)
			}
			continue
		}
		var se *jsonstrict.SyntaxError
		var fe *jsonstrict.FieldError
		switch {
		case tc.syntax && !errors.As(err, &se):
			t.Errorf("%s: err = %T %v, want SyntaxError", tc.in, err, err)
		case !tc.syntax && !errors.As(err, &fe):
			t.Errorf("%s: err = %T %v, want FieldError", tc.in, err, err)
		case !tc.syntax && fe.Field != tc.field:
			t.Errorf("%s: field = %q, want %q", tc.in, fe.Field, tc.field)
		}
	}
}

// Repeated members are refused in maps and in values that decode
// themselves (json.RawMessage) too.
func TestDecodeRepeatedMembersAnywhere(t *testing.T) {
	var m map[string]json.RawMessage
	err := jsonstrict.Decode([]byte(`{"a":{"x":1,"y":{"z":1,"z":2}}}`), &m)
	var fe *jsonstrict.FieldError
	if !errors.As(err, &fe) || fe.Field != "a.y.z" {
		t.Errorf("err = %v, want a FieldError on a.y.z", err)
	}
	if err := jsonstrict.Decode([]byte(`{"a":[{"x":1},{"x":2}]}`), &m); err != nil {
		t.Errorf("one member per object, in an array: %v", err)
	}
}

// TestErrorsEchoTheBodyBounded: an error names the member or literal at
// fault, cut to 64 bytes at a character boundary, however long the body
// made it (found by cloud/api's FuzzSerialPatchBody: a 2,000-byte unknown
// member name made a 2,052-byte message).
func TestErrorsEchoTheBodyBounded(t *testing.T) {
	long := strings.Repeat("é", 1000)
	for name, data := range map[string]string{
		"unknown member":     `{"` + long + `":1}`,
		"case-folded member": `{"inner":{"` + long + `":{}, "N":1}}`,
		"member twice":       `{"inner":{"` + long + `":1,"` + long + `":2}}`,
		"wrong type":         `{"webhookEnabled":1` + strings.Repeat("0", 2000) + `}`,
		"deep path":          strings.Repeat(`{"inner":`, 200) + "1" + strings.Repeat("}", 200),
	} {
		var b body
		err := jsonstrict.Decode([]byte(data), &b)
		var fe *jsonstrict.FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: %v, want a *FieldError", name, err)
			continue
		}
		if msg := err.Error(); len(msg) > 200 || !utf8.ValidString(msg) {
			t.Errorf("%s: message of %d bytes (UTF-8: %t): %.100q...", name, len(msg), utf8.ValidString(msg), msg)
		}
		if len(fe.Field) > 0 && !strings.HasSuffix(fe.Field, "...") && len(fe.Field) > 64 {
			t.Errorf("%s: field %.80q... not cut", name, fe.Field)
		}
	}
}
