// Package relaystub is a relay stand-in for the agent's tests: a real
// websocket server on loopback that speaks shared/protocol, checks the
// bearer token and subprotocol, stores records by seq (idempotently, like
// the real relay), acknowledges every batch, sends its Commands after
// every welcome and keeps the command statuses, and can push a Config or
// cut every connection. It answers as a relay from before CBOR (its welcome
// names no codec), so agents speak JSON with it. The real relay and the
// real agent meet in test/e2e.
package relaystub

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"

	"github.com/coder/websocket"

	"github.com/fleet/fleet/shared/protocol"
)

// Relay is the stub. Its fields are guarded by Mu.
type Relay struct {
	Token string
	URL   string
	srv   *httptest.Server

	Mu         sync.Mutex
	Hellos     []protocol.Hello
	Heartbeats []protocol.Heartbeat
	Records    map[uint64]protocol.Record
	Received   map[uint64]int
	Applied    []protocol.ConfigApplied
	// Commands are sent after every welcome, as a relay sends the
	// device's unfinished commands; Statuses are the command statuses
	// received.
	Commands []protocol.Command
	Statuses []protocol.CommandStatus
	conns    []*websocket.Conn
}

// Start starts a stub accepting token on a loopback port.
func Start(token string) *Relay {
	r := &Relay{Token: token, Records: map[uint64]protocol.Record{}, Received: map[uint64]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	r.URL = r.srv.URL
	return r
}

// Close stops the server.
func (r *Relay) Close() {
	r.Drop()
	r.srv.Close()
}

// Accept answers req as a relay's agent endpoint does before the hello:
// 404 off protocol.Path, 401 with WWW-Authenticate unless token is the
// request's bearer token, a protocol-error close without the protocol's
// subprotocol; else it returns the websocket, with the protocol's read
// limit, for the caller to serve and close. It returns nil when it
// answered the request itself.
func Accept(w http.ResponseWriter, req *http.Request, token string) *websocket.Conn {
	if req.URL.Path != protocol.Path {
		http.NotFound(w, req)
		return nil
	}
	if req.Header.Get("Authorization") != "Bearer "+token {
		w.Header().Set("WWW-Authenticate", "Bearer")
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return nil
	}
	c, err := websocket.Accept(w, req, &websocket.AcceptOptions{Subprotocols: []string{protocol.Subprotocol}})
	if err != nil {
		return nil
	}
	if c.Subprotocol() != protocol.Subprotocol {
		c.Close(protocol.CloseProtocolError, "subprotocol required")
		return nil
	}
	c.SetReadLimit(protocol.MaxMessageBytes)
	return c
}

func (r *Relay) serve(w http.ResponseWriter, req *http.Request) {
	c := Accept(w, req, r.Token)
	if c == nil {
		return
	}
	defer c.CloseNow()
	ctx := req.Context()
	r.Mu.Lock()
	r.conns = append(r.conns, c)
	r.Mu.Unlock()
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		var m protocol.Message
		if err := json.Unmarshal(b, &m); err != nil {
			c.Close(protocol.CloseProtocolError, "malformed")
			return
		}
		var reply *protocol.Message
		var cmds []protocol.Command
		r.Mu.Lock()
		switch {
		case m.Type == protocol.TypeHello && m.Hello != nil:
			r.Hellos = append(r.Hellos, *m.Hello)
			reply = &protocol.Message{Type: protocol.TypeWelcome, Welcome: &protocol.Welcome{DeviceID: "dev-stub", LastSeq: r.lastSeqLocked()}}
			cmds = append(cmds, r.Commands...)
		case m.Type == protocol.TypeCommandStatus && m.CommandStatus != nil && protocol.CheckCommandStatus(m.CommandStatus) == nil:
			r.Statuses = append(r.Statuses, *m.CommandStatus)
		case m.Type == protocol.TypeHeartbeat && m.Heartbeat != nil:
			r.Heartbeats = append(r.Heartbeats, *m.Heartbeat)
		case m.Type == protocol.TypeConfigApplied && m.ConfigApplied != nil:
			r.Applied = append(r.Applied, *m.ConfigApplied)
		case m.Type == protocol.TypeRecords && m.Records != nil && len(m.Records.Items) > 0:
			for _, it := range m.Records.Items {
				r.Received[it.Seq]++
				r.Records[it.Seq] = it
			}
			reply = &protocol.Message{Type: protocol.TypeAck, Ack: &protocol.Ack{Seq: m.Records.Items[len(m.Records.Items)-1].Seq}}
		default:
			r.Mu.Unlock()
			c.Close(protocol.CloseProtocolError, "unexpected "+m.Type)
			return
		}
		r.Mu.Unlock()
		if reply != nil {
			b, _ := json.Marshal(reply)
			if c.Write(ctx, websocket.MessageText, b) != nil {
				return
			}
		}
		for i := range cmds {
			b, _ := json.Marshal(protocol.Message{Type: protocol.TypeCommand, Command: &cmds[i]})
			if c.Write(ctx, websocket.MessageText, b) != nil {
				return
			}
		}
	}
}

func (r *Relay) lastSeqLocked() uint64 {
	var m uint64
	for s := range r.Records {
		m = max(m, s)
	}
	return m
}

// Push sends cfg on the newest connection.
func (r *Relay) Push(cfg protocol.Config) error {
	r.Mu.Lock()
	if len(r.conns) == 0 {
		r.Mu.Unlock()
		return http.ErrServerClosed
	}
	c := r.conns[len(r.conns)-1]
	r.Mu.Unlock()
	b, _ := json.Marshal(protocol.Message{Type: protocol.TypeConfig, Config: &cfg})
	return c.Write(context.Background(), websocket.MessageText, b)
}

// Drop cuts every connection without a close handshake.
func (r *Relay) Drop() {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	for _, c := range r.conns {
		c.CloseNow()
	}
	r.conns = nil
}

// Events returns the stored events of type typ (every type when ""), in seq order.
func (r *Relay) Events(typ string) []protocol.Event {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	var out []protocol.Event
	for _, s := range r.seqsLocked() {
		if e := r.Records[s].Event; e != nil && (typ == "" || e.Type == typ) {
			out = append(out, *e)
		}
	}
	return out
}

// Metrics returns the number of stored metric samples.
func (r *Relay) Metrics() int {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	n := 0
	for _, rec := range r.Records {
		if rec.Metric != nil {
			n++
		}
	}
	return n
}

// Seqs returns the stored sequence numbers, ascending.
func (r *Relay) Seqs() []uint64 {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	return r.seqsLocked()
}

func (r *Relay) seqsLocked() []uint64 {
	out := make([]uint64, 0, len(r.Records))
	for s := range r.Records {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// LastHeartbeat returns the newest heartbeat (zero before one).
func (r *Relay) LastHeartbeat() protocol.Heartbeat {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if len(r.Heartbeats) == 0 {
		return protocol.Heartbeat{}
	}
	return r.Heartbeats[len(r.Heartbeats)-1]
}

// HelloCount returns the number of sessions opened.
func (r *Relay) HelloCount() int {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	return len(r.Hellos)
}

// StatusesOf returns the command statuses received for command id, in
// order.
func (r *Relay) StatusesOf(id string) []protocol.CommandStatus {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	var out []protocol.CommandStatus
	for _, st := range r.Statuses {
		if st.ID == id {
			out = append(out, st)
		}
	}
	return out
}

// HeartbeatStatuses returns the heartbeats' statuses, in order.
func (r *Relay) HeartbeatStatuses() []string {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	out := make([]string, len(r.Heartbeats))
	for i, h := range r.Heartbeats {
		out[i] = string(h.Status)
	}
	return out
}
