package cloud

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// The stored form of a device's channel reports reads back as written, in
// id order whatever the order given, with any text a channel can carry
// (quotes, backslashes, control characters, non-ASCII) and its points; it
// is valid JSON; and the form migration 0027 wrote (every member present,
// "points":[] for none) reads the same.
func TestChannelReportsRoundTrip(t *testing.T) {
	at := resource.T(time.UnixMilli(1_780_000_000_123))
	chans := []protocol.ChannelState{
		{ID: "uart-1", Available: true, Live: "say \"hi\"\\\n\x01 ünï", TxOn: true, Error: "read: timeout\t", PassthroughAddress: "10.8.0.2:4001"},
		{ID: "rs485-1", Available: true, Live: "120 34", Points: []protocol.PointState{
			{Name: "temp", Value: 21.5, Quality: "good", At: at}, {Name: "flow", Value: math.NaN(), Quality: "bad", Error: "crc"}}},
		{ID: "rs485-2"}, // reported unavailable
	}
	stored := EncodeChannelReports(chans)
	if !json.Valid([]byte(stored)) {
		t.Fatalf("not JSON: %s", stored)
	}
	got, err := DecodeChannelReports(stored)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range got {
		ids = append(ids, r.ID)
	}
	if !reflect.DeepEqual(ids, []string{"rs485-1", "rs485-2", "uart-1"}) {
		t.Fatalf("ids %v, want id order", ids)
	}
	if u := got[2]; u.Live != chans[0].Live || !u.Available || !u.TxOn || u.Error != chans[0].Error || u.Passthrough != chans[0].PassthroughAddress || u.Points != "" {
		t.Errorf("uart-1 read back as %+v", u)
	}
	if r := got[1]; r.Available || r.Live != "" || r.Points != "" {
		t.Errorf("rs485-2 read back as %+v, want reported unavailable", r)
	}
	st := got[0].State()
	if len(st.Points) != 2 || st.Points[0] != chans[1].Points[0] || !math.IsNaN(st.Points[1].Value) || st.Points[1].Error != "crc" {
		t.Errorf("rs485-1's points read back as %+v", st.Points)
	}
	if got[0].Points != EncodePointStates(chans[1].Points) {
		t.Errorf("rs485-1's stored points %q, want their own stored form", got[0].Points)
	}
	if FindChannelReport(got, "gpio-1") != nil || FindChannelReport(got, "uart-1") != &got[2] {
		t.Error("FindChannelReport")
	}
	var row StoredChannel
	got[1].Stored(&row)
	if row.Available == nil || *row.Available || row.Passthrough != nil {
		t.Errorf("rs485-2 as a stored row: %+v", row)
	}

	migrated := `[{"id":"rs485-2","available":false,"live":"","txOn":false,"error":"","passthroughAddress":"","points":[]},` +
		`{"id":"gpio-1","available":true,"live":"1","txOn":true,"error":"","passthroughAddress":"","points":[]}]`
	got, err = DecodeChannelReports(migrated)
	if err != nil || len(got) != 2 || got[0] != (ChannelReport{ID: "gpio-1", Available: true, Live: "1", TxOn: true}) || got[1] != (ChannelReport{ID: "rs485-2"}) {
		t.Errorf("the migration's form read as %+v, %v", got, err)
	}
	if got, err := DecodeChannelReports(""); got != nil || err != nil {
		t.Errorf(`"" read as %v, %v; want none`, got, err)
	}
	if _, err := DecodeChannelReports("[{"); err == nil {
		t.Error("a damaged form read without an error")
	}
}
