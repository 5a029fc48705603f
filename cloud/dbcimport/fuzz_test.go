package dbcimport_test

import (
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud/dbcimport"
	"github.com/fleet/fleet/shared/serialcfg"
)

// FuzzImport feeds arbitrary files to the import path: it never panics, an
// error names the file, and whatever it imports is a set of points a canfd
// channel accepts (names by the rule and unique, lengths 1..64, signals
// inside a 64-byte frame) that Merge takes.
func FuzzImport(f *testing.F) {
	f.Add(load(f), "")
	f.Add(load(f), "EngineData,Diagnostics")
	f.Add([]byte("BO_ 2566844672 X: 8 ECU\n SG_ A : 7|64@0- (1,0) [0|0] \"\" ECU\n"), "")
	f.Add([]byte("BO_ 1 X: 64 ECU\n SG_ A m3 : 511|1@0+ (1,0) [0|0] \"\" ECU\n"), "X")
	f.Add([]byte("VERSION \"\nBO_"), "")
	f.Fuzz(func(t *testing.T, src []byte, messages string) {
		var names []string
		if messages != "" {
			names = strings.Split(messages, ",")
		}
		res, err := dbcimport.Import("f.dbc", src, names)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.dbc") {
				t.Fatalf("error without the file's name: %v", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, p := range res.Points {
			if _, err := dbcimport.PointName(p.Name); err != nil || seen[p.Name] {
				t.Fatalf("point name %q (duplicate %v, %v)", p.Name, seen[p.Name], err)
			}
			seen[p.Name] = true
			if p.Length < 1 || p.Length > 64 || dbcimport.LastByte(p.StartBit, p.Length, p.ByteOrder == "big") >= 64 {
				t.Fatalf("point %+v does not fit a frame", p)
			}
			if _, _, err := serialcfg.ParseCANID(p.CanID); err != nil {
				t.Fatalf("point %s: canId %q: %v", p.Name, p.CanID, err)
			}
		}
		if len(res.Points) <= serialcfg.MaxPoints {
			if _, err := dbcimport.Merge(serialcfg.CANFD{Kind: "canfd", NominalBitrate: 500000, DataBitrate: 2000000, SamplePoint: 0.875}, res.Points); err != nil {
				t.Fatalf("Merge refused what Import made: %v", err)
			}
		}
	})
}
