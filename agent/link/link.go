// Package link keeps the agent's one websocket to the relay
// (shared/protocol): it says Hello, sends heartbeats, streams the spool's
// records in acknowledged batches, and hands configurations to the channel
// manager. It reconnects with capped exponential backoff and full jitter.
//
// Records leave the spool only when the relay acknowledges them (Ack, or
// Welcome.LastSeq after a reconnect), so a dropped link, a relay restart or
// a kill -9 of either side resends what was not stored and nothing else.
package link

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/fleet/fleet/agent/spool"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/tick"
)

// Options configures a Link.
type Options struct {
	// URL is the relay's base URL (http, https, ws or wss); the websocket
	// path protocol.Path is appended.
	URL string
	// URLs are more relays of the same cluster (one store). The link starts
	// with URL (or URLs[0] when URL is empty) and moves to the next one,
	// in turn, each time a connection fails or a relay drains; the backoff
	// between attempts is the usual one.
	URLs []string
	// Token is the device token, sent as a bearer token. It is never logged.
	Token string
	// Hello returns the Hello for a new connection.
	Hello func() protocol.Hello
	// Heartbeat returns the current heartbeat (At is set by the link).
	Heartbeat func() protocol.Heartbeat
	// HeartbeatInterval is the heartbeat period (default 30s).
	HeartbeatInterval time.Duration
	// Spool holds the records to send. Payloads are JSON objects of a
	// protocol.Record without seq (see EncodeRecord).
	Spool *spool.Spool
	// OnConfig applies a configuration and returns the outcome to report.
	OnConfig func(ctx context.Context, cfg protocol.Config) protocol.ConfigApplied
	// OnCommand, if set, receives each command the relay sends (issue 28);
	// it must not block (the agent runs the command on its own
	// goroutine). Without it a command is answered failed.
	OnCommand func(ctx context.Context, cmd protocol.Command)
	// OnWelcome, if set, is called after each successful handshake.
	OnWelcome func(protocol.Welcome)
	// OnRefused, if set, is called when a record is dropped because the
	// relay refused it twice on its own (see Run).
	OnRefused func(seq uint64)

	// DialTimeout bounds the websocket handshake (default 15s).
	DialTimeout time.Duration
	// HelloTimeout bounds the wait for Welcome (default 15s).
	HelloTimeout time.Duration
	// WriteTimeout bounds each message write (default 10s).
	WriteTimeout time.Duration
	// PingInterval is the websocket ping period (default 30s); a pong later
	// than PongTimeout (default 15s) drops the connection.
	PingInterval time.Duration
	PongTimeout  time.Duration
	// BackoffMin and BackoffMax bound the reconnect delay (default 1s, 60s):
	// attempt n waits a uniform random time in [0, min(max, min·2ⁿ)].
	BackoffMin, BackoffMax time.Duration
	// StableAfter is how long a connection must last for the backoff to
	// start again from BackoffMin (default 60s).
	StableAfter time.Duration
	// Window is the number of unacknowledged Records messages in flight
	// (default 4); BatchSize the records per message (default and at most
	// protocol.MaxBatch).
	Window    int
	BatchSize int
	// DrainTimeout bounds the final flush when Run's context ends while
	// connected (default 3s).
	DrainTimeout time.Duration
	// HTTPClient, if set, dials the websocket (TLS settings, proxies).
	HTTPClient *http.Client
	Logger     *slog.Logger

	// JSONOnly offers no codec in the hello, so the link speaks JSON after
	// the welcome as agents from before CBOR did (tests run such an old
	// agent; see protocol.Codec).
	JSONOnly bool
}

// Link is the agent's connection to the relay.
type Link struct {
	opts Options
	log  *slog.Logger
	kick chan struct{}
	urls []string // URL and URLs, in order
	cur  int      // index in urls of the relay in use (Run's goroutine only)

	mu        sync.Mutex
	connected bool
	deviceID  string
	// sess is the welcomed session (nil when not connected), which
	// SendCommandStatus writes to; relayURL the base URL of the relay of
	// the last welcome.
	sess     *session
	relayURL string
	stats    counters // stats.go

	// Poison-record handling, used by Run's goroutine only. After the relay
	// closes a connection with a protocol error while records were in
	// flight, records up to probeUntil go one at a time; a single record
	// refused twice is dropped.
	probeUntil uint64
	suspect    uint64
	hits       int
	lastBatch  []batch // in flight when the last session ended

	// hbLost is what the clamp last left out of a heartbeat (Run's
	// goroutine only), logged when it changes rather than at every beat.
	hbLost string
}

// batch is one unacknowledged Records message.
type batch struct{ first, last uint64 }

// New returns a Link; Run connects it.
func New(opts Options) (*Link, error) {
	var urls []string
	for _, u := range append([]string{opts.URL}, opts.URLs...) {
		if u != "" {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 || opts.Token == "" {
		return nil, errors.New("link: relay URL and token are required")
	}
	if opts.Spool == nil || opts.Hello == nil || opts.Heartbeat == nil {
		return nil, errors.New("link: spool, hello and heartbeat are required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opts.HeartbeatInterval, 30*time.Second)
	def(&opts.DialTimeout, 15*time.Second)
	def(&opts.HelloTimeout, 15*time.Second)
	def(&opts.WriteTimeout, 10*time.Second)
	def(&opts.PingInterval, 30*time.Second)
	def(&opts.PongTimeout, 15*time.Second)
	def(&opts.BackoffMin, time.Second)
	def(&opts.BackoffMax, 60*time.Second)
	def(&opts.StableAfter, 60*time.Second)
	def(&opts.DrainTimeout, 3*time.Second)
	if opts.Window <= 0 {
		opts.Window = 4
	}
	if opts.BatchSize <= 0 || opts.BatchSize > protocol.MaxBatch {
		opts.BatchSize = protocol.MaxBatch
	}
	if opts.OnConfig == nil {
		opts.OnConfig = func(_ context.Context, c protocol.Config) protocol.ConfigApplied {
			return protocol.ConfigApplied{Version: c.Version}
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Link{opts: opts, log: opts.Logger, kick: make(chan struct{}, 1), urls: urls}, nil
}

// Connected reports whether a session is established (Welcome received).
func (l *Link) Connected() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.connected
}

// DeviceID returns the device id of the last Welcome ("" before one).
func (l *Link) DeviceID() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deviceID
}

// Kick asks for a heartbeat now (after a status or channel change).
func (l *Link) Kick() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Backoff returns the delay before reconnect attempt n (0-based): a uniform
// random duration in [0, min(max, min·2ⁿ)] ("full jitter").
func Backoff(n int, lo, hi time.Duration, r *rand.Rand) time.Duration {
	ceil := hi
	if n < 32 {
		if d := lo << n; d > 0 && d < hi {
			ceil = d
		}
	}
	return time.Duration(r.Int64N(int64(ceil) + 1))
}

// errUnauthorized marks a session the relay refused for the token; it
// deserves the longest backoff.
var errUnauthorized = errors.New("relay refused the device token")

// errDrained ends a session that made its final flush.
var errDrained = errors.New("link stopped after its final flush")

// Run connects and reconnects until ctx ends. When ctx ends during a
// session it makes a last flush of the spool, bounded by DrainTimeout, and
// closes the connection normally. It returns nil after ctx ends.
func (l *Link) Run(ctx context.Context) error {
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x6c696e6b))
	attempt := 0
	for {
		start := time.Now()
		err := l.session(ctx, ctx.Done())
		if ctx.Err() != nil {
			if !errors.Is(err, errDrained) {
				// Stopped while dialling or handshaking.
				l.finalAttempt()
			}
			return nil
		}
		restart := isServiceRestart(err)
		if restart || time.Since(start) >= l.opts.StableAfter {
			// A draining relay asks its agents to go elsewhere now.
			attempt = 0
		}
		wait := Backoff(attempt, l.opts.BackoffMin, l.opts.BackoffMax, r)
		failed := l.urls[l.cur]
		if len(l.urls) > 1 {
			l.cur = (l.cur + 1) % len(l.urls)
		}
		l.stats.reconnects.Add(1)
		refused := l.noteRefusal(err)
		switch {
		case errors.Is(err, errUnauthorized):
			wait = l.opts.BackoffMax/2 + Backoff(0, l.opts.BackoffMax/2, l.opts.BackoffMax/2, r)
			l.log.Error("relay link: token refused; check --token", "retryIn", wait.Round(time.Millisecond))
		case refused:
			wait = Backoff(64, l.opts.BackoffMin, l.opts.BackoffMax, r)
			l.log.Error("relay refused a message as a protocol error", "err", err, "retryIn", wait.Round(time.Millisecond))
		case restart:
			l.log.Info("relay draining; reconnecting", "relay", failed, "next", l.urls[l.cur], "retryIn", wait.Round(time.Millisecond))
		default:
			l.log.Warn("relay link down", "relay", failed, "next", l.urls[l.cur], "err", err, "retryIn", wait.Round(time.Millisecond))
		}
		attempt++
		select {
		case <-ctx.Done():
			l.finalAttempt()
			return nil
		case <-time.After(wait):
		}
	}
}

// noteRefusal looks at how a session ended. A protocol-error close (4000,
// 4001) while records were in flight starts a probe: the records up to the
// last one in flight are then sent one at a time, so the next refusal names
// a single record; a single record refused twice is dropped (a record the
// relay refuses would otherwise be resent forever and block everything
// behind it). It reports whether the session ended with such a close.
func (l *Link) noteRefusal(err error) bool {
	code := websocket.CloseStatus(err)
	if code != protocol.CloseProtocolError && code != protocol.CloseTooLarge {
		return false
	}
	in := l.lastBatch
	switch {
	case len(in) == 0:
		// Something other than records was refused.
	case len(in) == 1 && in[0].first == in[0].last && l.probeUntil >= in[0].last:
		seq := in[0].first
		if seq == l.suspect {
			l.hits++
		} else {
			l.suspect, l.hits = seq, 1
		}
		if l.hits >= 2 {
			l.log.Error("relay refused one record twice on its own; dropping it", "seq", seq)
			if err := l.opts.Spool.Ack(seq); err != nil {
				l.log.Error("spool ack", "err", err)
			}
			l.suspect, l.hits = 0, 0
			if l.opts.OnRefused != nil {
				l.opts.OnRefused(seq)
			}
		}
	default:
		l.probeUntil = max(l.probeUntil, in[len(in)-1].last)
	}
	return true
}

// finalAttempt is the last flush of a stopping agent that was not
// connected: one connection, bounded by DrainTimeout, that sends what the
// spool holds (agent.stopped included) and closes.
func (l *Link) finalAttempt() {
	if l.opts.Spool.Stats().Pending == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.DrainTimeout)
	defer cancel()
	stop := make(chan struct{})
	close(stop)
	if err := l.session(ctx, stop); err != nil && !errors.Is(err, errDrained) {
		l.log.Info("final flush: relay unreachable; records stay spooled", "err", err, "pending", l.opts.Spool.Stats().Pending)
	}
}

// isServiceRestart reports whether a session ended because its relay
// drains (close 1012, or 4010 from relays before it).
func isServiceRestart(err error) bool {
	c := websocket.CloseStatus(err)
	return c == protocol.CloseServiceRestart || c == protocol.CloseShutdown
}

// relay returns the base URL of the relay the link uses or tries next.
// It is meant for Run's goroutine and tests.
func (l *Link) relay() string { return l.urls[l.cur] }

func (l *Link) wsURL() string {
	u := strings.TrimRight(l.relay(), "/")
	switch {
	case strings.HasPrefix(u, "http://"):
		u = "ws://" + strings.TrimPrefix(u, "http://")
	case strings.HasPrefix(u, "https://"):
		u = "wss://" + strings.TrimPrefix(u, "https://")
	}
	return u + protocol.Path
}

// session runs one connection until it fails or stop is closed (then it
// drains). ctx bounds the dial and the handshake.
func (l *Link) session(ctx context.Context, stop <-chan struct{}) error {
	dctx, cancel := context.WithTimeout(ctx, l.opts.DialTimeout)
	hdr := http.Header{}
	hdr.Set("Authorization", "Bearer "+l.opts.Token)
	conn, resp, err := websocket.Dial(dctx, l.wsURL(), &websocket.DialOptions{
		HTTPClient:   l.opts.HTTPClient,
		HTTPHeader:   hdr,
		Subprotocols: []string{protocol.Subprotocol},
	})
	cancel()
	l.lastBatch = l.lastBatch[:0]
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			return errUnauthorized
		}
		return fmt.Errorf("dial %s: %w", l.wsURL(), err)
	}
	defer conn.CloseNow()
	if conn.Subprotocol() != protocol.Subprotocol {
		conn.Close(websocket.StatusPolicyViolation, "subprotocol "+protocol.Subprotocol+" required")
		return fmt.Errorf("relay did not accept subprotocol %s", protocol.Subprotocol)
	}
	conn.SetReadLimit(protocol.MaxMessageBytes)
	s := &session{l: l, conn: conn}
	err = s.run(ctx, stop)
	l.lastBatch = append(l.lastBatch[:0], s.inflight...)
	l.mu.Lock()
	l.connected = false
	l.sess = nil
	l.mu.Unlock()
	if errors.Is(err, errDrained) {
		return err
	}
	switch websocket.CloseStatus(err) {
	case protocol.CloseUnauthorized:
		return errUnauthorized
	case -1:
	default:
		return fmt.Errorf("closed by relay: %w", err)
	}
	return err
}

type session struct {
	l    *Link
	conn *websocket.Conn
	// codec is the codec of the messages after the welcome (JSON before).
	codec protocol.Codec
	// sent is the highest seq written; inflight the unacknowledged Records
	// messages, oldest first.
	sent     uint64
	inflight []batch
	// noRecords is set when the relay's stored sequence leaves the spool
	// no number to give (welcome): records are not sent.
	noRecords bool
}

// write sends m in the session's codec.
func (s *session) write(ctx context.Context, m protocol.Message) error {
	b, err := s.codec.Marshal(&m)
	if err != nil {
		return fmt.Errorf("encode %s: %w", m.Type, err)
	}
	return s.writeRaw(ctx, m.Type, b)
}

// writeRaw sends b, a message of the session's codec.
func (s *session) writeRaw(ctx context.Context, typ string, b []byte) error {
	wctx, cancel := context.WithTimeout(ctx, s.l.opts.WriteTimeout)
	defer cancel()
	if err := s.conn.Write(wctx, frameType(s.codec), b); err != nil {
		return fmt.Errorf("write %s: %w", typ, err)
	}
	return nil
}

// read reads one message of the session's codec.
func (s *session) read(ctx context.Context) (protocol.Message, error) {
	typ, b, err := s.conn.Read(ctx)
	if err != nil {
		return protocol.Message{}, err
	}
	var m protocol.Message
	if typ != frameType(s.codec) {
		s.conn.Close(protocol.CloseProtocolError, "frame type is not that of codec "+s.codec.String())
		return m, fmt.Errorf("relay sent a frame of another type than codec %s's", s.codec)
	}
	if err := s.codec.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("relay sent malformed message: %w", err)
	}
	return m, nil
}

// frameType is the websocket frame type of codec's messages.
func frameType(codec protocol.Codec) websocket.MessageType {
	if codec.Binary() {
		return websocket.MessageBinary
	}
	return websocket.MessageText
}

func (s *session) run(ctx context.Context, stop <-chan struct{}) error {
	l := s.l
	// The session's own context lives past ctx for the drain.
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	hello := l.opts.Hello()
	hello.HeartbeatInterval = protocol.Duration{Duration: l.opts.HeartbeatInterval}
	hello.Codecs = nil
	if !l.opts.JSONOnly {
		hello.Codecs = []protocol.Codec{protocol.CBOR}
	}
	protocol.ClampHello(&hello)
	s.codec = protocol.JSON // the hello and the welcome
	if err := s.write(ctx, protocol.Message{Type: protocol.TypeHello, Hello: &hello}); err != nil {
		return err
	}
	hctx, hcancel := context.WithTimeout(ctx, l.opts.HelloTimeout)
	m, err := s.read(hctx)
	hcancel()
	if err != nil {
		return fmt.Errorf("waiting for welcome: %w", err)
	}
	if m.Type != protocol.TypeWelcome || m.Welcome == nil {
		s.conn.Close(protocol.CloseProtocolError, "expected welcome")
		return fmt.Errorf("relay answered hello with %q", m.Type)
	}
	switch c := m.Welcome.Codec; {
	case c == "" || c == protocol.JSON:
		s.codec = protocol.JSON
	case slices.Contains(hello.Codecs, c):
		s.codec = c
	default:
		s.conn.Close(protocol.CloseProtocolError, "welcome names a codec the hello did not offer")
		return fmt.Errorf("relay chose codec %q, which was not offered", c)
	}
	if err := s.welcome(*m.Welcome); err != nil {
		return err
	}

	msgs := make(chan protocol.Message, 16)
	readErr := make(chan error, 1)
	go func() {
		for {
			m, err := s.read(sctx)
			if err != nil {
				readErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-sctx.Done():
				return
			}
		}
	}()
	pingErr := make(chan error, 1)
	go func() {
		err := tick.EveryUntil(sctx, l.opts.PingInterval, func() error {
			pctx, pcancel := context.WithTimeout(sctx, l.opts.PongTimeout)
			defer pcancel()
			return s.conn.Ping(pctx)
		})
		if err != nil {
			pingErr <- fmt.Errorf("ping: %w", err)
		}
	}()

	if err := s.heartbeat(sctx); err != nil {
		return err
	}
	if err := s.flush(sctx); err != nil {
		return err
	}
	hb := time.NewTicker(l.opts.HeartbeatInterval)
	defer hb.Stop()
	lastKick := time.Time{}
	for {
		select {
		case <-stop:
			return s.drain(sctx, msgs, readErr)
		case err := <-readErr:
			return err
		case err := <-pingErr:
			return err
		case <-hb.C:
			if err := s.heartbeat(sctx); err != nil {
				return err
			}
		case <-l.kick:
			// At most one extra heartbeat a second.
			if time.Since(lastKick) < time.Second {
				time.AfterFunc(time.Second-time.Since(lastKick), l.Kick)
				continue
			}
			lastKick = time.Now()
			if err := s.heartbeat(sctx); err != nil {
				return err
			}
		case <-l.opts.Spool.Notify():
			if err := s.flush(sctx); err != nil {
				return err
			}
		case m := <-msgs:
			if err := s.handle(sctx, m); err != nil {
				return err
			}
		}
	}
}

func (s *session) welcome(w protocol.Welcome) error {
	l := s.l
	sp := l.opts.Spool
	if rebased, err := sp.Rebase(w.LastSeq); errors.Is(err, spool.ErrExhausted) {
		// The relay holds a sequence this spool cannot number above (only
		// a record sent with this device's token by something else than
		// this agent gets there): no record can be sent that the relay
		// would not take for one it has, so none is, and the rest of the
		// link (heartbeats, configuration) works on.
		s.noRecords = true
		l.log.Error("the relay has stored a record sequence this agent cannot number above; records stay in the spool, unsent",
			"relayLastSeq", w.LastSeq, "maxSeq", uint64(protocol.MaxSeq), "pending", sp.Stats().Pending, "err", err)
	} else if err != nil {
		return fmt.Errorf("spool rebase: %w", err)
	} else if rebased {
		l.log.Warn("relay has stored records beyond this agent's spool (state lost?); renumbered pending records", "relayLastSeq", w.LastSeq)
	} else if err := sp.Ack(w.LastSeq); err != nil {
		return fmt.Errorf("spool ack: %w", err)
	}
	s.sent = sp.Stats().Acked
	if skew := time.Since(w.ServerTime.Time); !w.ServerTime.IsZero() && (skew > time.Minute || skew < -time.Minute) {
		// The relay refuses records stamped more than 24 h ahead of its
		// clock; a skewed gateway clock should be fixed (NTP).
		l.log.Warn("gateway clock differs from the relay's", "skew", skew.Round(time.Second))
	}
	l.mu.Lock()
	l.connected = true
	l.deviceID = w.DeviceID
	l.sess = s
	l.relayURL = l.relay()
	l.mu.Unlock()
	l.stats.sessions.Add(1)
	l.log.Info("relay link up", "deviceId", w.DeviceID, "relayLastSeq", w.LastSeq, "pending", sp.Stats().Pending)
	if l.opts.OnWelcome != nil {
		l.opts.OnWelcome(w)
	}
	return nil
}

func (s *session) heartbeat(ctx context.Context) error {
	hb := s.l.opts.Heartbeat()
	hb.At = resource.T(time.Now())
	if lost := strings.Join(protocol.ClampHeartbeat(&hb), "; "); lost != s.l.hbLost {
		s.l.hbLost = lost
		if lost != "" {
			s.l.log.Error("heartbeat out of the protocol's bounds; sent without what the relay would refuse", "lost", lost)
		}
	}
	return s.l.heartbeatWritten(s.write(ctx, protocol.Message{Type: protocol.TypeHeartbeat, Heartbeat: &hb}))
}

func (s *session) handle(ctx context.Context, m protocol.Message) error {
	switch {
	case m.Type == protocol.TypeAck && m.Ack != nil:
		return s.ack(ctx, m.Ack.Seq)
	case m.Type == protocol.TypeConfig && m.Config != nil:
		s.l.log.Info("configuration received", "version", m.Config.Version)
		res := s.l.opts.OnConfig(ctx, *m.Config)
		protocol.ClampConfigApplied(&res)
		if err := s.write(ctx, protocol.Message{Type: protocol.TypeConfigApplied, ConfigApplied: &res}); err != nil {
			return err
		}
		// Report the new channel state at once, and send the config
		// events the channel manager spooled.
		if err := s.heartbeat(ctx); err != nil {
			return err
		}
		return s.flush(ctx)
	case m.Type == protocol.TypeCommand && m.Command != nil:
		s.command(ctx, *m.Command)
		return nil
	default:
		s.conn.Close(protocol.CloseProtocolError, "unexpected message "+strconv.Quote(m.Type))
		return fmt.Errorf("relay sent unexpected message %q", m.Type)
	}
}

// command hands a command to OnCommand, which must not block. A command
// whose id is out of bounds cannot be answered: it is dropped, logged.
// Without OnCommand it is answered failed. The other checks are the
// agent's (it answers a command out of bounds failed, from its journal).
func (s *session) command(ctx context.Context, cmd protocol.Command) {
	l := s.l
	if !protocol.ValidCommandID(cmd.ID) {
		l.log.Error("relay sent a command without a valid id; dropped", "id", fmt.Sprintf("%.70q", cmd.ID), "kind", fmt.Sprintf("%.30q", cmd.Kind))
		return
	}
	l.log.Info("command received", "command", cmd.ID, "kind", fmt.Sprintf("%.30q", cmd.Kind))
	if l.opts.OnCommand == nil {
		l.SendCommandStatus(protocol.CommandStatus{ID: cmd.ID, State: protocol.CommandFailed, Error: "this agent takes no commands"})
		return
	}
	l.opts.OnCommand(ctx, cmd)
}

func (s *session) ack(ctx context.Context, seq uint64) error {
	if err := s.l.opts.Spool.Ack(seq); err != nil {
		return fmt.Errorf("spool ack: %w", err)
	}
	i := 0
	for i < len(s.inflight) && s.inflight[i].last <= seq {
		i++
	}
	if seq >= s.l.probeUntil {
		s.l.probeUntil = 0
	}
	s.inflight = s.inflight[i:]
	if seq > s.sent {
		s.sent = seq
	}
	return s.flush(ctx)
}

// recordsOverhead leaves room for the envelope and the seq fields.
const recordsOverhead = 64 << 10

// flush sends spooled records while the window has room.
func (s *session) flush(ctx context.Context) error {
	sp := s.l.opts.Spool
	size, window := s.l.opts.BatchSize, s.l.opts.Window
	if s.sent < s.l.probeUntil {
		size, window = 1, 1 // finding a record the relay refuses
	}
	for len(s.inflight) < window && !s.noRecords {
		es, err := sp.Read(s.sent, size, protocol.MaxMessageBytes-recordsOverhead)
		if err != nil {
			return fmt.Errorf("spool read: %w", err)
		}
		if len(es) == 0 {
			return nil
		}
		b, err := s.encodeRecords(es)
		if err != nil {
			return err
		}
		if err := s.writeRaw(ctx, protocol.TypeRecords, b); err != nil {
			return err
		}
		last := es[len(es)-1].Seq
		s.sent = last
		s.inflight = append(s.inflight, batch{first: es[0].Seq, last: last})
	}
	return nil
}

// drain sends what is left and waits for its acknowledgement, within
// DrainTimeout, then closes the connection normally.
func (s *session) drain(ctx context.Context, msgs <-chan protocol.Message, readErr <-chan error) error {
	l := s.l
	deadline := time.NewTimer(l.opts.DrainTimeout)
	defer deadline.Stop()
	dctx, cancel := context.WithTimeout(ctx, l.opts.DrainTimeout)
	defer cancel()
	err := s.flush(dctx)
	for err == nil && !s.noRecords && (len(s.inflight) > 0 || l.opts.Spool.Stats().Pending > 0) {
		select {
		case <-deadline.C:
			err = errors.New("drain timed out")
		case e := <-readErr:
			err = e
		case <-l.opts.Spool.Notify():
			err = s.flush(dctx)
		case m := <-msgs:
			if m.Type == protocol.TypeAck && m.Ack != nil {
				err = s.ack(dctx, m.Ack.Seq)
			}
		}
	}
	if err != nil {
		l.log.Warn("final flush incomplete", "err", err, "pending", l.opts.Spool.Stats().Pending)
	} else {
		l.log.Info("final flush done")
	}
	s.conn.Close(websocket.StatusNormalClosure, "agent stopping")
	return errDrained
}

// EncodeRecord returns the spool payload of a record: the JSON object of r
// without its seq, which the link adds when it sends the record.
func EncodeRecord(r protocol.Record) ([]byte, error) {
	type noSeq struct {
		Metric *resource.MetricSample `json:"metric,omitempty"`
		Event  *protocol.Event        `json:"event,omitempty"`
		Points *protocol.PointBatch   `json:"points,omitempty"`
	}
	if n := btoi(r.Metric != nil) + btoi(r.Event != nil) + btoi(r.Points != nil); n != 1 {
		return nil, errors.New("link: a record holds exactly one of metric, event and points")
	}
	return json.Marshal(noSeq{Metric: r.Metric, Event: r.Event, Points: r.Points})
}

// encodeRecords builds a Records message of the session's codec from spool
// entries. The spool holds JSON (EncodeRecord): in CBOR each payload is
// decoded and encoded again, which the agent's low record rate affords.
func (s *session) encodeRecords(es []spool.Entry) ([]byte, error) {
	if s.codec != protocol.CBOR {
		return EncodeRecords(es), nil
	}
	items := make([]protocol.Record, len(es))
	for i, e := range es {
		if err := json.Unmarshal(e.Payload, &items[i]); err != nil {
			// Sent empty: the relay refuses it, and the poison-record
			// handling (noteRefusal) drops it as it would drop the JSON.
			s.l.log.Error("spooled record does not decode; sending it empty", "seq", e.Seq, "err", err)
			items[i] = protocol.Record{}
		}
		items[i].Seq = e.Seq
	}
	b, err := s.codec.Marshal(&protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: items}})
	if err != nil {
		return nil, fmt.Errorf("encode records: %w", err)
	}
	return b, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// EncodeRecords builds a JSON Records message from spool entries without
// decoding their payloads: each item is {"seq":N, ...payload fields}.
func EncodeRecords(es []spool.Entry) []byte {
	n := 64
	for _, e := range es {
		n += len(e.Payload) + 32
	}
	b := make([]byte, 0, n)
	b = append(b, `{"type":"records","records":{"items":[`...)
	for i, e := range es {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"seq":`...)
		b = strconv.AppendUint(b, e.Seq, 10)
		if len(e.Payload) > 2 {
			b = append(b, ',')
			b = append(b, e.Payload[1:]...)
		} else {
			b = append(b, '}')
		}
	}
	b = append(b, "]}}"...)
	return b
}

// SendCommandStatus sends a command's status now when connected, and
// drops it otherwise: the relay sends every unfinished command again after
// the next welcome, and the agent answers it from its journal then. It may
// be called from any goroutine; the write is bounded by WriteTimeout.
func (l *Link) SendCommandStatus(st protocol.CommandStatus) {
	if err := protocol.ClampCommandStatus(&st); err != nil {
		l.log.Error("command status not sent", "err", err)
		return
	}
	l.mu.Lock()
	s := l.sess
	l.mu.Unlock()
	if s == nil {
		l.log.Info("command status not sent: not connected; the relay resends the command after the next welcome", "command", st.ID, "state", st.State)
		return
	}
	if err := s.write(context.Background(), protocol.Message{Type: protocol.TypeCommandStatus, CommandStatus: &st}); err != nil {
		l.log.Info("command status not sent; the relay resends the command after the next welcome", "command", st.ID, "state", st.State, "err", err)
	}
}

// Relay returns the base URL of the relay the link is connected to, or
// was last connected to (the first one before any welcome): agent updates
// download from it.
func (l *Link) Relay() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.relayURL != "" {
		return l.relayURL
	}
	return l.urls[0]
}
