// Package agentlink is the relay's agent endpoint: the websocket handler at
// protocol.Path that authenticates agents by device token, runs the session
// of shared/protocol (hello/welcome, heartbeats, records and acks,
// configuration), stores what agents report through a Store, tells the
// cloud.Observers after each commit, pushes desired configuration and
// device commands (reboot, update) to connected agents and stores their
// command statuses, and sweeps devices whose heartbeats stopped to OFFLINE.
// It also serves agent releases to the devices of their organization
// (release.go, at protocol.ReleasePath) and redeems claims (claim.go, at
// protocol.ClaimPath). The protocol is written down in docs/protocol.md.
package agentlink

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/clientaddr"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// Config configures a Server. Store is required; the rest has defaults.
type Config struct {
	Store     Store
	Observers []cloud.Observer
	// Commands, if set, holds the devices' commands (reboot, update): the
	// endpoint sends a connected agent its unfinished ones after the
	// welcome and when told (CommandsChanged, DesiredConfigChanged), and
	// stores the agent's command statuses.
	Commands cloud.CommandStore
	Logger   *slog.Logger
	Now      cloud.Now

	// WriteTimeout bounds every write to an agent (DefaultWriteTimeout).
	WriteTimeout time.Duration
	// HandshakeTimeout is the time an agent has to send Hello after the
	// upgrade (DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// SweepInterval is the period of the OFFLINE sweeper
	// (DefaultSweepInterval).
	SweepInterval time.Duration
	// OrphanWindow is how long a device that a previous relay process left
	// connected has to reconnect before it goes OFFLINE
	// (DefaultOrphanWindow).
	OrphanWindow time.Duration
	// DefaultHeartbeat is assumed when Hello names no heartbeat interval
	// (DefaultHeartbeatInterval). Announced intervals are clamped to
	// [MinHeartbeat, MaxHeartbeat].
	DefaultHeartbeat time.Duration
	// MinHeartbeat is the smallest heartbeat interval honoured
	// (DefaultMinHeartbeat).
	MinHeartbeat time.Duration
	// DefaultMetricsInterval is assumed when Hello names none (the
	// package's DefaultMetricsInterval); at most one heartbeat event is
	// recorded per metrics interval. Announced ones are clamped to
	// [MinHeartbeat, MaxMetricsInterval].
	DefaultMetricsInterval time.Duration
	// RevocationCheck is how often connected devices are checked for a
	// revoked token (DefaultRevocationCheck); their connections close with
	// 4003.
	RevocationCheck time.Duration
	// RefusalLimit is how many refused upgrades (missing, unknown or
	// revoked token) one client address (IPv6: its /64) may have per
	// RefusalWindow before it is answered 429 without a token lookup
	// (DefaultRefusalLimit per DefaultRefusalWindow). Refusals are logged
	// one line per address and RefusalLogInterval at most, then summed up
	// (DefaultRefusalLogInterval).
	RefusalLimit       int
	RefusalWindow      time.Duration
	RefusalLogInterval time.Duration
	// Quota bounds what each device stores (Quota; the zero value: no
	// bound). The relay sets DefaultQuota unless told otherwise.
	Quota Quota
	// MaxWorkers bounds the goroutines that decode the agents' messages
	// and handle their heartbeats (workers.go; default 16 per CPU, at
	// least 32).
	MaxWorkers int
}

// The defaults of Config, which the relay's flags show, and the bounds on
// the intervals an agent announces.
const (
	DefaultWriteTimeout       = 10 * time.Second
	DefaultHandshakeTimeout   = 30 * time.Second
	DefaultSweepInterval      = time.Second
	DefaultOrphanWindow       = 90 * time.Second
	DefaultHeartbeatInterval  = 30 * time.Second
	DefaultMinHeartbeat       = 100 * time.Millisecond
	DefaultMetricsInterval    = 5 * time.Minute
	DefaultRevocationCheck    = 10 * time.Second
	DefaultRefusalLimit       = 20
	DefaultRefusalWindow      = time.Minute
	DefaultRefusalLogInterval = time.Minute
	// MaxHeartbeat is the longest heartbeat interval honoured.
	MaxHeartbeat = time.Hour
	// MaxMetricsInterval is the longest metrics interval honoured.
	MaxMetricsInterval = 24 * time.Hour
)

func (c *Config) defaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.WriteTimeout, DefaultWriteTimeout)
	def(&c.HandshakeTimeout, DefaultHandshakeTimeout)
	def(&c.SweepInterval, DefaultSweepInterval)
	def(&c.OrphanWindow, DefaultOrphanWindow)
	def(&c.DefaultHeartbeat, DefaultHeartbeatInterval)
	def(&c.MinHeartbeat, DefaultMinHeartbeat)
	def(&c.DefaultMetricsInterval, DefaultMetricsInterval)
	def(&c.RevocationCheck, DefaultRevocationCheck)
	def(&c.RefusalWindow, DefaultRefusalWindow)
	def(&c.RefusalLogInterval, DefaultRefusalLogInterval)
	if c.RefusalLimit <= 0 {
		c.RefusalLimit = DefaultRefusalLimit
	}
	if c.MaxWorkers <= 0 {
		c.MaxWorkers = defaultMaxWorkers()
	}
}

// Server is the agent endpoint. Create it with New, mount Handler at
// protocol.Path, run Run in the background, and call Shutdown before closing
// the store.
type Server struct {
	cfg Config
	log *slog.Logger

	ctx    context.Context // cancelled by Shutdown
	cancel context.CancelFunc

	mu       sync.Mutex
	conns    map[string]*conn // device id → its current connection
	closing  bool
	handlers sync.WaitGroup

	pings    chan struct{} // bounds concurrent pings
	stats    counters
	refusals *refusals
	budgets  *budgets // the devices' ingest budgets (quota.go)

	// bufs holds read buffers (*[]byte) shared by the connections: a
	// connection holds one only while it reads and decodes a message.
	bufs sync.Pool
	// pending holds *hbPending for reuse (conn.heartbeat).
	pending sync.Pool
	// readBufs holds the connections' socket read buffers
	// (*[readBufSize]byte): a connection holds one only while bytes it
	// received wait to be read (hijack.go).
	readBufs sync.Pool
	// writeDeadline bounds the connections' writes (deadline.go).
	writeDeadline sharedDeadline
	// jobs hands messages to idle workers (workers.go); workerSlots holds
	// a token for each running worker, up to the bound.
	jobs        chan *job
	workerSlots chan struct{}
}

// maxPooledBuf is the largest read buffer kept for reuse; a larger one (a
// big records batch) is left to the garbage collector.
const maxPooledBuf = 64 << 10

func (s *Server) getBuf() *[]byte {
	if b, ok := s.bufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 4096)
	return &b
}

func (s *Server) putBuf(b *[]byte) {
	if cap(*b) <= maxPooledBuf {
		s.bufs.Put(b)
	}
}

var (
	_ cloud.DesiredConfigObserver = (*Server)(nil)
	_ cloud.CommandsObserver      = (*Server)(nil)
)

// New returns a Server.
func New(cfg Config) *Server {
	if cfg.Store == nil {
		panic("agentlink: Config.Store is required")
	}
	cfg.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		cfg:         cfg,
		log:         cfg.Logger,
		ctx:         ctx,
		cancel:      cancel,
		conns:       make(map[string]*conn),
		jobs:        make(chan *job),
		workerSlots: make(chan struct{}, cfg.MaxWorkers),
		pings:       make(chan struct{}, 256),
		refusals: newRefusals(cfg.RefusalLimit, cfg.RefusalWindow, cfg.RefusalLogInterval,
			cfg.Logger.With("component", "agentlink")),
		budgets:       newBudgets(cfg.Quota),
		writeDeadline: sharedDeadline{d: cfg.WriteTimeout},
	}
}

// Handler returns the websocket endpoint, to be mounted at protocol.Path.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// Connections returns the number of open agent connections.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *Server) now() time.Time { return s.cfg.Now() }

// bearer returns the bearer token of r, or "".
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	const p = "bearer "
	if len(h) <= len(p) || !strings.EqualFold(h[:len(p)], p) {
		return ""
	}
	tok := strings.TrimSpace(h[len(p):])
	if len(tok) > 512 {
		return ""
	}
	return tok
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	w.WriteHeader(status)
	b, _ := json.Marshal(resource.ErrorBody{Error: resource.ErrorDetail{Code: code, Message: msg}})
	w.Write(b)
}

// authenticate returns the device whose token is r's bearer token, or
// answers r and returns false: 401 for a missing, unknown or revoked token
// (429 once the client address used up its refusals), 503 when the store
// cannot tell.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (Device, bool) {
	addr := clientaddr.Key(r) // what a refusal is counted against
	tok := s.refusals.bearer(w, r, addr, "a device token")
	if tok == "" {
		return Device{}, false
	}
	actx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	dev, err := s.cfg.Store.AuthDevice(actx, sha256.Sum256([]byte(tok)))
	cancel()
	if errors.Is(err, ErrUnauthorized) {
		s.refusals.refuse(w, r, addr, refusedBadToken, "unknown or revoked device token")
		return Device{}, false
	}
	if err != nil {
		s.log.Error("agent refused: store unavailable", "remote", clientaddr.Host(r), "path", r.URL.Path, "err", err)
		writeError(w, http.StatusServiceUnavailable, cloud.EINTERNAL, "internal error")
		return Device{}, false
	}
	return dev, true
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "the agent endpoint takes GET with a websocket upgrade")
		return
	}
	dev, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	remote := clientaddr.Host(r)
	s.mu.Lock()
	closing := s.closing
	if !closing {
		s.handlers.Add(1)
	}
	s.mu.Unlock()
	if closing {
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "shutting_down", "relay shutting down")
		return
	}
	c := s.open(w, r, dev, remote)
	if c == nil {
		s.handlers.Done()
		return
	}
	if err := c.handshake(); err != nil {
		s.end(c, err)
		return
	}
	// The rest of the session runs on a goroutine of its own and this
	// handler returns: the HTTP server's goroutine, its deep stack, the
	// request and its contexts are freed, and the connection's goroutine
	// keeps only the stack its reads need (issue 31, docs/benchmarks.md
	// "Memory per idle agent").
	go func() { s.end(c, c.loopSafely()) }()
}

// loopSafely is c.loop; a panic ends that connection only.
func (c *conn) loopSafely() (err error) {
	defer recovered(c, &err)
	return c.loop()
}

// open upgrades r, stores the device as connecting and registers its
// connection; nil when the connection was refused or closed (after
// logging why).
func (s *Server) open(w http.ResponseWriter, r *http.Request, dev Device, remote string) *conn {
	ws, err := websocket.Accept(smallBufs{ResponseWriter: w, pool: &s.readBufs}, r, &websocket.AcceptOptions{
		Subprotocols:    []string{protocol.Subprotocol},
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		s.log.Warn("agent upgrade failed", "device", dev.ID, "remote", remote, "err", err)
		return nil
	}
	log := s.log.With("device", dev.ID, "remote", remote)
	if ws.Subprotocol() != protocol.Subprotocol {
		log.Warn("agent closed: subprotocol not negotiated")
		ws.Close(protocol.CloseProtocolError, "subprotocol "+protocol.Subprotocol+" required")
		return nil
	}
	// Our own limit check (in conn.read) closes with CloseTooLarge; the
	// library's limit is one byte above it as a backstop.
	ws.SetReadLimit(protocol.MaxMessageBytes + 1)

	c := &conn{srv: s, ws: ws, dev: dev, session: ids.New(), remote: remote, budget: s.budgets.of(dev.ID), quit: make(chan struct{})}
	c.touch()
	now := s.now()
	wctx, wcancel := context.WithTimeout(context.Background(), s.cfg.WriteTimeout)
	c.opened = now.UnixNano()
	ch, err := s.cfg.Store.Connect(wctx, dev, c.session, now, now.Add(2*s.cfg.HandshakeTimeout))
	wcancel()
	if errors.Is(err, ErrSuperseded) {
		// This attempt's write came after a newer connection's: the agent
		// gave up on it and is (or was) on that one.
		log.Info("agent closed: a newer connection holds the device")
		s.stats.conns.accepted.Add(1)
		s.stats.conns.sessionEnded(protocol.CloseReplaced)
		ws.Close(protocol.CloseReplaced, "a newer connection of the device is open")
		return nil
	}
	if err != nil {
		log.Error("agent closed: store unavailable", "err", err)
		ws.Close(websocket.StatusInternalError, "store unavailable")
		return nil
	}
	c.connectFrom = ch.From
	c.status = resource.StatusConnecting
	s.statusChanged(ch)
	s.register(c)
	s.stats.conns.accepted.Add(1)
	return c
}

// end closes c's session, which err ended, and stores the device's
// disconnection (unless the relay is shutting down).
func (s *Server) end(c *conn, err error) {
	defer s.handlers.Done()
	code, reason := c.closeFor(err)
	s.unregister(c)
	s.stats.conns.sessionEnded(code)

	log := c.log()
	level := slog.LevelInfo
	if code == protocol.CloseProtocolError || code == protocol.CloseTooLarge {
		level = slog.LevelWarn
	}
	if code != 0 {
		log.Log(s.ctx, level, "agent connection closed", "code", int(code), "reason", reason)
		c.ws.Close(code, reason)
	} else {
		log.Info("agent connection ended", "err", err)
		c.ws.CloseNow()
	}
	if c.shutdown.Load() {
		// Leave the device as it is: it reconnects to the next relay
		// process before its deadline, or the sweeper takes it OFFLINE.
		return
	}
	dctx, dcancel := context.WithTimeout(context.Background(), s.cfg.WriteTimeout)
	defer dcancel()
	dch, ok, err := s.cfg.Store.Disconnect(dctx, c.dev, c.session, s.now(), "connection closed")
	if err != nil {
		log.Error("agent disconnect not stored", "err", err)
		return
	}
	if ok {
		s.statusChanged(dch)
	}
}

// register makes c the device's connection on this relay and closes the
// one it replaces; a connection opened before the registered one (its
// Store.Connect finished first, its register came late) is closed instead.
func (s *Server) register(c *conn) {
	s.mu.Lock()
	old := s.conns[c.dev.ID]
	if old != nil && old.opened > c.opened {
		old, c = c, nil
	} else {
		s.conns[c.dev.ID] = c
	}
	closing := s.closing
	s.mu.Unlock()
	if closing && c != nil {
		c.shutdown.Store(true)
		c.kill(protocol.CloseServiceRestart, "relay shutting down")
	}
	if old != nil {
		old.kill(protocol.CloseReplaced, "replaced by a newer connection of the same device")
	}
}

func (s *Server) unregister(c *conn) {
	s.mu.Lock()
	if s.conns[c.dev.ID] == c {
		delete(s.conns, c.dev.ID)
	}
	s.mu.Unlock()
}

func (s *Server) lookup(deviceID string) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns[deviceID]
}

// statusChanged tells the Observers about a stored status change and the
// events recorded with it (device.online or device.offline, and
// device.status_changed), in one EventsStored.
func (s *Server) statusChanged(ch StatusChange) {
	ref := ch.Device.Ref()
	if ch.Changed() {
		for _, o := range s.cfg.Observers {
			o.StatusChanged(s.ctx, ref, ch.From, ch.To)
		}
	}
	switch {
	case ch.Event != nil && ch.StatusEvent != nil:
		s.eventsStored(ref, []resource.Event{*ch.Event, *ch.StatusEvent})
	case ch.Event != nil:
		s.eventsStored(ref, []resource.Event{*ch.Event})
	case ch.StatusEvent != nil:
		s.eventsStored(ref, []resource.Event{*ch.StatusEvent})
	}
}

func (s *Server) eventsStored(ref cloud.DeviceRef, evs []resource.Event) {
	if len(evs) == 0 {
		return
	}
	for _, o := range s.cfg.Observers {
		o.EventsStored(s.ctx, ref, evs)
	}
}

// DesiredConfigChanged implements cloud.DesiredConfigObserver: a connected
// agent of deviceID receives the new configuration at once, and its
// unfinished commands (on a cluster, the store raises the device's
// configuration notification when it adds a command, so every relay hears
// of commands here).
func (s *Server) DesiredConfigChanged(deviceID string) {
	c := s.lookup(deviceID)
	if c == nil || !c.welcomed.Load() {
		return // sent after its next Hello
	}
	go func() {
		c.pushConfig(0)
		c.pushCommands()
	}()
}

// CommandsChanged implements cloud.CommandsObserver: a connected agent of
// deviceID receives its unfinished commands at once.
func (s *Server) CommandsChanged(deviceID string) {
	c := s.lookup(deviceID)
	if c == nil || !c.welcomed.Load() || s.cfg.Commands == nil {
		return // sent after its next Hello
	}
	go c.pushCommands()
}

// Superseded closes this relay's connection of deviceID unless it is
// session: another relay (a store shared by several) reports that session
// took the device. Without it, the old connection ends at its next write,
// which the store refuses (ErrSessionGone).
func (s *Server) Superseded(deviceID, session string) {
	if c := s.lookup(deviceID); c != nil && c.session != session {
		c.log().Info("device connected elsewhere; closing this connection")
		c.kill(protocol.CloseReplaced, "replaced by a newer connection of the same device")
	}
}

// Revoked closes this relay's connection of deviceID, whose token was
// revoked (the periodic check, RevocationCheck, does the same later).
func (s *Server) Revoked(deviceID string) {
	if c := s.lookup(deviceID); c != nil {
		c.log().Warn("device token revoked; closing its connection")
		c.kill(protocol.CloseUnauthorized, "device token revoked")
	}
}

// Run sweeps devices whose heartbeats stopped to OFFLINE and pings idle
// connections, until ctx ends. At start it gives devices that a previous
// relay process left connected OrphanWindow to come back.
func (s *Server) Run(ctx context.Context) error {
	if n, err := s.cfg.Store.Orphans(ctx, s.now(), s.cfg.OrphanWindow); err != nil {
		s.log.Error("agent sweeper: orphan recovery failed", "err", err)
	} else if n > 0 {
		s.log.Info("agent sweeper: devices left connected by a previous relay get a reconnect window", "devices", n, "window", s.cfg.OrphanWindow)
	}
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	rt := time.NewTicker(s.cfg.RevocationCheck)
	defer rt.Stop()
	lt := time.NewTicker(s.cfg.RefusalLogInterval)
	defer lt.Stop()
	defer s.refusals.flush()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.ctx.Done():
			return nil
		case <-t.C:
			s.sweep(ctx)
		case <-rt.C:
			s.closeRevoked(ctx)
		case <-lt.C:
			s.refusals.flush()
			s.budgets.sweep(time.Now())
		}
	}
}

// closeRevoked closes the connections of devices whose token was revoked
// while they were connected; the close takes them OFFLINE.
func (s *Server) closeRevoked(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ids, err := s.cfg.Store.Revoked(rctx)
	cancel()
	if err != nil {
		s.log.Error("revocation check failed", "err", err)
		return
	}
	for _, id := range ids {
		if c := s.lookup(id); c != nil {
			c.log().Warn("device token revoked; closing its connection")
			c.kill(protocol.CloseUnauthorized, "device token revoked")
		}
	}
}

func (s *Server) sweep(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	changes, err := s.cfg.Store.Sweep(sctx, s.now())
	cancel()
	if err != nil {
		s.log.Error("agent sweeper failed", "err", err)
	}
	for _, ch := range changes {
		s.log.Info("device offline: its stored deadline passed", "device", ch.Device.ID)
		s.statusChanged(ch)
		if c := s.lookup(ch.Device.ID); c != nil {
			c.kill(websocket.StatusPolicyViolation, "no heartbeat for three intervals")
			c.expired.Store(true)
		}
	}
	// A connection without a heartbeat for three intervals takes its device
	// OFFLINE; one that went quiet for an interval and a half is pinged, so
	// a dead peer is noticed early.
	now := time.Now()
	s.mu.Lock()
	var idle, dead []*conn
	for _, c := range s.conns {
		hb := time.Duration(c.hbInterval.Load())
		if hb == 0 || c.expired.Load() {
			continue
		}
		if now.Sub(time.Unix(0, c.lastBeat.Load())) > 3*hb {
			c.expired.Store(true)
			dead = append(dead, c)
			continue
		}
		if now.Sub(time.Unix(0, c.lastMsg.Load())) > hb+hb/2 && !c.pinging.Load() {
			idle = append(idle, c)
		}
	}
	s.mu.Unlock()
	for _, c := range dead {
		go s.expire(c)
	}
	for _, c := range idle {
		select {
		case s.pings <- struct{}{}:
		default:
			return
		}
		c.pinging.Store(true)
		go func() {
			defer func() { <-s.pings; c.pinging.Store(false) }()
			pctx, cancel := context.WithTimeout(context.Background(), s.cfg.WriteTimeout)
			defer cancel()
			if err := c.ws.Ping(pctx); err != nil {
				c.log().Info("agent did not answer a ping; closing", "err", err)
				c.ws.CloseNow()
			}
		}()
	}
}

// expire takes c's device OFFLINE after three silent heartbeat intervals
// and closes c.
func (s *Server) expire(c *conn) {
	const reason = "no heartbeat for three intervals"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch, ok, err := s.cfg.Store.Disconnect(ctx, c.dev, c.session, s.now(), reason)
	if err != nil {
		c.log().Error("offline not stored", "err", err)
	} else if ok {
		c.log().Info("device offline: " + reason)
		s.statusChanged(ch)
	}
	c.kill(websocket.StatusPolicyViolation, reason)
}

// Shutdown closes every agent connection with protocol.CloseServiceRestart and
// waits for their handlers to finish, or for ctx. Devices keep their status:
// agents reconnect to the next relay before their deadline, or the sweeper
// of the next relay takes them OFFLINE. New upgrades are refused with 503.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	conns := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.shutdown.Store(true)
		c.kill(protocol.CloseServiceRestart, "relay shutting down")
	}
	done := make(chan struct{})
	go func() {
		s.handlers.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		s.mu.Lock()
		for _, c := range s.conns {
			c.ws.CloseNow()
		}
		s.mu.Unlock()
	}
	s.cancel()
	return err
}
