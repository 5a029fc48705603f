package serialcfg

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/fleet/fleet/shared/jsonstrict"
)

// FuzzDecodeFor decodes arbitrary bodies as a channel config PUT on a
// channel of each group: no panic; errors are the three documented kinds;
// an accepted config validates, and encoding it and decoding it again gives
// the same config and the same bytes (one spelling stored, point defaults
// filled once).
func FuzzDecodeFor(f *testing.F) {
	f.Add(uint8(1), []byte(`{"kind":"rs485","baudRate":19200,"dataBits":8,"parity":"even","stopBits":1,"mode":"modbus_rtu_master","slaveId":7,"tx":{"enabled":true,"intervalMs":0,"register":10,"value":42}}`))
	f.Add(uint8(2), []byte(`{"kind":"canfd","nominalBitrate":500000,"dataBitrate":2000000,"samplePoint":0.8,"tx":{"enabled":true,"intervalMs":1000,"canId":"0X1a","dataHex":"de ad be ef"}}`))
	f.Add(uint8(0), []byte(`{"kind":"uart","baudRate":9600,"dataBits":8,"parity":"none","stopBits":1,"flowControl":"none","tx":{"enabled":true,"intervalMs":0,"dataHex":"410d0a"}}`))
	f.Add(uint8(3), []byte(`{"kind":"gpio","direction":"out","pull":"none","debounceMs":0,"tx":{"enabled":true,"intervalMs":500,"value":1}}`))
	f.Add(uint8(1), []byte(`{"kind":"rs485","Kind":"rs485","kind":"canfd"}`))
	f.Add(uint8(1), []byte(`{"kind":"rs485","baudRate":9600,"dataBits":8,"parity":"none","stopBits":1,"mode":"modbus_rtu_master","slaveId":7,"tx":{"enabled":false,"intervalMs":0,"register":0,"value":0},"points":[{"name":"temp","function":"holding","register":10,"type":"f32","order":"CDAB","scale":0.1,"unit":"°C"},{"name":"run","slaveId":3,"function":"input","register":0,"type":"bool","bit":15,"intervalMs":100,"deadband":0.5}]}`))
	f.Add(uint8(2), []byte(`{"kind":"canfd","nominalBitrate":500000,"dataBitrate":2000000,"samplePoint":0.8,"tx":{"enabled":false,"intervalMs":0,"canId":"","dataHex":""},"points":[{"name":"speed","canId":"1a","startBit":7,"length":16,"byteOrder":"big","signed":true,"scale":0.01,"min":-300,"max":300},{"name":"gear","canId":"0x1A","startBit":16,"length":4}]}`))
	f.Fuzz(func(t *testing.T, g uint8, body []byte) {
		group := Kinds[int(g)%len(Kinds)]
		c, err := DecodeFor(group, body)
		if err != nil {
			var se *jsonstrict.SyntaxError
			var fe *jsonstrict.FieldError
			if !errors.As(err, &se) && !errors.As(err, &fe) && !errors.Is(err, ErrKindMismatch) {
				t.Fatalf("DecodeFor(%s, %q): %T %v", group, body, err, err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted config does not validate: %v", err)
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeFor(group, b)
		if err != nil {
			t.Fatalf("the stored spelling %s is refused: %v", b, err)
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("round trip differs:\n%+v\n%+v", c, again)
		}
		if b2, _ := json.Marshal(again); string(b2) != string(b) {
			t.Fatalf("two spellings stored: %s then %s", b, b2)
		}
	})
}
