package dbcimport_test

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud/dbcimport"
	"github.com/fleet/fleet/shared/serialcfg"
)

func load(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/vehicle.dbc")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func f(v float64) *float64 { return &v }

// TestImportVehicle imports a file with Intel and Motorola signals, signed
// and scaled ones, an extended id and a 64-byte CAN-FD message: every field
// of every point is the DBC's.
func TestImportVehicle(t *testing.T) {
	res, err := dbcimport.Import("vehicle.dbc", load(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []serialcfg.CANPoint{
		{Name: "engine_speed", CanID: "0x100", StartBit: 0, Length: 16, ByteOrder: "little", Scale: 0.25, Unit: "rpm", Min: f(0), Max: f(16383.75)},
		{Name: "coolant_temp", CanID: "0x100", StartBit: 23, Length: 8, ByteOrder: "big", Signed: true, Scale: 1, Offset: -40, Unit: "degC", Min: f(-40), Max: f(215)},
		{Name: "oil_pressure", CanID: "0x100", StartBit: 39, Length: 12, ByteOrder: "big", Scale: 0.1, Unit: "bar", Min: f(0), Max: f(409.5)},
		{Name: "torque_demand", CanID: "0x100", StartBit: 48, Length: 12, ByteOrder: "little", Signed: true, Scale: 0.5, Unit: "Nm", Min: f(-1024), Max: f(1023.5)},
		{Name: "mil_on", CanID: "0x100", StartBit: 63, Length: 1, ByteOrder: "little", Scale: 1},
		// 2566844672 = 0x98FEF100: bit 31 marks the extended id 0x18FEF100.
		{Name: "wheel_speed", CanID: "0x18FEF100", StartBit: 8, Length: 16, ByteOrder: "little", Scale: 0.00390625, Unit: "km/h", Min: f(0), Max: f(250.996)},
		{Name: "cell1_voltage", CanID: "0x200", StartBit: 0, Length: 16, ByteOrder: "little", Scale: 0.001, Unit: "V", Min: f(0), Max: f(65.535)},
		{Name: "pack_current", CanID: "0x200", StartBit: 255, Length: 16, ByteOrder: "big", Signed: true, Scale: 0.1, Unit: "A", Min: f(-3276.8), Max: f(3276.7)},
		{Name: "cell32_voltage", CanID: "0x200", StartBit: 496, Length: 16, ByteOrder: "little", Scale: 0.001, Unit: "V", Min: f(0), Max: f(65.535)},
		{Name: "diag_mux", CanID: "0x300", StartBit: 0, Length: 8, ByteOrder: "little", Scale: 1, Min: f(0), Max: f(255)},
	}
	if !reflect.DeepEqual(res.Points, want) {
		for i := range max(len(res.Points), len(want)) {
			var g, w serialcfg.CANPoint
			if i < len(res.Points) {
				g = res.Points[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if !reflect.DeepEqual(g, w) {
				t.Errorf("point %d:\n got %s\nwant %s", i, show(g), show(w))
			}
		}
	}
	if res.Points[4].ValueType() != "bool" || res.Points[0].ValueType() != "f64" {
		t.Errorf("a 1-bit unscaled signal lists as %s, a scaled one as %s", res.Points[4].ValueType(), res.Points[0].ValueType())
	}
	wantSkipped := []string{
		"vehicle.dbc:33: signal DiagVoltage of Diagnostics is multiplexed (m0): skipped",
		"vehicle.dbc:34: signal DiagCurrent of Diagnostics is multiplexed (m1): skipped",
		"vehicle.dbc:35: signal ReferenceFloat of Diagnostics is an IEEE float (SIG_VALTYPE_): skipped",
	}
	if !reflect.DeepEqual(res.Skipped, wantSkipped) {
		t.Errorf("skipped:\n%s\nwant\n%s", strings.Join(res.Skipped, "\n"), strings.Join(wantSkipped, "\n"))
	}
}

func show(p serialcfg.CANPoint) string {
	s := fmt.Sprintf("%+v", p)
	if p.Min != nil {
		s += fmt.Sprintf(" min=%g max=%g", *p.Min, *p.Max)
	}
	return s
}

func TestImportMessages(t *testing.T) {
	pts, err := dbcimport.Points("vehicle.dbc", load(t), []string{"BatteryCells", "VehicleSpeed"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pts {
		names = append(names, p.Name)
	}
	// File order, whatever the order of the names asked for.
	if got := strings.Join(names, ","); got != "wheel_speed,cell1_voltage,pack_current,cell32_voltage" {
		t.Errorf("points of VehicleSpeed and BatteryCells: %s", got)
	}
}

func TestImportErrors(t *testing.T) {
	src := string(load(t))
	for name, c := range map[string]struct {
		src      string
		messages []string
		want     string
	}{
		"unknown message": {src, []string{"EngineData", "Gearbox"}, "vehicle.dbc: no message named Gearbox (the file has messages EngineData, VehicleSpeed, BatteryCells, Diagnostics)"},
		"malformed line": {strings.Replace(src, "SG_ OilPressure : 39|12@0+", "SG_ OilPressure : 39|12@2+", 1), nil,
			"vehicle.dbc:19: invalid value"},
		"missing colon": {strings.Replace(src, "BO_ 512 BatteryCells: 64", "BO_ 512 BatteryCells 64", 1), nil, "vehicle.dbc:26: expected token"},
		"signal beyond message": {strings.Replace(src, "SG_ MILOn : 63|1@1+", "SG_ MILOn : 64|1@1+", 1), nil,
			"vehicle.dbc:21: signal MILOn of EngineData: bits 64|1@1 do not fit the message's 8 bytes"},
		"motorola off the end": {strings.Replace(src, "SG_ OilPressure : 39|12@0+", "SG_ OilPressure : 59|12@0+", 1), nil,
			"vehicle.dbc:19: signal OilPressure of EngineData: bits 59|12@0 do not fit the message's 8 bytes"},
		"names clash": {strings.Replace(src, "SG_ Cell1Voltage :", "SG_ Engine_Speed :", 1), nil,
			`vehicle.dbc: signals EngineSpeed (EngineData, line 17) and Engine_Speed (BatteryCells, line 27) both become point "engine_speed"`},
		"unit too long": {strings.Replace(src, `"km/h"`, `"kilometres per hour"`, 1), nil,
			`vehicle.dbc:24: signal WheelSpeed of VehicleSpeed: unit "kilometres per hour" is longer than 16 characters`},
		"too big a message": {strings.Replace(src, "BatteryCells: 64", "BatteryCells: 65", 1), nil, "vehicle.dbc:26: message BatteryCells: 65 bytes is more than a CAN-FD frame carries"},
		"bad standard id":   {strings.Replace(src, "BO_ 768 ", "BO_ 2048 ", 1), nil, "vehicle.dbc:31: invalid standard ID"},
		"message twice":     {strings.Replace(src, "BO_ 768 Diagnostics", "BO_ 768 EngineData", 1), nil, "vehicle.dbc:31: message EngineData is defined twice (first on line 16)"},
		"only skipped":      {src, []string{"Diagnostics", "Diagnostics"}, ""},
		"nothing at all":    {"VERSION \"\"\n", nil, "vehicle.dbc: no signal to import in no messages"},
	} {
		pts, err := dbcimport.Points("vehicle.dbc", []byte(c.src), c.messages)
		if c.want == "" {
			if err != nil || len(pts) != 1 || pts[0].Name != "diag_mux" {
				t.Errorf("%s: %v %+v", name, err, pts)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one starting %q", name, err, c.want)
		}
		if pts != nil {
			t.Errorf("%s: points %+v beside the error", name, pts)
		}
	}
}

func TestPointName(t *testing.T) {
	for in, want := range map[string]string{
		"EngineSpeed":                          "engine_speed",
		"ABSActive":                            "abs_active",
		"MILOn":                                "mil_on",
		"Cell32Voltage":                        "cell32_voltage",
		"engine_speed":                         "engine_speed",
		"Engine__Speed_":                       "engine_speed",
		"_hidden":                              "hidden",
		"VCU_HV_BattVolt":                      "vcu_hv_batt_volt",
		"A":                                    "a",
		"x":                                    "x",
		"ThisIsAVeryLongSignalNameFromSomeOEM": "this_is_a_very_long_signal_name",
	} {
		got, err := dbcimport.PointName(in)
		if err != nil || got != want {
			t.Errorf("PointName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := dbcimport.PointName("___"); err == nil {
		t.Error("PointName(___) gave a name")
	}
}

func canfd(points ...serialcfg.CANPoint) serialcfg.CANFD {
	return serialcfg.CANFD{Kind: "canfd", NominalBitrate: 500000, DataBitrate: 2000000, SamplePoint: 0.875, Points: points}
}

func TestMerge(t *testing.T) {
	old := canfd(
		serialcfg.CANPoint{Name: "engine_speed", CanID: "0x1", StartBit: 0, Length: 8, ByteOrder: "little"},
		serialcfg.CANPoint{Name: "handmade", CanID: "0x7", StartBit: 0, Length: 8, ByteOrder: "little"},
	)
	pts, err := dbcimport.Points("vehicle.dbc", load(t), []string{"EngineData"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := dbcimport.Merge(old, pts)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got.Points {
		names = append(names, p.Name+"@"+p.CanID)
	}
	if s := strings.Join(names, ","); s != "engine_speed@0x100,handmade@0x7,coolant_temp@0x100,oil_pressure@0x100,torque_demand@0x100,mil_on@0x100" {
		t.Errorf("merged: %s", s)
	}
	if old.Points[0].CanID != "0x1" {
		t.Error("Merge changed its argument")
	}

	// Over 64 points: an error, and cfg comes back as it was.
	var many []serialcfg.CANPoint
	for i := range 60 {
		many = append(many, serialcfg.CANPoint{Name: fmt.Sprintf("p%d", i), CanID: "0x5", StartBit: 0, Length: 8, ByteOrder: "little"})
	}
	full := canfd(many...)
	back, err := dbcimport.Merge(full, pts)
	if !errors.Is(err, dbcimport.ErrTooManyPoints) || !strings.Contains(err.Error(), "65 points, at most 64") {
		t.Errorf("65 points: %v", err)
	}
	if len(back.Points) != 60 {
		t.Errorf("a refused merge returned %d points", len(back.Points))
	}
	// The channel's own fields are validated too.
	bad := canfd()
	bad.SamplePoint = 2
	if _, err := dbcimport.Merge(bad, pts); err == nil || !strings.Contains(err.Error(), "samplePoint") {
		t.Errorf("merge into an invalid channel: %v", err)
	}
}

// TestImportWindowsFile: a file as CANdb++ writes it, CRLF line ends and
// "°C" in Windows-1252 (one byte 0xB0), imports with the unit in UTF-8.
func TestImportWindowsFile(t *testing.T) {
	src := strings.ReplaceAll(string(load(t)), "\n", "\r\n")
	src = strings.Replace(src, `"degC"`, "\"\xb0C\"", 1)
	pts, err := dbcimport.Points("vehicle.dbc", []byte(src), []string{"EngineData"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) != 5 || pts[1].Name != "coolant_temp" || pts[1].Unit != "°C" {
		t.Errorf("points %+v", pts)
	}
	// Line numbers still count CRLF lines.
	bad := strings.Replace(src, "SG_ OilPressure : 39|12@0+", "SG_ OilPressure : 39|12@2+", 1)
	if _, err := dbcimport.Points("vehicle.dbc", []byte(bad), nil); err == nil || !strings.HasPrefix(err.Error(), "vehicle.dbc:19:") {
		t.Errorf("a bad line in a CRLF file: %v", err)
	}
}

// A signal whose range is inverted (vendor files have them) is imported
// without min and max, with a note, and the channel takes the result.
func TestImportDropsAnInvertedRange(t *testing.T) {
	src := "BO_ 26 Engine: 8 ECU\n SG_ Temp : 0|8@1+ (1,-40) [215|-40] \"degC\" ECU\n SG_ Rpm : 8|16@1+ (1,0) [0|8000] \"rpm\" ECU\n"
	res, err := dbcimport.Import("v.dbc", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Points) != 2 || res.Points[0].Min != nil || res.Points[0].Max != nil || res.Points[1].Max == nil || *res.Points[1].Max != 8000 {
		t.Fatalf("points %+v", res.Points)
	}
	want := []string{"v.dbc:2: signal Temp of Engine: range [215|-40] is not a range (minimum above maximum, or not finite): imported without min and max"}
	if !reflect.DeepEqual(res.Skipped, want) {
		t.Fatalf("notes %q, want %q", res.Skipped, want)
	}
	if _, err := dbcimport.Merge(serialcfg.CANFD{Kind: "canfd", NominalBitrate: 500000, DataBitrate: 2000000, SamplePoint: 0.875}, res.Points); err != nil {
		t.Fatal(err)
	}
}
