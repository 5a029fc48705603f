package agentlink

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/protocol"
)

// Fuzz targets of the agent protocol's decoding (seed corpora, one message
// of every type and a few hostile ones, in testdata/fuzz/<target>; `make
// fuzz` runs them for longer). The decoder
// under test is decodeForFuzz, a connection's own: when the link's codec
// changes (issue 17: CBOR negotiated in the hello), FuzzAgentMessage keeps
// driving whatever conn.decode is, and FuzzHeartbeatFastPath goes with the
// JSON fast path it compares.

// decodeForFuzz is the decoder FuzzAgentMessage drives.
var decodeForFuzz = func(c *conn, b []byte) (protocol.Message, error) { return c.decode(b) }

// FuzzHeartbeatFastPath: whatever the heartbeat fast path accepts,
// encoding/json accepts too and decodes to the same message, whether
// decoded fresh, through a string cache, or into a reused heartbeat (as a
// connection decodes).
func FuzzHeartbeatFastPath(f *testing.F) {
	var cache strCache
	var hb protocol.Heartbeat
	var vpn protocol.VPN
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := decodeHeartbeat(b)
		into, iok := decodeHeartbeatInto(append([]byte(nil), b...), &cache, &hb, &vpn)
		if ok != iok {
			t.Fatalf("fresh decoding accepts %v, into a reused heartbeat %v: %q", ok, iok, b)
		}
		if !ok {
			return
		}
		var want protocol.Message
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("fast path accepted what encoding/json refuses (%v): %q", err, b)
		}
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(into, want) {
			t.Fatalf("fast path differs on %q\n got %+v\ninto %+v\nwant %+v", b, got.Heartbeat, into.Heartbeat, want.Heartbeat)
		}
	})
}

// FuzzAgentMessage decodes arbitrary bytes as a connection does and runs
// the relay's validation of the message's type: no panic, and what passes
// validation is within the protocol's bounds (docs/protocol.md).
func FuzzAgentMessage(f *testing.F) {
	now := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	c := &conn{}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeForFuzz(c, b)
		if err != nil {
			return
		}
		switch m.Type {
		case protocol.TypeHello:
			if m.Hello != nil && validateHello(m.Hello) == nil {
				if m.Hello.AppliedVersion < 0 || len(m.Hello.DeviceName) > maxTextField {
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
			if m.Records != nil && validateRecords(m.Records.Items, now) == nil {
				var prev uint64
				for _, r := range m.Records.Items {
					if r.Seq <= prev || r.Seq > protocol.MaxSeq || (r.Metric == nil) == (r.Event == nil) {
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
		if _, err := json.Marshal(m); err != nil {
			t.Fatalf("decoded message does not encode: %v", err)
		}
	})
}
