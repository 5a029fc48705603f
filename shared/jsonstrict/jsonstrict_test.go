package jsonstrict_test

import (
	"errors"
	"testing"

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
