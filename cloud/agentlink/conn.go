package agentlink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/coder/websocket"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// conn is one agent connection. Its reader goroutine (the HTTP handler's)
// owns every field not marked otherwise; writes may come from other
// goroutines (config pushes), which coder/websocket allows.
type conn struct {
	srv     *Server
	ws      *websocket.Conn
	dev     Device
	session string
	remote  string

	connectFrom resource.DeviceStatus // status before this connection
	opened      int64                 // unix nanos: when the relay stored the connection (Store.Connect's at)
	// lastSeq is the device's last stored record sequence, as told to the
	// agent (welcome, acks): records more than protocol.MaxSeqStep above
	// it are refused. Read loop only.
	lastSeq uint64
	// budget is the device's ingest budget (nil: no quota); frameLen the
	// size of the message being handled.
	budget   *budget
	frameLen int
	// quit is closed by kill: a message held by the quota stops waiting.
	quit      chan struct{}
	beatState // the device as stored (beat.go)

	// shared with other goroutines
	lastMsg    atomic.Int64 // unix nanos of the last message read
	lastBeat   atomic.Int64 // unix nanos of the hello or the last heartbeat
	hbInterval atomic.Int64 // nanos, 0 before Hello
	expired    atomic.Bool  // the sweeper took the device OFFLINE
	welcomed   atomic.Bool
	pinging    atomic.Bool
	shutdown   atomic.Bool
	killed     atomic.Pointer[closeErr]

	// cmdMu orders the command pushes (after the welcome, on a change) and
	// guards sentKinds: the kind of each unfinished command sent on this
	// connection, by id (commandStatus follows the device status the
	// store gives on the agent's reports of them).
	cmdMu     sync.Mutex
	sentKinds map[string]string

	cfgMu       sync.Mutex
	sentVersion int64 // highest config version sent
	// points are the points of the desired configuration as last read
	// (nil before), for the units and types of changed points; written
	// under cfgMu.
	points atomic.Pointer[pointDefs]
	// helloDesired is the desired config version when the hello was
	// stored: with sentVersion, the highest the agent can have been told.
	helloDesired int64

	// codec is the codec of the messages after the welcome (JSON until it
	// is sent); set before welcomed, read by config pushes after it.
	codec protocol.Codec
	// job is the message a worker handles for this connection (workers.go).
	job job
	// lastVPN is the tunnel state of the last heartbeat, as given to the
	// Observers (never changed once given); reader goroutine only.
	lastVPN *cloud.VPNState
}

// closeErr ends a session with a close code and a reason.
type closeErr struct {
	code   websocket.StatusCode
	reason string
}

func (e *closeErr) Error() string { return fmt.Sprintf("close %d: %s", e.code, e.reason) }

func protoErr(format string, args ...any) error {
	r := fmt.Sprintf(format, args...)
	if len(r) > 120 {
		r = r[:120]
	}
	return &closeErr{code: protocol.CloseProtocolError, reason: r}
}

func (c *conn) touch() { c.lastMsg.Store(time.Now().UnixNano()) }

// log returns the connection's logger, made when a line is logged: a
// logger with the device's attributes kept for the connection's life took
// about 0.2 KiB of every idle connection's heap, for lines an agent's
// session logs a handful of times.
func (c *conn) log() *slog.Logger { return c.srv.log.With("device", c.dev.ID, "remote", c.remote) }

// kill closes the connection from another goroutine.
func (c *conn) kill(code websocket.StatusCode, reason string) {
	if !c.killed.CompareAndSwap(nil, &closeErr{code: code, reason: reason}) {
		return
	}
	if c.quit != nil {
		close(c.quit)
	}
	go c.ws.Close(code, reason)
}

// closeFor returns the close code and reason to send for the error that
// ended the session (code 0: the peer went away).
func (c *conn) closeFor(err error) (websocket.StatusCode, string) {
	if k := c.killed.Load(); k != nil {
		return k.code, k.reason
	}
	var ce *closeErr
	if errors.As(err, &ce) {
		return ce.code, ce.reason
	}
	if errors.Is(err, ErrSessionGone) {
		return protocol.CloseReplaced, "session taken over by a newer connection or timed out"
	}
	if err != nil && websocket.CloseStatus(err) == -1 && !isNetClosed(err) && c.srv.ctx.Err() == nil {
		return websocket.StatusInternalError, "internal error"
	}
	return 0, ""
}

func isNetClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// read reads one message of the handshake: JSON in a text frame until the
// welcome, then a message of the connection's codec.
func (c *conn) read(ctx context.Context) (protocol.Message, error) {
	typ, buf, err := c.readFrame(ctx)
	if err != nil {
		return protocol.Message{}, err
	}
	defer c.srv.putBuf(buf)
	c.frameLen = len(*buf)
	var d decoder
	return c.decode(typ, *buf, &d)
}

// readFrame reads one message's bytes into a pooled buffer, which the
// caller gives back (putBuf) once decoded. It is all that runs on a
// connection's own goroutine after the hello (loop), so that goroutine's
// stack stays as small as the read needs.
func (c *conn) readFrame(ctx context.Context) (websocket.MessageType, *[]byte, error) {
	typ, r, err := c.ws.Reader(ctx)
	if err != nil {
		return 0, nil, err
	}
	buf := c.srv.getBuf()
	b, err := readLimited(r, (*buf)[:0], protocol.MaxMessageBytes+1)
	*buf = b
	if err != nil {
		c.srv.putBuf(buf)
		return 0, nil, err
	}
	if len(b) > protocol.MaxMessageBytes {
		c.srv.putBuf(buf)
		return 0, nil, &closeErr{code: protocol.CloseTooLarge, reason: fmt.Sprintf("message over %d bytes", protocol.MaxMessageBytes)}
	}
	c.touch()
	return typ, buf, nil
}

// decode decodes a message of frame type typ. Neither codec keeps a
// reference to b (strings and byte slices are copies), so its buffer goes
// back to the pool after.
func (c *conn) decode(typ websocket.MessageType, b []byte, d *decoder) (protocol.Message, error) {
	codec := protocol.JSON
	if c.welcomed.Load() {
		codec = c.codec
	}
	if typ != frameType(codec) {
		return protocol.Message{}, protoErr("a %s frame on a connection speaking %s", frameName(typ), codec)
	}
	return d.decode(codec, b)
}

// readLimited appends what r holds to b, up to limit bytes in all (a
// message longer than that is cut at limit: the caller refuses it).
func readLimited(r io.Reader, b []byte, limit int) ([]byte, error) {
	for len(b) < limit {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):min(cap(b), limit)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
	return b, nil
}

// send sends m in the connection's codec (after the welcome).
func (c *conn) send(m *protocol.Message) error { return c.write(c.codec, m) }

// storeCtx is the context of store calls. It cannot be cancelled: the
// writer completes or fails every job it took, and Shutdown closes the
// connections instead. (Deriving thousands of short-lived contexts from one
// shared parent makes every connection contend for the parent's lock.)
func (c *conn) storeCtx() (context.Context, context.CancelFunc) {
	return context.Background(), func() {}
}

// handshake reads and stores the agent's hello and sends the welcome. It
// runs on the HTTP handler's goroutine; loop serves the rest of the
// session on a goroutine of its own.
func (c *conn) handshake() error {
	s := c.srv
	// The hello's read is bounded by a timer that closes the connection
	// with a close frame saying why, not by the read's context: the
	// library ends a read whose context ends by dropping the connection,
	// without a word to the agent, and keeps the context until the next
	// message (a timer context of about 0.2 KiB for every idle agent).
	silent := time.AfterFunc(s.cfg.HandshakeTimeout, func() {
		c.kill(protocol.CloseProtocolError, fmt.Sprintf("no hello within %s", s.cfg.HandshakeTimeout))
	})
	m, err := c.read(context.Background())
	if !silent.Stop() {
		return protoErr("no hello within %s", s.cfg.HandshakeTimeout) // (kill's close is what is sent)
	}
	if err != nil {
		return err
	}
	if m.Type != protocol.TypeHello || m.Hello == nil {
		return protoErr("first message must be hello, got %q", m.Type)
	}
	return c.hello(m.Hello)
}

// loop reads the agent's messages until the session ends, each handled
// on a worker (Server.handle): the connection's goroutine only reads, and
// the stacks that decoding and storing grow belong to the few workers, not
// to every idle connection (docs/benchmarks.md, "Memory per idle agent").
// Messages are handled one at a time, in order: loop goes back to reading
// as soon as a worker has the message, and waits for it only when the next
// one arrives before it is done (or the session ends). A message whose
// handling fails closes the connection (conn.stop), which ends the read;
// loop then returns that message's error.
func (c *conn) loop() error {
	for {
		// A context that cannot be cancelled: coder/websocket then sets no
		// timer per read. Dead peers are found by the heartbeat check and
		// pings; Shutdown closes the connection.
		typ, buf, err := c.readFrame(context.Background())
		if err != nil {
			if jerr := c.srv.settled(c); jerr != nil {
				return jerr
			}
			return err
		}
		if err := c.srv.handle(c, typ, buf); err != nil {
			return err
		}
	}
}

// stop closes the connection after a worker failed to handle one of its
// messages with err, with the close code and reason loop's return of err
// gives (closeFor), so that the read waiting for the next message ends.
func (c *conn) stop(err error) {
	if code, reason := c.closeFor(err); code != 0 {
		c.kill(code, reason)
		return
	}
	c.ws.CloseNow()
}

// decodeFrame decodes one message read by loop with d (the worker's), and
// gives its buffer back. A decoded heartbeat lives in d until the worker
// decodes its next message; it is handled before that.
func (c *conn) decodeFrame(typ websocket.MessageType, buf *[]byte, d *decoder) (protocol.Message, error) {
	c.frameLen = len(*buf)
	m, err := c.decode(typ, *buf, d)
	c.srv.putBuf(buf)
	return m, err
}

// handleMessage handles one decoded message after the welcome.
func (c *conn) handleMessage(m protocol.Message) error {
	switch m.Type {
	case protocol.TypeHeartbeat:
		if m.Heartbeat == nil {
			return protoErr("heartbeat message without heartbeat")
		}
		return c.heartbeat(m.Heartbeat)
	case protocol.TypeRecords:
		if m.Records == nil {
			return protoErr("records message without records")
		}
		return c.records(m.Records)
	case protocol.TypeConfigApplied:
		if m.ConfigApplied == nil {
			return protoErr("config_applied message without configApplied")
		}
		return c.configApplied(m.ConfigApplied)
	case protocol.TypeCommandStatus:
		if m.CommandStatus == nil {
			return protoErr("command_status message without commandStatus")
		}
		return c.commandStatus(m.CommandStatus)
	case protocol.TypeHello:
		return protoErr("hello sent twice")
	default:
		if protocol.SentByRelay(m.Type) {
			return protoErr("%s is a relay-to-agent message", m.Type)
		}
		return protoErr("unknown message type %q", m.Type)
	}
}

func clampDuration(d, def, lo, hi time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return min(max(d, lo), hi)
}

func (c *conn) hello(h *protocol.Hello) error {
	s := c.srv
	if err := validateHello(h); err != nil {
		return err
	}
	c.model = catalog.Find(c.dev.Model)
	if c.model == nil {
		c.model = &noModel
	}
	hb := clampDuration(h.HeartbeatInterval.Duration, s.cfg.DefaultHeartbeat, s.cfg.MinHeartbeat, MaxHeartbeat)
	c.metricsInterval = clampDuration(h.MetricsInterval.Duration, s.cfg.DefaultMetricsInterval, s.cfg.MinHeartbeat, MaxMetricsInterval)
	now := s.now()
	in := HelloIn{Device: c.dev, Session: c.session, At: now, Hello: *h, HeartbeatInterval: hb, Deadline: now.Add(storedDeadlineBeats * hb)}
	switch c.connectFrom {
	case resource.StatusOnline, resource.StatusRebooting, resource.StatusUpdating, resource.StatusError:
	default:
		in.OnlineEvent = true
	}
	ctx, cancel := c.storeCtx()
	out, err := s.cfg.Store.Hello(ctx, in)
	cancel()
	if err != nil {
		return err
	}
	c.storedDeadline = in.Deadline
	c.lastBeat.Store(time.Now().UnixNano())
	c.hbInterval.Store(int64(hb))
	c.status = resource.StatusOnline
	c.cfgMu.Lock()
	c.helloDesired = out.DesiredVersion
	c.cfgMu.Unlock()
	c.appliedVersion = min(h.AppliedVersion, out.DesiredVersion)
	c.channels = nil
	for i, ch := range out.Channels {
		if mc, ok := c.model.Channel(ch.ID); ok {
			out.Channels[i].ID = mc.ID // the model's string, as beat keeps
		}
	}
	c.channels.setAll(out.Channels)
	c.lastSeq = out.LastSeq
	codec := protocol.ChooseCodec(h.Codecs)
	c.log().Info("agent online", "agentVersion", h.AgentVersion, "heartbeat", hb, "lastSeq", out.LastSeq, "codec", codec)
	s.statusChanged(out.Change)
	w := &protocol.Welcome{DeviceID: c.dev.ID, ServerTime: resource.T(s.now()), LastSeq: out.LastSeq}
	if codec != protocol.JSON {
		w.Codec = codec // JSON goes unnamed, as in the welcome of a relay from before codecs
	}
	if err := c.write(protocol.JSON, &protocol.Message{Type: protocol.TypeWelcome, Welcome: w}); err != nil {
		return err
	}
	c.codec = codec
	c.welcomed.Store(true)
	switch {
	case out.DesiredVersion > h.AppliedVersion:
		c.pushConfig(h.AppliedVersion)
	case h.AppliedVersion > out.DesiredVersion && out.DesiredVersion > 0:
		// A version this relay never issued (a database restored from an
		// older backup): the desired configuration replaces it.
		c.log().Warn("agent runs a configuration version above the desired one; sending the desired one",
			"applied", h.AppliedVersion, "desired", out.DesiredVersion)
		c.pushConfig(0)
	}
	c.pushCommands()
	return nil
}

// pushCommands sends the device's unfinished commands, one message each,
// oldest first. The agent takes each command id at most once, so a
// command sent twice (after a welcome and on a change at once) is only
// answered again. A failed read or write is logged: the commands go again
// after the next welcome or change.
func (c *conn) pushCommands() {
	cs := c.srv.cfg.Commands
	if cs == nil {
		return
	}
	c.cmdMu.Lock()
	defer c.cmdMu.Unlock()
	ctx, cancel := c.storeCtx()
	cmds, err := cs.PendingCommands(ctx, c.dev)
	cancel()
	if err != nil {
		c.log().Error("pending commands not read", "err", err)
		return
	}
	if c.sentKinds == nil || len(c.sentKinds) > maxSentKinds {
		c.sentKinds = make(map[string]string, len(cmds))
	}
	for i := range cmds {
		c.sentKinds[cmds[i].ID] = cmds[i].Kind
		if err := c.send(&protocol.Message{Type: protocol.TypeCommand, Command: &cmds[i]}); err != nil {
			c.log().Info("command not sent", "command", cmds[i].ID, "err", err)
			return
		}
		c.log().Info("command sent", "command", cmds[i].ID, "kind", cmds[i].Kind)
	}
}

// commandStatus stores an agent's report on one of its commands. A status
// out of bounds is a protocol error; a store failure is logged and the
// connection goes on (the agent reports again when the command is resent).
func (c *conn) commandStatus(st *protocol.CommandStatus) error {
	if err := protocol.CheckCommandStatus(st); err != nil {
		return refused(err)
	}
	c.log().Info("command status", "command", st.ID, "state", st.State, "error", st.Error, "agentVersion", st.Version)
	cs := c.srv.cfg.Commands
	if cs == nil {
		return nil
	}
	ctx, cancel := c.storeCtx()
	err := cs.CommandStatus(ctx, c.dev, *st, c.srv.now())
	cancel()
	if err != nil {
		c.log().Error("command status not stored", "command", st.ID, "state", st.State, "err", err)
		return nil
	}
	c.followCommandStatus(st)
	return nil
}

// maxSentKinds bounds the commands a connection remembers sending.
const maxSentKinds = 1024

// followCommandStatus moves the connection's view of the device status as
// the store did with the agent's report of a command sent on this
// connection (cloud.CommandDeviceStatus), and tells the Observers: the
// agent's next heartbeat reports the same status and is then no change (a
// second device.status_changed). A report after the one that finished the
// command changes nothing, as in the store.
func (c *conn) followCommandStatus(st *protocol.CommandStatus) {
	c.cmdMu.Lock()
	kind, ok := c.sentKinds[st.ID]
	if ok && protocol.CommandFinished(st.State) {
		delete(c.sentKinds, st.ID)
	}
	c.cmdMu.Unlock()
	if !ok {
		return
	}
	from := c.status
	to := cloud.CommandDeviceStatus(kind, st.State, from)
	if to == "" || to == from {
		return
	}
	c.status = to
	ref := c.dev.Ref()
	for _, o := range c.srv.cfg.Observers {
		o.StatusChanged(c.srv.ctx, ref, from, to)
	}
}

// knownDesired returns the highest desired config version the agent can
// have been told of on this connection: the one at hello or a later one
// sent since. (A config being sent holds cfgMu until sentVersion is set, so
// the agent's answer to it is never judged before.)
func (c *conn) knownDesired() int64 {
	c.cfgMu.Lock()
	defer c.cfgMu.Unlock()
	return max(c.helloDesired, c.sentVersion)
}

// pushConfig sends the device's desired configuration when it is newer than
// what was sent in this session and than applied.
func (c *conn) pushConfig(applied int64) {
	c.cfgMu.Lock()
	defer c.cfgMu.Unlock()
	ctx, cancel := c.storeCtx()
	cfg, ok, err := c.srv.cfg.Store.DesiredConfig(ctx, c.dev)
	cancel()
	if err != nil {
		c.log().Error("desired config not read", "err", err)
		return
	}
	if ok {
		pd := newPointDefs(cfg)
		c.points.Store(&pd)
	}
	if !ok || cfg.Version <= c.sentVersion || cfg.Version <= applied {
		return
	}
	if err := c.send(&protocol.Message{Type: protocol.TypeConfig, Config: &cfg}); err != nil {
		c.log().Info("config not sent", "version", cfg.Version, "err", err)
		return
	}
	c.sentVersion = cfg.Version
	c.log().Info("config sent", "version", cfg.Version)
}

// desiredPoints returns the points of the device's desired configuration:
// as last read, else read now (once per connection: later changes are
// read by pushConfig). On a failed read it returns none, and reads again
// next time.
func (c *conn) desiredPoints() pointDefs {
	if pd := c.points.Load(); pd != nil {
		return *pd
	}
	c.cfgMu.Lock()
	defer c.cfgMu.Unlock()
	if pd := c.points.Load(); pd != nil {
		return *pd
	}
	ctx, cancel := c.storeCtx()
	cfg, ok, err := c.srv.cfg.Store.DesiredConfig(ctx, c.dev)
	cancel()
	if err != nil {
		c.log().Warn("desired config not read: changed points go without units", "err", err)
		return nil
	}
	pd := pointDefs{}
	if ok {
		pd = newPointDefs(cfg)
	}
	c.points.Store(&pd)
	return pd
}

// heartbeat takes one heartbeat: its rules (beatState.beat) decide what it
// changes; the connection hands that to the store in a pooled record
// (hbPending), shares an unchanged tunnel state with the previous
// heartbeat, and moves its state on once the store took it.
func (c *conn) heartbeat(h *protocol.Heartbeat) error {
	s := c.srv
	read := time.Now()
	if err := validateHeartbeat(h); err != nil {
		return err
	}
	now := s.now()
	c.lastBeat.Store(read.UnixNano())
	p := s.getPending(c)
	p.read = read
	d := c.beat(h, beatIn{now: now, interval: time.Duration(c.hbInterval.Load()), remote: c.remote}, c.knownDesired, c.desiredPoints, p.channels)
	if d.Channels != nil {
		p.channels = d.Channels
	}
	if d.Event != nil {
		d.Event.ID = newID()
	}
	in := HeartbeatIn{
		Device:         c.dev,
		Session:        c.session,
		At:             now,
		Deadline:       d.Deadline,
		Status:         d.Status,
		PrevStatus:     d.PrevStatus,
		IPAddress:      d.IPAddress,
		AppliedVersion: d.AppliedVersion,
		HasChannels:    d.HasChannels,
		Event:          d.Event,
	}
	p.chb = cloud.Heartbeat{At: now, Status: d.Status, Changed: d.Changed, ChangedPoints: d.ChangedPoints}
	if d.HasVPN {
		// The state given to the Observers is never changed afterwards, so
		// an unchanged tunnel shares the previous heartbeat's, and only a
		// changed one is copied to the heap (d.VPN itself stays on the
		// stack: taking its address would allocate it at every heartbeat,
		// a fifth of what the relay allocated per heartbeat).
		if c.lastVPN == nil || *c.lastVPN != d.VPN {
			changedVPN := d.VPN
			c.lastVPN = &changedVPN
		}
		p.chb.VPN = c.lastVPN
	}
	p.ev = d.Event
	p.sent = h.At.Time
	// The reader goes on at once; the store calls back after the commit.
	// The connection's view moves ahead now: if the write fails, the
	// connection is closed and the next one starts from the store. (The
	// channels are taken before the call: once queued, p and its lists
	// belong to the store until the callback, which may come at once.)
	c.applyChannels(&d)
	if d.Channels != nil {
		// Every channel's state, as stored from now on, in its stored
		// form: encoded here, on the connection's worker, not on the
		// store's writer, into p's buffer, which the store reads until it
		// calls back (a string per heartbeat doubled what the relay
		// allocated per heartbeat, and its collections with it).
		p.reports = cloud.AppendChannelReports(p.reports[:0], c.channels)
		in.Reports = unsafe.String(unsafe.SliceData(p.reports), len(p.reports))
	}
	ctx, cancel := c.storeCtx()
	err := s.cfg.Store.Heartbeat(ctx, in, p.done)
	cancel()
	if err != nil {
		return err
	}
	c.apply(&d, now)
	return nil
}

func (c *conn) records(r *protocol.Records) error {
	s := c.srv
	if len(r.Items) > protocol.MaxBatch {
		return &closeErr{code: protocol.CloseTooLarge, reason: fmt.Sprintf("batch of %d records is over %d", len(r.Items), protocol.MaxBatch)}
	}
	if err := validateRecords(r.Items, c.lastSeq, s.now()); err != nil {
		return err
	}
	if ev := c.pace(r.Items, c.frameLen); ev != nil {
		// The relay's event, stored with the message (seq 0 raises no
		// sequence).
		r.Items = append(r.Items, protocol.Record{Event: ev})
	}
	ctx, cancel := c.storeCtx()
	out, err := s.cfg.Store.Records(ctx, RecordsIn{Device: c.dev, Session: c.session, Items: r.Items})
	cancel()
	if err != nil {
		return err
	}
	s.stats.batches.Add(1)
	s.stats.records.Add(int64(len(r.Items)))
	ref := c.dev.Ref()
	if len(out.Metrics) > 0 {
		for _, o := range s.cfg.Observers {
			o.MetricsStored(s.ctx, ref, out.Metrics)
		}
	}
	if len(out.Points) > 0 {
		for _, o := range s.cfg.Observers {
			if po, ok := o.(cloud.PointObserver); ok {
				po.PointsStored(s.ctx, ref, out.Points)
			}
		}
	}
	s.eventsStored(ref, out.Events)
	c.lastSeq = max(c.lastSeq, out.LastSeq)
	return c.send(&protocol.Message{Type: protocol.TypeAck, Ack: &protocol.Ack{Seq: out.LastSeq}})
}

func (c *conn) configApplied(a *protocol.ConfigApplied) error {
	s := c.srv
	if err := protocol.CheckConfigApplied(a); err != nil {
		return refused(err)
	}
	if d := c.knownDesired(); a.Version > d {
		return protoErr("configApplied.version %d is above the desired version %d", a.Version, d)
	}
	ctx, cancel := c.storeCtx()
	out, err := s.cfg.Store.ConfigApplied(ctx, ConfigAppliedIn{Device: c.dev, Session: c.session, At: s.now(), Version: a.Version, Error: a.Error})
	cancel()
	if err != nil {
		return err
	}
	c.appliedVersion = a.Version
	c.log().Info("config applied", "version", a.Version, "error", a.Error)
	if out.Event != nil {
		s.eventsStored(c.dev.Ref(), []resource.Event{*out.Event})
	}
	return nil
}

// hbPending is a heartbeat on its way to the store: what its completion
// needs, and the memory of its channel list for the store, reused from one
// heartbeat to the next through Server.pending. Every allocation per
// heartbeat brings the next GC cycle closer, and a GC mark phase on a busy
// relay delays every heartbeat in flight (docs/benchmarks.md). What goes to
// the Observers (chb) is their own to keep.
type hbPending struct {
	s          *Server
	c          *conn
	read, sent time.Time
	chb        cloud.Heartbeat
	ev         *resource.Event
	channels   []protocol.ChannelState   // backing of the beat's changed channels
	reports    []byte                    // backing of HeartbeatIn.Reports
	done       func(HeartbeatOut, error) // p.complete, bound once
}

// maxReportBuf bounds the reports buffer a pending record keeps for the
// next heartbeat: a larger one (channels of unusually many or long points)
// is left to the collector.
const maxReportBuf = 64 << 10

func (s *Server) getPending(c *conn) *hbPending {
	p, _ := s.pending.Get().(*hbPending)
	if p == nil {
		p = &hbPending{s: s}
		p.done = p.complete
	}
	p.c = c
	return p
}

// putPending returns p for reuse once nothing refers to its memory.
func (s *Server) putPending(p *hbPending) {
	if cap(p.channels) > 64 {
		return // an unusual heartbeat: leave its large lists to the GC
	}
	clear(p.channels[:cap(p.channels)])
	reports := p.reports[:0]
	if cap(reports) > maxReportBuf {
		reports = nil
	}
	*p = hbPending{s: p.s, done: p.done, channels: p.channels[:0], reports: reports}
	s.pending.Put(p)
}

// complete is called by the store after the heartbeat's commit (or its
// failure), on the store's completion goroutine.
func (p *hbPending) complete(out HeartbeatOut, err error) {
	s, c := p.s, p.c
	defer s.putPending(p)
	if err != nil {
		if errors.Is(err, ErrSessionGone) {
			c.kill(protocol.CloseReplaced, "session taken over by a newer connection or timed out")
		} else {
			c.log().Error("heartbeat not stored", "err", err)
			c.kill(websocket.StatusInternalError, "store unavailable")
		}
		return
	}
	s.stats.heartbeats.Add(1)
	s.stats.heartbeatStored(time.Since(p.read))
	if !p.sent.IsZero() {
		s.stats.hbSentLatency[bucketOf(max(0, time.Since(p.sent)))].Add(1)
	}
	ref := c.dev.Ref()
	for _, o := range s.cfg.Observers {
		o.HeartbeatStored(s.ctx, ref, p.chb)
	}
	s.statusChanged(out.Change)
	if p.ev != nil {
		s.eventsStored(ref, []resource.Event{*p.ev})
	}
}
