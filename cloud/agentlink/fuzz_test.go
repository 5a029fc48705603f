package agentlink

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/protocol"
)

// The agent protocol's decoding is fuzzed here (FuzzAgentMessage: every
// message type through a connection's decoder, in each codec, then the
// relay's validation) and in codec_test.go (FuzzConnDecoder: a reused
// decoder against a fresh one, in each codec); the CBOR decoder itself and
// its agreement with encoding/json in shared/protocol (FuzzCBORDecode).
// Seed corpora: testdata/fuzz/<target>.

// decodeForFuzz is the decoder FuzzAgentMessage drives: a connection's own.
var decodeForFuzz = func(d *decoder, codec protocol.Codec, b []byte) (protocol.Message, error) {
	return d.decode(codec, b)
}

// FuzzAgentMessage decodes arbitrary bytes as a connection does, in JSON
// or in CBOR, and runs the relay's validation of the message's type: no
// panic, and what passes validation is within the protocol's bounds
// (docs/protocol.md). The JSON seeds are also added in CBOR.
func FuzzAgentMessage(f *testing.F) {
	for _, name := range []string{"hello", "heartbeat", "records", "config-applied", "seq-above-bound"} {
		b, err := os.ReadFile(filepath.Join("testdata/fuzz/FuzzAgentMessage", name))
		if err != nil {
			f.Fatal(err)
		}
		js, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(strings.SplitN(string(b), "\n", 4)[2], "[]byte("), ")"))
		if err != nil {
			f.Fatal(err)
		}
		var m protocol.Message
		if err := json.Unmarshal([]byte(js), &m); err != nil {
			f.Fatalf("seed %s: %v", name, err)
		}
		cb, err := protocol.CBOR.Marshal(&m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(true, cb)
	}
	now := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	var d decoder
	f.Fuzz(func(t *testing.T, cbor bool, b []byte) {
		codec := protocol.JSON
		if cbor {
			codec = protocol.CBOR
		}
		m, err := decodeForFuzz(&d, codec, b)
		if err != nil {
			return
		}
		switch m.Type {
		case protocol.TypeHello:
			if m.Hello != nil && validateHello(m.Hello) == nil {
				if m.Hello.AppliedVersion < 0 || len(m.Hello.DeviceName) > protocol.MaxTextField {
					t.Fatalf("hello out of bounds passed: %+v", m.Hello)
				}
			}
		case protocol.TypeHeartbeat:
			if m.Heartbeat != nil && validateHeartbeat(m.Heartbeat) == nil {
				h := m.Heartbeat
				if h.IPAddress != "" {
					ip, err := netip.ParseAddr(h.IPAddress)
					if err != nil || ip.Zone() != "" || ip.String() != h.IPAddress {
						t.Fatalf("ipAddress %q passed", h.IPAddress)
					}
				}
				if len(h.Channels) > protocol.MaxChannels || h.AppliedVersion < 0 {
					t.Fatalf("heartbeat out of bounds passed: %+v", h)
				}
			}
		case protocol.TypeRecords:
			if m.Records != nil && validateRecords(m.Records.Items, 0, now) == nil {
				var prev uint64
				for _, r := range m.Records.Items {
					if r.Seq <= prev || r.Seq > protocol.MaxSeq || r.Seq-prev > protocol.MaxSeqStep || (r.Metric == nil) == (r.Event == nil) {
						t.Fatalf("record out of bounds passed: %+v after %d", r, prev)
					}
					prev = r.Seq
					if r.Event != nil && len(r.Event.Data) > 0 && !json.Valid(r.Event.Data) {
						t.Fatalf("event data %q passed", r.Event.Data)
					}
				}
			}
		}
		// What decoded re-encodes (the relay answers and logs messages).
		if _, err := codec.Marshal(&m); err != nil {
			t.Fatalf("decoded message does not encode: %v", err)
		}
	})
}
