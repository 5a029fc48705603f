package canfd_test

import (
	"reflect"
	"regexp"
	"testing"

	"github.com/fleet/fleet/hw/canfd"
	"github.com/fleet/fleet/shared/serialcfg"
)

// FuzzFrame decodes arbitrary bytes as a frame read from a CAN socket: no
// panic; a decoded frame shows in telemetry as <id>#<hex> (or ERR#...), its
// error text never panics, and a frame of a valid length encodes back to a
// frame that decodes the same.
func FuzzFrame(f *testing.F) {
	classic := make([]byte, canfd.ClassicMTU)
	classic[0], classic[4], classic[8] = 0x23, 2, 0xde
	fd := make([]byte, canfd.FDMTU)
	fd[0], fd[3], fd[4], fd[5] = 0xf0, 0x80|0x1a, 12, 0x05
	errFrame := make([]byte, canfd.ClassicMTU)
	errFrame[0], errFrame[3], errFrame[4] = 0x40, 0x20, 8
	for _, b := range [][]byte{classic, fd, errFrame, {1, 2, 3}} {
		f.Add(b)
	}
	shown := regexp.MustCompile(`^([0-9A-F]{3}|[0-9A-F]{8})#([0-9A-F]{2})*$|^ERR#[0-9A-F]{8}$`)
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := canfd.Unmarshal(b)
		if err != nil {
			return
		}
		if s := fr.String(); !shown.MatchString(s) {
			t.Fatalf("frame shows as %q", s)
		}
		canfd.ErrorText(fr)
		if fr.FD && !serialcfg.ValidCANFDLength(len(fr.Data)) || fr.Err {
			return // not a frame a controller sends: nothing to encode
		}
		enc, err := fr.Marshal()
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", fr, err)
		}
		again, err := canfd.Unmarshal(enc)
		if err != nil || !reflect.DeepEqual(again, fr) {
			t.Fatalf("round trip: %+v -> %+v (%v)", fr, again, err)
		}
	})
}
