package agentlink

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// TestDecoderReuseEqualsFreshDecode: the connection's decoder reuses its
// heartbeat and channel array from one message to the next; each message
// still decodes to exactly what a fresh decode gives, whatever came before
// (fields absent now but present before, fewer channels, another type).
func TestDecoderReuseEqualsFreshDecode(t *testing.T) {
	lh := resource.T(time.Date(2026, 11, 22, 2, 45, 58, 0, time.UTC))
	at := resource.T(time.Date(2026, 11, 22, 2, 46, 10, 563e6, time.UTC))
	full := []protocol.ChannelState{
		{ID: "rs485-1", Available: true, Live: "120 34", TxOn: true, Error: "crc error", PassthroughAddress: "10.8.0.12:4001"},
		{ID: "canfd-1", Available: true, Live: "0x123#DEADBEEF"},
		{ID: "uart-1", Error: "port closed"},
	}
	msgs := []protocol.Message{
		{Type: protocol.TypeHeartbeat, Heartbeat: &protocol.Heartbeat{At: at, Status: resource.StatusOnline, IPAddress: "10.8.0.12", AppliedVersion: 4,
			VPN: &protocol.VPN{Up: true, InterfaceName: "wg0", Endpoint: "vpn.example.com:51820", PeerCount: 1, LastHandshake: &lh}, Channels: full}},
		{Type: protocol.TypeHeartbeat, Heartbeat: &protocol.Heartbeat{At: at, Status: resource.StatusError, Channels: []protocol.ChannelState{{ID: "rs485-1"}}}},
		{Type: protocol.TypeHeartbeat, Heartbeat: &protocol.Heartbeat{Status: resource.StatusOnline}},
		{Type: protocol.TypeRecords, Records: &protocol.Records{Items: []protocol.Record{{Seq: 1, Metric: &resource.MetricSample{CapturedAt: at, CPUPct: 12.5}}}}},
		{Type: protocol.TypeHeartbeat},
		{Type: protocol.TypeHeartbeat, Heartbeat: &protocol.Heartbeat{At: at, Status: resource.StatusOnline, Channels: full[1:]}},
		{Type: protocol.TypeConfigApplied, ConfigApplied: &protocol.ConfigApplied{Version: 5}},
	}
	var d decoder
	for i, m := range msgs {
		for _, codec := range codecs {
			b, err := codec.Marshal(&m)
			if err != nil {
				t.Fatal(err)
			}
			var want protocol.Message
			if err := codec.Unmarshal(b, &want); err != nil {
				t.Fatal(err)
			}
			got, err := d.decode(codec, b)
			if err != nil {
				t.Fatalf("message %d in %s: %v", i, codec, err)
			}
			clear(b) // nothing decoded may share the frame's bytes
			if m.Type == protocol.TypeHeartbeat && m.Heartbeat == nil {
				// The connection decodes a heartbeat message without its
				// heartbeat as an empty one, which validation refuses.
				if got.Heartbeat == nil || !reflect.DeepEqual(*got.Heartbeat, protocol.Heartbeat{Channels: got.Heartbeat.Channels}) || len(got.Heartbeat.Channels) != 0 {
					t.Errorf("message %d: %+v", i, got.Heartbeat)
				}
				continue
			}
			if got.Heartbeat != nil && want.Heartbeat != nil && len(got.Heartbeat.Channels) == 0 && len(want.Heartbeat.Channels) == 0 {
				got.Heartbeat.Channels = want.Heartbeat.Channels // nil or empty: the same to the endpoint
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("message %d in %s after earlier ones:\n got %s\nwant %s", i, codec, dump(got), dump(want))
			}
		}
	}
}

var codecs = []protocol.Codec{protocol.JSON, protocol.CBOR}

func dump(m protocol.Message) string {
	b, _ := json.Marshal(m)
	return string(b)
}

// heartbeat8 is the benchmarks' heartbeat: 8 channels, a VPN, as an IG-500
// agent sends it.
func heartbeat8() protocol.Message {
	var chans []protocol.ChannelState
	for _, c := range []string{"uart-1", "rs485-1", "rs485-2", "canfd-1", "gpio-1", "gpio-2", "gpio-3", "gpio-4"} {
		chans = append(chans, protocol.ChannelState{ID: c, Available: true, Live: "120 34"})
	}
	return protocol.Message{Type: protocol.TypeHeartbeat, Heartbeat: &protocol.Heartbeat{At: resource.T(time.Now()), Status: "ONLINE", IPAddress: "10.0.0.1",
		VPN: &protocol.VPN{Up: true, InterfaceName: "wg0", Endpoint: "vpn.example:51820", PeerCount: 1}, Channels: chans}}
}

// BenchmarkDecodeHeartbeat times the decoding of one heartbeat of 8
// channels: in CBOR as a connection decodes it (into its reused heartbeat),
// in CBOR into a new message, in JSON as a connection of an agent from
// before CBOR decodes it (protocol.JSON: encoding/json/v2's implementation
// of encoding/json), and with encoding/json itself, what that connection
// used before.
func BenchmarkDecodeHeartbeat(b *testing.B) {
	m := heartbeat8()
	cb, err := protocol.CBOR.Marshal(&m)
	if err != nil {
		b.Fatal(err)
	}
	js, err := protocol.JSON.Marshal(&m)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("cbor", func(b *testing.B) {
		var d decoder
		benchDecode(b, cb, func(p []byte) error { _, err := d.decode(protocol.CBOR, p); return err })
	})
	b.Run("cbor, new message", func(b *testing.B) {
		benchDecode(b, cb, func(p []byte) error { var m protocol.Message; return protocol.CBOR.Unmarshal(p, &m) })
	})
	b.Run("json", func(b *testing.B) {
		var d decoder
		benchDecode(b, js, func(p []byte) error { _, err := d.decode(protocol.JSON, p); return err })
	})
	b.Run("encoding/json", func(b *testing.B) {
		benchDecode(b, js, func(p []byte) error { var m protocol.Message; return json.Unmarshal(p, &m) })
	})
}

// benchDecode times decode on data, counting data's bytes as processed.
func benchDecode(b *testing.B, data []byte, decode func([]byte) error) {
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzConnDecoder decodes two messages with one connection's decoder, as a
// connection reads them, in each codec: the second must decode to what a
// fresh decode gives, whatever the first left in the reused heartbeat, and
// neither may panic (seeds: testdata/fuzz/FuzzConnDecoder).
func FuzzConnDecoder(f *testing.F) {
	f.Fuzz(func(t *testing.T, first, second []byte) {
		for _, codec := range codecs {
			checkConnDecoder(t, codec, first, second)
		}
	})
}

func checkConnDecoder(t *testing.T, codec protocol.Codec, first, second []byte) {
	var d decoder
	d.decode(codec, first)
	got, err := d.decode(codec, second)
	var want protocol.Message
	wantErr := codec.Unmarshal(second, &want)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("%s after another message: error %v, fresh decode: %v", codec, err, wantErr)
	}
	if err != nil {
		return
	}
	if g, w := dumpCBOR(t, normalized(got)), dumpCBOR(t, normalized(want)); g != w {
		t.Fatalf("%s after another message:\n got %x\nwant %x", codec, g, w)
	}
}

// normalized is m as the endpoint reads it: a heartbeat only in a
// heartbeat message, an empty one the same as none (decoder.decode returns
// an empty heartbeat for a heartbeat message without one; validation
// refuses both), no channels the same as an empty list.
func normalized(m protocol.Message) protocol.Message {
	if m.Type != protocol.TypeHeartbeat || m.Heartbeat == nil {
		m.Heartbeat = nil
		return m
	}
	hb := *m.Heartbeat
	if len(hb.Channels) == 0 {
		hb.Channels = nil
	}
	if reflect.DeepEqual(hb, protocol.Heartbeat{}) {
		m.Heartbeat = nil
		return m
	}
	m.Heartbeat = &hb
	return m
}

func dumpCBOR(t *testing.T, m protocol.Message) string {
	b, err := protocol.CBOR.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
