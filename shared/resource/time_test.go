package resource_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/resource"
)

func TestTimeHasThreeFractionalDigits(t *testing.T) {
	for _, in := range []time.Time{
		time.Date(2026, 11, 22, 1, 2, 3, 0, time.UTC),
		time.Date(2026, 11, 22, 1, 2, 3, 120_000_000, time.FixedZone("X", 3600)),
		time.Date(2026, 11, 22, 1, 2, 3, 999_999_999, time.UTC),
	} {
		b, err := json.Marshal(resource.T(in))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		if len(s) != len(`"2026-11-22T01:02:03.000Z"`) || s[len(s)-2] != 'Z' || s[20] != '.' {
			t.Errorf("%v marshals as %s", in, s)
		}
		var back resource.Time
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !back.Equal(in.Truncate(time.Millisecond)) {
			t.Errorf("round trip %v -> %v", in, back.Time)
		}
	}
	b, _ := json.Marshal(resource.T(time.Date(2026, 1, 2, 3, 4, 5, 120_000_000, time.FixedZone("X", 3600))))
	if string(b) != `"2026-01-02T02:04:05.120Z"` {
		t.Errorf("got %s", b)
	}
	if resource.TP(time.Time{}) != nil {
		t.Error("TP(zero) must be nil")
	}
}

func TestParseTimeRejectsGarbage(t *testing.T) {
	for _, s := range []string{"", "yesterday", "2026-13-01T00:00:00Z", "2026-11-22 01:02:03"} {
		if _, err := resource.ParseTime(s); err == nil {
			t.Errorf("ParseTime(%q) accepted", s)
		}
	}
	got, err := resource.ParseTime("2026-11-22T02:00:00+01:00")
	if err != nil || !got.Equal(time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)) || got.Location() != time.UTC {
		t.Errorf("ParseTime offset = %v %v", got, err)
	}
}
