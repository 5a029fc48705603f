package agentlink_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// maskedFrame is a client's text frame holding b (RFC 6455, masked).
func maskedFrame(b []byte) []byte {
	key := [4]byte{0x12, 0x34, 0x56, 0x78}
	f := []byte{0x81}
	switch {
	case len(b) < 126:
		f = append(f, 0x80|byte(len(b)))
	default:
		f = append(f, 0x80|126)
		f = binary.BigEndian.AppendUint16(f, uint16(len(b)))
	}
	f = append(f, key[:]...)
	for i, c := range b {
		f = append(f, c^key[i%4])
	}
	return f
}

// readFrame reads one unmasked server frame and returns its payload.
func readFrame(t *testing.T, r *bufio.Reader) []byte {
	t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		t.Fatalf("frame header: %v", err)
	}
	n := int(h[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		io.ReadFull(r, l[:])
		n = int(binary.BigEndian.Uint16(l[:]))
	case 127:
		t.Fatal("a frame over 64 KiB")
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		t.Fatalf("frame payload: %v", err)
	}
	return b
}

// The relay reads an agent connection through a buffer it borrows only
// while received bytes wait (hijack.go). An agent that sends its hello in
// the same packet as the upgrade request (read ahead by net/http), two
// messages in one packet, and a message split over two packets a moment
// apart is served as any other: welcome, both stored, the batch acked.
func TestReadsAcrossPacketBoundaries(t *testing.T) {
	stores.Run(t, func(t *testing.T, open storetest.Opener) {
		e := newEnv(t, open, nil)
		id, tok := e.addDevice("IG-500")
		conn, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(20 * time.Second))
		msg := func(m protocol.Message) []byte {
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			return maskedFrame(b)
		}
		h := hello()
		req := "GET " + protocol.Path + " HTTP/1.1\r\nHost: relay\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" +
			"Sec-WebSocket-Protocol: " + protocol.Subprotocol + "\r\nAuthorization: Bearer " + tok + "\r\n\r\n"
		if _, err := conn.Write(append([]byte(req), msg(protocol.Message{Type: protocol.TypeHello, Hello: &h})...)); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(conn)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade answered %s", resp.Status)
		}
		var w protocol.Message
		if err := json.Unmarshal(readFrame(t, r), &w); err != nil || w.Type != protocol.TypeWelcome {
			t.Fatalf("want the welcome, got %+v (%v)", w, err)
		}

		now := time.Now()
		hb := func() []byte {
			return msg(protocol.Message{Type: protocol.TypeHeartbeat, Heartbeat: &protocol.Heartbeat{Status: resource.StatusOnline, At: resource.T(now)}})
		}
		if _, err := conn.Write(append(hb(), hb()...)); err != nil {
			t.Fatal(err)
		}
		batch := msg(protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: []protocol.Record{
			metricRec(1, now.Add(-2*time.Second), 10), metricRec(2, now.Add(-time.Second), 20)}}})
		half := len(batch) / 2
		if _, err := conn.Write(batch[:half]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if _, err := conn.Write(batch[half:]); err != nil {
			t.Fatal(err)
		}
		var ack protocol.Message
		if err := json.Unmarshal(readFrame(t, r), &ack); err != nil || ack.Type != protocol.TypeAck || ack.Ack.Seq != 2 {
			t.Fatalf("want the ack of seq 2, got %+v (%v)", ack, err)
		}
		eventually(t, 5*time.Second, func() string {
			if n := e.obs.heartbeatCount(id); n != 2 {
				return fmt.Sprintf("%d heartbeats stored, want 2", n)
			}
			return ""
		})
		if n := e.metrics(id); n != 2 {
			t.Fatalf("%d metric samples stored, want 2", n)
		}
	})
}

// panicky is a store whose heartbeat of one device panics, as a bug
// reached by one agent's message would.
type panicky struct {
	agentlink.Store
	device *string
}

func (p panicky) Heartbeat(ctx context.Context, in agentlink.HeartbeatIn, done func(agentlink.HeartbeatOut, error)) error {
	if in.Device.ID == *p.device {
		panic("a bug reached by this agent's heartbeat")
	}
	return p.Store.Heartbeat(ctx, in, done)
}

// Messages are handled on workers, not on net/http's goroutine (whose
// recovery ended only the one connection): a panic handling one agent's
// message still closes only that connection (internal error), logged with
// its stack, and the other agents go on.
func TestPanicClosesOnlyThatConnection(t *testing.T) {
	stores.Run(t, func(t *testing.T, open storetest.Opener) {
		var bad string
		e := newEnv(t, open, func(c *agentlink.Config) { c.Store = panicky{Store: c.Store, device: &bad} })
		var tok string
		bad, tok = e.addDevice("IG-500")
		good, goodTok := e.addDevice("IG-500")
		a, _ := e.connect(tok, hello())
		b, _ := e.connect(goodTok, hello())
		a.heartbeat(protocol.Heartbeat{})
		if ce := a.expectClose(5 * time.Second); ce.Code != websocket.StatusInternalError {
			t.Fatalf("closed with %v, want 1011", ce)
		}
		if !strings.Contains(e.logs.String(), "panic serving an agent connection") {
			t.Error("the panic was not logged")
		}
		b.heartbeat(protocol.Heartbeat{})
		eventually(t, 5*time.Second, func() string {
			if n := e.obs.heartbeatCount(good); n != 1 {
				return fmt.Sprintf("%d heartbeats of the other agent stored, want 1", n)
			}
			return ""
		})
	})
}
