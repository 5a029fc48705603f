package cloud

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// The stored form of point states reads back as reported: values, qualities,
// causes and times to the millisecond; a point never read keeps a zero
// time, and a value that is not a finite number (JSON has none) reads back
// as NaN, which the API shows as null.
func TestPointStatesRoundTrip(t *testing.T) {
	at := resource.T(time.Date(2026, 11, 26, 20, 0, 0, 123e6, time.UTC))
	in := []protocol.PointState{
		{Name: "temp", Value: 21.5, Quality: "good", At: at},
		{Name: "pressure", Quality: "bad", Error: `modbus exception 2: "illegal data address" (slave 7)`, At: at},
		{Name: "count", Value: 4294967295, Quality: "stale"},
		{Name: "tiny", Value: -2.5e-7, Quality: "good", At: at},
	}
	stored := EncodePointStates(in)
	if want := `[["temp",21.5,1795723200123],["pressure",0,1795723200123,"bad","modbus exception 2: \"illegal data address\" (slave 7)"],` +
		`["count",4294967295,0,"stale"],["tiny",-2.5e-07,1795723200123]]`; stored != want {
		t.Errorf("stored form\n%s\nwant\n%s", stored, want)
	}
	if EncodePointStates(nil) != "" {
		t.Error("no points are not stored as empty")
	}
	got, err := DecodePointStates(EncodePointStates(in))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Errorf("read back\n%+v\nwant\n%+v", got, in)
	}
	odd := []protocol.PointState{{Name: "x", Quality: "bad", Error: "tab\tnewline\nnon-ASCII é, a \\ and \x01", At: at}}
	if got, err := DecodePointStates(EncodePointStates(odd)); err != nil || !reflect.DeepEqual(got, odd) {
		t.Errorf("an error text with characters JSON escapes read back as %+v, %v", got, err)
	}
	nan, err := DecodePointStates(EncodePointStates([]protocol.PointState{{Name: "x", Value: math.Inf(1), Quality: "good", At: at}}))
	if err != nil || len(nan) != 1 || !math.IsNaN(nan[0].Value) {
		t.Errorf("a value that is not finite read back as %+v, %v", nan, err)
	}
	if p := PointOf(serialcfg.PointDef{Type: "f64"}, &nan[0], true); p.Value != nil {
		t.Errorf("a value that is not finite is shown as %v, want null", p.Value)
	}
	if _, err := DecodePointStates("{"); err == nil {
		t.Error("a stored form that does not decode is no error")
	}
}
