package link

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fleet/fleet/agent/spool"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/logbuf"
	"github.com/fleet/fleet/test/rig/relaystub"
	"github.com/fleet/fleet/test/rig/testwait"
)

const testToken = "dev_tok_s3cr3t-value"

// relay is an in-test relay stub speaking shared/protocol over a real
// websocket on loopback. It stores records by seq (idempotently, as the real
// relay must) and acknowledges each batch unless told not to.
type relay struct {
	t   *testing.T
	srv *httptest.Server

	mu          sync.Mutex
	stored      map[uint64]protocol.Record
	received    map[uint64]int // how often each seq arrived
	batches     []int
	hellos      []protocol.Hello
	heartbeats  []protocol.Heartbeat
	applied     []protocol.ConfigApplied
	conns       int
	noAck       bool
	dropAfter   int // close the connection after this many batches (0: never)
	sendConfig  *protocol.Config
	refuse      bool
	unacked     int // max Records messages seen without an ack in between
	outstanding int
	authSeen    []string
	active      []*websocket.Conn
	stall       bool   // stop reading after Welcome (a half-open peer)
	poison      uint64 // a batch holding this seq is refused with 4000
	refusals    int
	// old makes the stub a relay from before CBOR: its welcome names no
	// codec, whatever the hello offers. codecs are the codecs of its
	// connections, in order.
	old    bool
	codecs []protocol.Codec
	// commands are sent after the welcome (and config) of every
	// connection; statuses are the command statuses received.
	commands []protocol.Command
	statuses []protocol.CommandStatus
}

// dropAll cuts every open connection without a close handshake.
func (r *relay) dropAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.active {
		c.CloseNow()
	}
	r.active = nil
}

func newRelay(t *testing.T) *relay {
	r := &relay{t: t, stored: map[uint64]protocol.Record{}, received: map[uint64]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *relay) lastSeq() uint64 {
	var m uint64
	for s := range r.stored {
		m = max(m, s)
	}
	return m
}

func (r *relay) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.authSeen = append(r.authSeen, req.Header.Get("Authorization"))
	refuse := r.refuse
	r.mu.Unlock()
	accepted := testToken
	if refuse {
		accepted = "" // the relay no longer knows the device's token
	}
	c := relaystub.Accept(w, req, accepted)
	if c == nil {
		return
	}
	defer c.CloseNow()
	ctx := req.Context()
	codec := protocol.JSON // until the welcome
	read := func() (protocol.Message, error) {
		typ, b, err := c.Read(ctx)
		if err != nil {
			return protocol.Message{}, err
		}
		if typ != frameType(codec) {
			return protocol.Message{}, fmt.Errorf("a %v frame on a connection speaking %s", typ, codec)
		}
		var m protocol.Message
		err = codec.Unmarshal(b, &m)
		return m, err
	}
	send := func(m protocol.Message) error {
		b, _ := codec.Marshal(&m)
		return c.Write(ctx, frameType(codec), b)
	}
	m, err := read()
	if err != nil || m.Type != protocol.TypeHello {
		c.Close(protocol.CloseProtocolError, "hello first")
		return
	}
	r.mu.Lock()
	r.active = append(r.active, c)
	r.conns++
	r.hellos = append(r.hellos, *m.Hello)
	last := r.lastSeq()
	cfg := r.sendConfig
	cmds := slices.Clone(r.commands)
	r.outstanding = 0
	chosen := protocol.ChooseCodec(m.Hello.Codecs)
	if r.old {
		chosen = protocol.JSON
	}
	r.codecs = append(r.codecs, chosen)
	r.mu.Unlock()
	wel := &protocol.Welcome{DeviceID: "dev1", ServerTime: resource.T(time.Now()), LastSeq: last}
	if chosen != protocol.JSON {
		wel.Codec = chosen
	}
	send(protocol.Message{Type: protocol.TypeWelcome, Welcome: wel})
	codec = chosen
	if cfg != nil {
		send(protocol.Message{Type: protocol.TypeConfig, Config: cfg})
	}
	for i := range cmds {
		send(protocol.Message{Type: protocol.TypeCommand, Command: &cmds[i]})
	}
	r.mu.Lock()
	stall := r.stall
	r.stall = false
	r.mu.Unlock()
	if stall {
		<-ctx.Done() // no reads: pings go unanswered
		return
	}
	batches := 0
	for {
		m, err := read()
		if err != nil {
			return
		}
		switch m.Type {
		case protocol.TypeHeartbeat:
			r.mu.Lock()
			r.heartbeats = append(r.heartbeats, *m.Heartbeat)
			r.mu.Unlock()
		case protocol.TypeConfigApplied:
			r.mu.Lock()
			r.applied = append(r.applied, *m.ConfigApplied)
			r.mu.Unlock()
		case protocol.TypeCommandStatus:
			if protocol.CheckCommandStatus(m.CommandStatus) != nil {
				c.Close(protocol.CloseProtocolError, "commandStatus out of bounds")
				return
			}
			r.mu.Lock()
			r.statuses = append(r.statuses, *m.CommandStatus)
			r.mu.Unlock()
		case protocol.TypeRecords:
			items := m.Records.Items
			r.mu.Lock()
			refuse := false
			for _, it := range items {
				refuse = refuse || (r.poison != 0 && it.Seq == r.poison) || (it.Metric == nil && it.Event == nil)
			}
			if refuse {
				r.refusals++
				r.mu.Unlock()
				c.Close(protocol.CloseProtocolError, "records.items: capturedAt out of range")
				return
			}
			r.batches = append(r.batches, len(items))
			for _, it := range items {
				r.received[it.Seq]++
				r.stored[it.Seq] = it
			}
			r.outstanding++
			r.unacked = max(r.unacked, r.outstanding)
			noAck := r.noAck
			batches++
			drop := r.dropAfter > 0 && batches >= r.dropAfter
			if drop {
				r.dropAfter = 0
			}
			r.mu.Unlock()
			if drop {
				c.CloseNow() // stored, but the ack never goes out
				return
			}
			if !noAck {
				r.mu.Lock()
				r.outstanding = 0
				r.mu.Unlock()
				send(protocol.Message{Type: protocol.TypeAck, Ack: &protocol.Ack{Seq: items[len(items)-1].Seq}})
			}
		default:
			c.Close(protocol.CloseProtocolError, "unexpected "+m.Type)
			return
		}
	}
}

func (r *relay) storedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.stored)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, what, 10*time.Second, cond)
}

// calls keeps the values a callback of the link was given (from the
// link's goroutine) for the test to read.
type calls[T any] struct {
	mu  sync.Mutex
	got []T
}

func (c *calls[T]) add(v T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, v)
}

func (c *calls[T]) list() []T {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

// openSpool opens a spool in a temporary directory, closed when the test
// ends (after the link the test started).
func openSpool(t *testing.T) *spool.Spool {
	t.Helper()
	sp, err := spool.Open(spool.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	return sp
}

func fillSpool(t *testing.T, sp *spool.Spool, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		var rec protocol.Record
		if i%2 == 0 {
			rec.Metric = &resource.MetricSample{CapturedAt: resource.T(time.Unix(int64(i), 0)), CPUPct: float64(i)}
		} else {
			rec.Event = &protocol.Event{ID: fmt.Sprintf("ev%d", i), Type: protocol.EventSerialError, Severity: resource.SeverityError,
				Message: "m", Data: json.RawMessage(`{"n":` + fmt.Sprint(i) + `}`), CreatedAt: resource.T(time.Unix(int64(i), 0))}
		}
		b, err := EncodeRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sp.Append(b); err != nil {
			t.Fatal(err)
		}
	}
}

type harness struct {
	sp     *spool.Spool
	link   *Link
	logs   *logbuf.Buffer
	cancel context.CancelFunc
	done   chan struct{}
}

func startLink(t *testing.T, r *relay, sp *spool.Spool, mod func(*Options)) *harness {
	t.Helper()
	if sp == nil {
		sp = openSpool(t)
	}
	logs := &logbuf.Buffer{}
	opts := Options{
		URL:   r.srv.URL,
		Token: testToken,
		Spool: sp,
		Hello: func() protocol.Hello { return protocol.Hello{AgentVersion: "test", Model: "IG-500", AppliedVersion: 0} },
		Heartbeat: func() protocol.Heartbeat {
			return protocol.Heartbeat{Status: resource.StatusOnline, IPAddress: "10.0.0.5"}
		},
		HeartbeatInterval: time.Hour,
		BackoffMin:        5 * time.Millisecond,
		BackoffMax:        50 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mod != nil {
		mod(&opts)
	}
	l, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{sp: sp, link: l, logs: logs, cancel: cancel, done: make(chan struct{})}
	go func() { l.Run(ctx); close(h.done) }()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) stop() {
	h.cancel()
	<-h.done
}

// TestHandshakeHeartbeatAndRecords runs with the codec each side speaks:
// CBOR between a current agent and relay, JSON with a relay from before
// CBOR, and JSON for an agent that offers nothing (JSONOnly, as agents
// from before CBOR).
func TestHandshakeHeartbeatAndRecords(t *testing.T) {
	for _, tc := range []struct {
		name      string
		oldRelay  bool
		jsonOnly  bool
		want      protocol.Codec
		wantOffer []protocol.Codec
	}{
		{"cbor", false, false, protocol.CBOR, []protocol.Codec{protocol.CBOR}},
		{"relay from before cbor", true, false, protocol.JSON, []protocol.Codec{protocol.CBOR}},
		{"json-only agent", false, true, protocol.JSON, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRelay(t)
			r.old = tc.oldRelay
			testHandshakeHeartbeatAndRecords(t, r, func(o *Options) { o.JSONOnly = tc.jsonOnly })
			r.mu.Lock()
			defer r.mu.Unlock()
			if !slices.Equal(r.codecs, []protocol.Codec{tc.want}) || !slices.Equal(r.hellos[0].Codecs, tc.wantOffer) {
				t.Errorf("hello offered %v, connection spoke %v; want %v and %v", r.hellos[0].Codecs, r.codecs, tc.wantOffer, tc.want)
			}
		})
	}
}

func testHandshakeHeartbeatAndRecords(t *testing.T, r *relay, mod func(*Options)) {
	sp := openSpool(t)
	fillSpool(t, sp, 1, 1234)
	h := startLink(t, r, sp, mod)
	eventually(t, "all records stored", func() bool { return r.storedCount() == 1234 })
	eventually(t, "spool emptied", func() bool { return sp.Stats().Pending == 0 })

	r.mu.Lock()
	defer r.mu.Unlock()
	for seq := uint64(1); seq <= 1234; seq++ {
		if r.received[seq] != 1 {
			t.Fatalf("seq %d received %d times", seq, r.received[seq])
		}
		rec := r.stored[seq]
		if seq%2 == 0 && (rec.Metric == nil || rec.Metric.CPUPct != float64(seq)) {
			t.Fatalf("seq %d: %+v", seq, rec)
		}
		if seq%2 == 1 && (rec.Event == nil || rec.Event.ID != fmt.Sprintf("ev%d", seq)) {
			t.Fatalf("seq %d: %+v", seq, rec)
		}
	}
	for _, n := range r.batches {
		if n > protocol.MaxBatch {
			t.Fatalf("batch of %d records", n)
		}
	}
	if len(r.hellos) != 1 || r.hellos[0].HeartbeatInterval.Duration != time.Hour || r.hellos[0].Model != "IG-500" {
		t.Fatalf("hellos = %+v", r.hellos)
	}
	if len(r.heartbeats) < 1 || r.heartbeats[0].Status != resource.StatusOnline || r.heartbeats[0].IPAddress != "10.0.0.5" || r.heartbeats[0].Channels == nil {
		t.Fatalf("heartbeats = %+v", r.heartbeats)
	}
	if !h.link.Connected() || h.link.DeviceID() != "dev1" {
		t.Fatal("link not connected")
	}
}

func TestStreamsNewRecordsAndHeartbeats(t *testing.T) {
	r := newRelay(t)
	h := startLink(t, r, nil, func(o *Options) { o.HeartbeatInterval = 20 * time.Millisecond })
	eventually(t, "connected", h.link.Connected)
	fillSpool(t, h.sp, 1, 3)
	eventually(t, "new records", func() bool { return r.storedCount() == 3 })
	eventually(t, "several heartbeats", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.heartbeats) >= 3 })
}

func TestWindowBoundsUnackedBatches(t *testing.T) {
	r := newRelay(t)
	r.noAck = true
	sp := openSpool(t)
	fillSpool(t, sp, 1, 50)
	startLink(t, r, sp, func(o *Options) { o.BatchSize = 5; o.Window = 3 })
	eventually(t, "window filled", func() bool { return r.storedCount() == 15 })
	time.Sleep(100 * time.Millisecond)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.stored) != 15 || r.unacked != 3 {
		t.Fatalf("sent %d records in %d unacked batches; want 15 in 3", len(r.stored), r.unacked)
	}
	if sp.Stats().Pending != 50 {
		t.Fatalf("records dropped without an ack: pending %d", sp.Stats().Pending)
	}
}

// The relay stores a batch but the link drops before the ack: after the
// reconnect the Welcome's LastSeq tells the agent, which sends only the rest.
func TestReconnectAfterLostAck(t *testing.T) {
	r := newRelay(t)
	r.dropAfter = 2
	sp := openSpool(t)
	fillSpool(t, sp, 1, 40)
	startLink(t, r, sp, func(o *Options) { o.BatchSize = 10; o.Window = 1 })
	eventually(t, "all stored", func() bool { return r.storedCount() == 40 })
	eventually(t, "spool emptied", func() bool { return sp.Stats().Pending == 0 })
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns != 2 {
		t.Fatalf("%d connections, want 2", r.conns)
	}
	for seq, n := range r.received {
		if n != 1 {
			t.Fatalf("seq %d sent %d times", seq, n)
		}
	}
}

// Records the relay never saw are resent after a reconnect.
func TestUnackedResentAfterDrop(t *testing.T) {
	r := newRelay(t)
	r.noAck = true
	sp := openSpool(t)
	fillSpool(t, sp, 1, 10)
	h := startLink(t, r, sp, nil)
	eventually(t, "sent", func() bool { return r.storedCount() == 10 })
	// Forget them (as a relay crash before commit would) and cut the link.
	r.mu.Lock()
	r.stored = map[uint64]protocol.Record{}
	r.noAck = false
	r.mu.Unlock()
	r.dropAll()
	eventually(t, "resent", func() bool { return r.storedCount() == 10 })
	eventually(t, "acked", func() bool { return h.sp.Stats().Pending == 0 })
}

func TestConfigApplied(t *testing.T) {
	r := newRelay(t)
	r.sendConfig = &protocol.Config{Version: 7, Enabled: true, Mode: "managed"}
	var got calls[int64]
	startLink(t, r, nil, func(o *Options) {
		o.OnConfig = func(ctx context.Context, c protocol.Config) protocol.ConfigApplied {
			got.add(c.Version)
			return protocol.ConfigApplied{Version: c.Version, Error: "rs485-1: crc error"}
		}
	})
	eventually(t, "config applied", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.applied) == 1 })
	// The heartbeat after the config reports the new state at once.
	eventually(t, "heartbeat after config", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.heartbeats) >= 2 })
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.applied[0].Version != 7 || r.applied[0].Error != "rs485-1: crc error" {
		t.Fatalf("applied = %+v", r.applied)
	}
	if l := got.list(); !slices.Equal(l, []int64{7}) {
		t.Fatalf("OnConfig got %v", l)
	}
}

func TestRefusedTokenRetriesAndIsNotLogged(t *testing.T) {
	r := newRelay(t)
	r.refuse = true
	h := startLink(t, r, nil, nil)
	eventually(t, "retries", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.authSeen) >= 3 })
	if h.link.Connected() {
		t.Fatal("connected with a refused token")
	}
	r.mu.Lock()
	r.refuse = false
	r.mu.Unlock()
	eventually(t, "connects once accepted", h.link.Connected)
	h.stop()
	logs := h.logs.String()
	if bytes.Contains([]byte(logs), []byte(testToken)) {
		t.Fatalf("token in logs:\n%s", logs)
	}
	if !bytes.Contains([]byte(logs), []byte("token refused")) {
		t.Fatalf("refusal not logged:\n%s", logs)
	}
}

func TestDrainOnStop(t *testing.T) {
	r := newRelay(t)
	// A window wide enough for one batch per record: the relay holds its
	// acks, and a full window would (rightly) stop the link sending.
	h := startLink(t, r, nil, func(o *Options) { o.Window = 16 })
	eventually(t, "connected", h.link.Connected)
	r.mu.Lock()
	r.noAck = true // hold acks so records are still pending at stop
	r.mu.Unlock()
	fillSpool(t, h.sp, 1, 5)
	eventually(t, "sent", func() bool { return r.storedCount() == 5 })
	r.mu.Lock()
	r.noAck = false
	r.mu.Unlock()
	fillSpool(t, h.sp, 6, 1) // e.g. agent.stopped, spooled just before stop
	h.stop()
	if r.storedCount() != 6 {
		t.Fatalf("stored %d after drain, want 6", r.storedCount())
	}
	// The final record's ack arrived before Run returned.
	if st := h.sp.Stats(); st.Acked != 6 {
		t.Fatalf("acked through %d after drain", st.Acked)
	}
}

func TestStopWhileDisconnectedIsPrompt(t *testing.T) {
	h := startLink(t, &relay{srv: httptest.NewServer(http.NotFoundHandler())}, nil, nil)
	time.Sleep(30 * time.Millisecond)
	start := time.Now()
	h.stop()
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("stop took %v", d)
	}
}

func TestBackoff(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 40; n++ {
		ceil := min(time.Second<<min(n, 20), 60*time.Second)
		seen := map[time.Duration]bool{}
		for i := 0; i < 200; i++ {
			d := Backoff(n, time.Second, 60*time.Second, r)
			if d < 0 || d > ceil {
				t.Fatalf("attempt %d: %v outside [0, %v]", n, d, ceil)
			}
			seen[d] = true
		}
		if len(seen) < 100 {
			t.Fatalf("attempt %d: no jitter (%d distinct values)", n, len(seen))
		}
	}
}

func TestEncodeRecords(t *testing.T) {
	b, _ := EncodeRecord(protocol.Record{Metric: &resource.MetricSample{CPUPct: 12.5}})
	msg := EncodeRecords([]spool.Entry{{Seq: 41, Payload: b}, {Seq: 42, Payload: b}})
	var m protocol.Message
	if err := json.Unmarshal(msg, &m); err != nil {
		t.Fatalf("%s: %v", msg, err)
	}
	if m.Type != protocol.TypeRecords || len(m.Records.Items) != 2 || m.Records.Items[1].Seq != 42 || m.Records.Items[1].Metric.CPUPct != 12.5 {
		t.Fatalf("decoded %+v", m)
	}
	if _, err := EncodeRecord(protocol.Record{}); err == nil {
		t.Fatal("empty record encoded")
	}
}

// A relay that stops answering (half-open connection) is detected by the
// ping deadline and the link reconnects.
func TestPingTimeoutReconnects(t *testing.T) {
	r := newRelay(t)
	r.stall = true
	h := startLink(t, r, nil, func(o *Options) { o.PingInterval = 50 * time.Millisecond; o.PongTimeout = 100 * time.Millisecond })
	eventually(t, "second session", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.conns == 2 })
	if !bytes.Contains([]byte(h.logs.String()), []byte("ping")) {
		t.Fatalf("ping failure not logged:\n%s", h.logs.String())
	}
}

// A relay closing with 4003 (token revoked mid-session) is treated as a
// refused token.
func TestCloseUnauthorized(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c := relaystub.Accept(w, req, testToken)
		if c == nil {
			return
		}
		defer c.CloseNow()
		c.Read(req.Context()) // hello
		c.Close(protocol.CloseUnauthorized, "token revoked")
	}))
	defer srv.Close()
	h := startLink(t, &relay{srv: srv}, nil, nil)
	eventually(t, "refusal logged", func() bool { return bytes.Contains([]byte(h.logs.String()), []byte("token refused")) })
}

// A link stopped while it waits to reconnect makes one last attempt and
// flushes the spool (agent.stopped) when the relay answers.
func TestFinalAttemptWhenDisconnected(t *testing.T) {
	r := newRelay(t)
	r.refuse = true
	h := startLink(t, r, nil, func(o *Options) { o.BackoffMin = time.Hour; o.BackoffMax = time.Hour })
	eventually(t, "refused attempt", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.authSeen) == 1 })
	r.mu.Lock()
	r.refuse = false
	r.mu.Unlock()
	fillSpool(t, h.sp, 1, 3)
	h.stop()
	if r.storedCount() != 3 || h.sp.Stats().Pending != 0 {
		t.Fatalf("final attempt stored %d, pending %d", r.storedCount(), h.sp.Stats().Pending)
	}
}

// drain runs a link on sp until r holds stored records and sp is empty
// (the refused records dropped); it returns those OnRefused was called with.
func drain(t *testing.T, r *relay, sp *spool.Spool, stored int) (refused []uint64) {
	t.Helper()
	var c calls[uint64]
	startLink(t, r, sp, func(o *Options) { o.OnRefused = c.add })
	eventually(t, fmt.Sprintf("the other %d stored", stored), func() bool { return r.storedCount() == stored })
	eventually(t, "spool emptied", func() bool { return sp.Stats().Pending == 0 })
	return c.list()
}

// A record the relay refuses (close 4000) is found by sending one record at
// a time and dropped after two refusals; everything else gets through.
func TestPoisonRecordDropped(t *testing.T) {
	r := newRelay(t)
	r.poison = 7
	sp := openSpool(t)
	fillSpool(t, sp, 1, 20)
	refused := drain(t, r, sp, 19)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.stored[7]; ok {
		t.Fatal("poison record stored")
	}
	if r.refusals != 3 { // the first batch, then record 7 alone twice
		t.Fatalf("%d refusals, want 3", r.refusals)
	}
	if !slices.Equal(refused, []uint64{7}) {
		t.Fatalf("OnRefused got %v", refused)
	}
}

// TestWelcomeWithACodecNotOffered: a relay that answers with a codec the
// hello did not offer gets a protocol-error close, and the agent keeps
// trying.
func TestWelcomeWithACodecNotOffered(t *testing.T) {
	var conns atomic.Int32
	var stopping atomic.Bool // the link is being stopped: its last connection may just end
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c := relaystub.Accept(w, req, testToken)
		if c == nil {
			return
		}
		defer c.CloseNow()
		conns.Add(1)
		if _, _, err := c.Read(req.Context()); err != nil {
			return
		}
		c.Write(req.Context(), websocket.MessageText, []byte(`{"type":"welcome","welcome":{"deviceId":"dev1","codec":"msgpack"}}`))
		_, _, err := c.Read(req.Context())
		if websocket.CloseStatus(err) != protocol.CloseProtocolError && !stopping.Load() {
			t.Errorf("agent ended with %v, want a protocol-error close", err)
		}
	}))
	defer srv.Close()
	h := startLink(t, &relay{srv: srv}, nil, func(o *Options) { o.BackoffMin, o.BackoffMax = time.Millisecond, 10*time.Millisecond })
	defer func() {
		stopping.Store(true)
		h.stop()
	}()
	eventually(t, "retried", func() bool { return conns.Load() >= 2 })
	if h.link.Connected() {
		t.Error("link connected on a codec it did not offer")
	}
}

// TestUndecodableSpoolRecordDroppedInCBOR: in CBOR the link decodes each
// spooled payload; one that does not decode goes empty, the relay refuses
// it, and the poison-record handling drops it alone, as with JSON.
func TestUndecodableSpoolRecordDroppedInCBOR(t *testing.T) {
	r := newRelay(t)
	sp := openSpool(t)
	fillSpool(t, sp, 1, 4)
	if _, err := sp.Append([]byte(`{"metric":`)); err != nil {
		t.Fatal(err)
	}
	fillSpool(t, sp, 6, 4)
	refused := drain(t, r, sp, 8)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.stored[5]; ok || !slices.Equal(refused, []uint64{5}) || !slices.Equal(r.codecs[:1], []protocol.Codec{protocol.CBOR}) {
		t.Fatalf("refused %v, codecs %v", refused, r.codecs)
	}
}

// TestInvalidUTF8ReachesTheRelayReplaced: a channel's live value with
// invalid UTF-8 (a serial line's bytes) reaches a relay speaking CBOR with
// U+FFFD in their place, as JSON's encoder does, instead of a message the
// relay's decoder refuses on every reconnect.
func TestInvalidUTF8ReachesTheRelayReplaced(t *testing.T) {
	r := newRelay(t)
	startLink(t, r, nil, func(o *Options) {
		o.Heartbeat = func() protocol.Heartbeat {
			return protocol.Heartbeat{Status: resource.StatusOnline, Channels: []protocol.ChannelState{{ID: "uart-1", Live: "ok \xff\xfebad"}}}
		}
	})
	eventually(t, "a heartbeat", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.heartbeats) > 0 })
	r.mu.Lock()
	defer r.mu.Unlock()
	if got := r.heartbeats[0].Channels[0].Live; got != "ok \uFFFDbad" || r.codecs[0] != protocol.CBOR {
		t.Errorf("live %q over %v", got, r.codecs)
	}
}

// cluster is two relays of one cluster: two listeners in front of the same
// relay stub (one store), each of which can be taken down (503 to every
// request, as a draining or dead relay's balancer slot would be).
type cluster struct {
	r    *relay
	srv  [2]*httptest.Server
	down [2]atomic.Bool
	hits [2]atomic.Int64
}

func newCluster(t *testing.T) *cluster {
	c := &cluster{r: newRelay(t)}
	for i := range c.srv {
		c.srv[i] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if c.down[i].Load() {
				http.Error(w, "draining", http.StatusServiceUnavailable)
				return
			}
			c.hits[i].Add(1)
			c.r.serve(w, req)
		}))
		t.Cleanup(c.srv[i].Close)
	}
	return c
}

// closeAll closes every open connection with code (as a draining relay
// does with 1012).
func (r *relay) closeAll(code websocket.StatusCode) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.active {
		c.Close(code, "relay shutting down")
	}
	r.active = nil
}

// TestFailoverToNextRelay: with several relay URLs, the link moves to the
// next one when its relay drains (1012) or is down, comes back around the
// list, and every spooled record reaches the store exactly once.
func TestFailoverToNextRelay(t *testing.T) {
	c := newCluster(t)
	sp := openSpool(t)
	fillSpool(t, sp, 1, 20)
	h := startLink(t, c.r, sp, func(o *Options) {
		o.URL = ""
		o.URLs = []string{c.srv[0].URL, c.srv[1].URL}
		o.BatchSize = 5
	})
	eventually(t, "stored through relay 1", func() bool { return c.r.storedCount() == 20 })
	if c.hits[0].Load() != 1 || c.hits[1].Load() != 0 {
		t.Fatalf("connections %d/%d, want the first relay only", c.hits[0].Load(), c.hits[1].Load())
	}

	// Relay 1 drains: it leaves the balancer and asks its agents to go.
	c.down[0].Store(true)
	c.r.closeAll(protocol.CloseServiceRestart)
	eventually(t, "moved to relay 2", func() bool { return c.hits[1].Load() == 1 && h.link.Connected() })
	fillSpool(t, sp, 21, 20)
	eventually(t, "stored through relay 2", func() bool { return c.r.storedCount() == 40 })
	eventually(t, "acknowledged", func() bool { return sp.Stats().Pending == 0 })

	// Relay 2 dies while relay 1 is back: the link goes around the list.
	c.down[0].Store(false)
	c.down[1].Store(true)
	c.r.dropAll()
	eventually(t, "back on relay 1", func() bool { return c.hits[0].Load() == 2 && h.link.Connected() })
	fillSpool(t, sp, 41, 20)
	eventually(t, "stored through relay 1 again", func() bool { return c.r.storedCount() == 60 })
	eventually(t, "spool emptied", func() bool { return sp.Stats().Pending == 0 })

	c.r.mu.Lock()
	for seq := uint64(1); seq <= 60; seq++ {
		if n := c.r.received[seq]; n != 1 {
			t.Errorf("seq %d received %d times", seq, n)
		}
	}
	c.r.mu.Unlock()
	for _, want := range []string{"relay draining; reconnecting", "relay link down"} {
		if !strings.Contains(h.logs.String(), want) {
			t.Errorf("log lacks %q", want)
		}
	}
}
