package agentlink

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// TestDecodeHeartbeatEqualsEncodingJSON checks the fast path against
// encoding/json: on every input it accepts, both give the same message; the
// plain heartbeats agents send are accepted.
func TestDecodeHeartbeatEqualsEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"", "0", "1", "12 34", "0x123#DEADBEEF", "port closed", "modbus timeout (slave 7)", "wg0", "10.0.0.1:4001"}
	word := func() string { return words[rng.IntN(len(words))] }
	var inputs []string
	accepted := 0
	for range 500 {
		hb := protocol.Heartbeat{At: resource.T(time.Unix(rng.Int64N(2e9), rng.Int64N(1e9))), Status: resource.DeviceStatus([]string{"ONLINE", "REBOOTING", "ERROR"}[rng.IntN(3)]),
			IPAddress: word(), AppliedVersion: rng.Int64N(1000)}
		if rng.IntN(2) == 0 {
			hb.VPN = &protocol.VPN{Up: rng.IntN(2) == 0, InterfaceName: word(), Endpoint: word(), PeerCount: rng.IntN(5)}
			if rng.IntN(2) == 0 {
				lh := resource.T(time.Unix(rng.Int64N(2e9), 0))
				hb.VPN.LastHandshake = &lh
			}
		}
		for i := range rng.IntN(9) {
			hb.Channels = append(hb.Channels, protocol.ChannelState{ID: fmt.Sprintf("gpio-%d", i+1), Available: rng.IntN(2) == 0, Live: word(), TxOn: rng.IntN(2) == 0, Error: word(), PassthroughAddress: word()})
		}
		b, err := json.Marshal(protocol.Message{Type: protocol.TypeHeartbeat, Heartbeat: &hb})
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, string(b))
		if _, ok := decodeHeartbeat(b); !ok {
			t.Errorf("plain heartbeat not accepted: %s", b)
		}
	}
	inputs = append(inputs,
		` { "type" : "heartbeat" , "heartbeat" : { "status" : "ONLINE" , "channels" : [ ] , "vpn" : null } } `,
		`{"heartbeat":{"at":"2026-01-02T03:04:05.123456+02:00","status":"ONLINE","channels":null},"type":"heartbeat"}`,
		`{"type":"heartbeat","heartbeat":{"status":"ONLINE","vpn":{"up":true},"vpn":{"endpoint":"x"}}}`,
		`{"type":"heartbeat","heartbeat":{"status":"ONLINE","ipAddress":"caf\u00e9"}}`,
		`{"type":"heartbeat","heartbeat":{"status":"ONLINE","ipAddress":"café"}}`,
		`{"type":"heartbeat","heartbeat":{"Status":"ONLINE"}}`,
		`{"type":"heartbeat","heartbeat":{"status":"ONLINE","extra":1}}`,
		`{"type":"heartbeat","heartbeat":null}`,
		`{"type":"heartbeat"}`,
		`{"type":"records","records":{"items":[]}}`,
		`{"type":"heartbeat","heartbeat":{"appliedVersion":1e3}}`,
		`{"type":"heartbeat","heartbeat":{"appliedVersion":-0}}`,
		`{"type":"heartbeat","heartbeat":{"appliedVersion":0123}}`,
		`{"type":"heartbeat","heartbeat":{"at":null}}`,
		`{"type":"heartbeat","heartbeat":{"channels":[{"id":"a","available":null}]}}`,
		`{"type":"heartbeat","heartbeat":{"channels":[{"id":"a"},]}}`,
		`{"type":"heartbeat","heartbeat":{}} x`,
		`{"type":"heartbeat","heartbeat":{}}`,
		`{"type":"heartbeat","type":"heartbeat","heartbeat":{}}`,
	)
	// One string cache across every input, as a connection's would be;
	// each input is decoded twice, the second time mostly from the cache.
	var cache, connCache strCache
	var connHB protocol.Heartbeat
	var connVPN protocol.VPN
	for _, in := range inputs {
		var want protocol.Message
		wantErr := json.Unmarshal([]byte(in), &want)
		got, ok := decodeHeartbeat([]byte(in))
		buf := []byte(in)
		cached, cok := decodeHeartbeatCached(buf, &cache)
		again, aok := decodeHeartbeatCached(buf, &cache)
		// As a connection decodes: into the same heartbeat every time.
		into, iok := decodeHeartbeatInto(buf, &connCache, &connHB, &connVPN)
		clear(buf) // the decoded message must not share the input's bytes
		if cok != ok || aok != ok || iok != ok {
			t.Errorf("cached decoding accepts %v, %v, %v; uncached %v: %s", cok, aok, iok, ok, in)
		}
		if !ok {
			continue
		}
		accepted++
		if wantErr != nil {
			t.Errorf("fast path accepted what encoding/json refuses (%v): %s", wantErr, in)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("fast path differs on %s\n got %+v\nwant %+v", in, *got.Heartbeat, *want.Heartbeat)
		}
		if !reflect.DeepEqual(into, want) {
			t.Errorf("decoding into a reused heartbeat differs on %s\n got %+v\nwant %+v", in, *into.Heartbeat, *want.Heartbeat)
		}
		if !reflect.DeepEqual(cached, want) || !reflect.DeepEqual(again, want) {
			t.Errorf("cached fast path differs on %s\n got %+v\nthen %+v\nwant %+v", in, *cached.Heartbeat, *again.Heartbeat, *want.Heartbeat)
		}
	}
	if accepted < 500 {
		t.Errorf("accepted %d inputs", accepted)
	}
}

func BenchmarkDecodeHeartbeat(b *testing.B) {
	var chans []protocol.ChannelState
	for _, c := range []string{"uart-1", "rs485-1", "rs485-2", "canfd-1", "gpio-1", "gpio-2", "gpio-3", "gpio-4"} {
		chans = append(chans, protocol.ChannelState{ID: c, Available: true, Live: "120 34"})
	}
	msg, _ := json.Marshal(protocol.Message{Type: protocol.TypeHeartbeat, Heartbeat: &protocol.Heartbeat{At: resource.T(time.Now()), Status: "ONLINE", IPAddress: "10.0.0.1",
		VPN: &protocol.VPN{Up: true, InterfaceName: "wg0", Endpoint: "vpn.example:51820", PeerCount: 1}, Channels: chans}})
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			if _, ok := decodeHeartbeat(msg); !ok {
				b.Fatal("not accepted")
			}
		}
	})
	b.Run("fast, cached strings", func(b *testing.B) {
		var cache strCache
		for b.Loop() {
			if _, ok := decodeHeartbeatCached(msg, &cache); !ok {
				b.Fatal("not accepted")
			}
		}
	})
	b.Run("fast, into a reused heartbeat", func(b *testing.B) {
		var cache strCache
		var hb protocol.Heartbeat
		var vpn protocol.VPN
		for b.Loop() {
			if _, ok := decodeHeartbeatInto(msg, &cache, &hb, &vpn); !ok {
				b.Fatal("not accepted")
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			var m protocol.Message
			if err := json.Unmarshal(msg, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
