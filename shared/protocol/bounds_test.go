package protocol

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/resource"
)

func TestValidEventType(t *testing.T) {
	for typ, want := range map[string]bool{
		"usb.attached": true, "serial.config_applied": true, "a": true, "a1.b_2": true, strings.Repeat("a", MaxEventType): true,
		"": false, "Serial.error": false, "serial error": false, "1usb": false, ".usb": false, "usb.": false, "usb..x": false,
		"usb._x": false, "usb-attached": false, strings.Repeat("a", MaxEventType+1): false, "é": false,
	} {
		if got := ValidEventType(typ); got != want {
			t.Errorf("ValidEventType(%q) = %v, want %v", typ, got, want)
		}
	}
}

func TestIsJSONObject(t *testing.T) {
	for d, want := range map[string]bool{
		`{}`: true, ` {"a":1} `: true, "\n{\"a\":[1,2]}\t": true,
		``: false, ` `: false, `[1]`: false, `null`: false, `"x"`: false, `{"a":`: false, `{} {}`: false,
	} {
		if got := IsJSONObject([]byte(d)); got != want {
			t.Errorf("IsJSONObject(%q) = %v, want %v", d, got, want)
		}
	}
}

func TestClockNotSet(t *testing.T) {
	if !ClockNotSet(time.Date(2019, 12, 31, 23, 59, 59, 0, time.UTC)) || !ClockNotSet(time.Unix(0, 0)) {
		t.Fatal("a time before 2020 passes as set")
	}
	if ClockNotSet(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)) || ClockNotSet(time.Now()) {
		t.Fatal("a time from 2020 on counts as not set")
	}
}

// TestMetricRangesCoverEverySampleField: every number of a metric sample has
// one range, named by its JSON name, pointing at that very field.
func TestMetricRangesCoverEverySampleField(t *testing.T) {
	ranges := MetricRanges()
	byName := map[string]MetricRange{}
	for _, r := range ranges {
		if r.Lo >= r.Hi {
			t.Errorf("%s: empty range %g..%g", r.Name, r.Lo, r.Hi)
		}
		byName[r.Name] = r
	}
	st := reflect.TypeOf(resource.MetricSample{})
	numbers := 0
	for i := 0; i < st.NumField(); i++ {
		f := st.Field(i)
		if f.Type.Kind() != reflect.Float64 {
			continue
		}
		numbers++
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		r, ok := byName[name]
		if !ok {
			t.Errorf("metric field %s (%s) has no range", f.Name, name)
			continue
		}
		var m resource.MetricSample
		*r.Value(&m) = 42
		if got := reflect.ValueOf(m).Field(i).Float(); got != 42 {
			t.Errorf("range %s does not point at field %s", name, f.Name)
		}
	}
	if numbers != len(ranges) {
		t.Errorf("%d number fields, %d ranges", numbers, len(ranges))
	}
}
