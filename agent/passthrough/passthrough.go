// Package passthrough exposes the gateway's serial channels (uart, rs485)
// raw over the VPN: in mode passthrough or both, each channel is a TCP port
// bound only to the VPN interface's address, channels on consecutive ports
// in catalog order. One client at a time per channel: a second client is
// refused (accepted and closed at once, with a log line) while the first is
// attached. A client idle for IdleTimeout is disconnected. In mode managed no
// port is open. How bytes reach the bus is the channel driver's business
// (RawServer): an rs485 channel runs each request as one transaction under
// its bus lock, so a raw client and managed polling never interleave frames.
package passthrough

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// Modes.
const (
	ModeManaged     = "managed"
	ModePassthrough = "passthrough"
	ModeBoth        = "both"
)

// ErrNoVPNAddress is returned by Apply when the listen host is empty and the
// VPN interface has no IPv4 address (it is missing or down).
var ErrNoVPNAddress = errors.New("passthrough: VPN interface has no IPv4 address")

// RawServer is a serial channel's raw access: it serves one client until
// the client's Read or Write fails or ctx ends, returning nil when the
// client closed. *modbus.Port and *uart.Port implement it.
type RawServer interface {
	ServeRaw(ctx context.Context, rw io.ReadWriter) error
}

// Managed is implemented by channels whose own traffic (polling, tx) can be
// paused; Apply pauses it in mode passthrough and runs it otherwise.
type Managed interface {
	SetManaged(on bool)
}

// Channel is one serial channel offered raw.
type Channel struct {
	// ID is the channel id, such as "rs485-1".
	ID string
	// Raw is the channel's open port; nil while it is unavailable (the
	// channel keeps its port number but gets no listener).
	Raw RawServer
}

// Config configures a Server.
type Config struct {
	// Listen is HOST:BASEPORT (the agent's --passthrough-listen). The n-th
	// serial channel (from 0, catalog order) listens on BASEPORT+n. An empty
	// HOST means the IPv4 address of Interface; there is no default to all
	// interfaces.
	Listen string
	// Interface is the VPN interface whose address an empty HOST means
	// (default "wg0").
	Interface string
	// IdleTimeout disconnects a client that sent nothing for this long
	// (default 10 minutes).
	IdleTimeout time.Duration
	// WriteTimeout bounds one write to a client (default 10 s): a client
	// that stops reading is disconnected rather than stalling the bus.
	WriteTimeout time.Duration
}

// Server runs the passthrough listeners.
type Server struct {
	cfg  Config
	host string
	base int
	log  *slog.Logger

	mu        sync.Mutex
	listeners map[string]*listener
	closed    bool
}

type listener struct {
	id   string
	raw  RawServer
	addr string
	ln   net.Listener
	log  *slog.Logger
	srv  *Server

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	client net.Conn
}

// New returns a Server; nothing listens until Apply.
func New(cfg Config, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Interface == "" {
		cfg.Interface = "wg0"
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 10 * time.Minute
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	host, port, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("passthrough listen %q: want HOST:BASEPORT: %w", cfg.Listen, err)
	}
	base, err := strconv.Atoi(port)
	if err != nil || base < 1 || base > 65535 {
		return nil, fmt.Errorf("passthrough listen %q: base port must be 1..65535", cfg.Listen)
	}
	if host != "" {
		ip := net.ParseIP(host)
		if ip == nil {
			return nil, fmt.Errorf("passthrough listen %q: host must be an IP address", cfg.Listen)
		}
		if ip.IsUnspecified() {
			log.Warn("passthrough listens on all interfaces, as asked", "listen", cfg.Listen)
		}
	}
	return &Server{cfg: cfg, host: host, base: base, log: log, listeners: map[string]*listener{}}, nil
}

// Apply makes the listeners match mode and channels (every serial channel
// of the model, in catalog order). In mode managed every listener closes;
// in passthrough and both each available channel listens. Channels that
// implement Managed have their own traffic paused in mode passthrough and
// running otherwise. Unchanged listeners, and their clients, are kept.
func (s *Server) Apply(mode string, channels []Channel) error {
	switch mode {
	case ModeManaged, ModePassthrough, ModeBoth:
	default:
		return fmt.Errorf("passthrough: unknown mode %q", mode)
	}
	for _, ch := range channels {
		if m, ok := ch.Raw.(Managed); ok {
			m.SetManaged(mode != ModePassthrough)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("passthrough: server closed")
	}
	want := map[string]string{} // channel id -> address
	var hostErr error
	if mode != ModeManaged {
		host, err := s.listenHost()
		if err != nil {
			hostErr = err
		} else {
			for i, ch := range channels {
				if ch.Raw != nil && s.base+i <= 65535 {
					want[ch.ID] = net.JoinHostPort(host, strconv.Itoa(s.base+i))
				}
			}
		}
	}
	raws := map[string]RawServer{}
	for _, ch := range channels {
		raws[ch.ID] = ch.Raw
	}
	for id, l := range s.listeners {
		if want[id] != l.addr || raws[id] != l.raw {
			l.close()
			delete(s.listeners, id)
		}
	}
	var errs []error
	if hostErr != nil {
		errs = append(errs, hostErr)
	}
	for _, ch := range channels {
		addr, ok := want[ch.ID]
		if !ok || s.listeners[ch.ID] != nil {
			continue
		}
		l, err := s.listen(ch, addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.listeners[ch.ID] = l
	}
	return errors.Join(errs...)
}

// listenHost is the configured host, or the VPN interface's IPv4 address.
func (s *Server) listenHost() (string, error) {
	if s.host != "" {
		return s.host, nil
	}
	ifi, err := net.InterfaceByName(s.cfg.Interface)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrNoVPNAddress, s.cfg.Interface, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrNoVPNAddress, s.cfg.Interface, err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			return n.IP.String(), nil
		}
	}
	return "", fmt.Errorf("%w: %s", ErrNoVPNAddress, s.cfg.Interface)
}

// PassthroughAddress returns "host:port" of the channel's listener, or ""
// when it has none.
func (s *Server) PassthroughAddress(channelID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.listeners[channelID]; l != nil {
		return l.addr
	}
	return ""
}

// Close closes every listener and client.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for id, l := range s.listeners {
		l.close()
		delete(s.listeners, id)
	}
	return nil
}

func (s *Server) listen(ch Channel, addr string) (*listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("passthrough %s: %w", ch.ID, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{id: ch.ID, raw: ch.Raw, addr: addr, ln: ln, srv: s, ctx: ctx, cancel: cancel,
		log: s.log.With("channel", ch.ID, "listen", addr)}
	l.log.Info("passthrough listening")
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

func (l *listener) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if l.ctx.Err() != nil {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			l.log.Warn("passthrough accept", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		l.mu.Lock()
		busy := l.client != nil
		if !busy {
			l.client = c
		}
		l.mu.Unlock()
		if busy {
			// Policy: the attached client keeps the bus; a second one is
			// refused at once so it does not wait on a port it cannot use.
			l.log.Warn("passthrough: second client refused, channel in use", "client", c.RemoteAddr().String())
			c.Close()
			continue
		}
		l.wg.Add(1)
		go l.serve(c)
	}
}

func (l *listener) serve(c net.Conn) {
	defer l.wg.Done()
	log := l.log.With("client", c.RemoteAddr().String())
	log.Info("passthrough client attached")
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	ic := &idleConn{Conn: c, idle: l.srv.cfg.IdleTimeout, write: l.srv.cfg.WriteTimeout}
	err := l.raw.ServeRaw(l.ctx, ic)
	c.Close()
	l.mu.Lock()
	l.client = nil
	l.mu.Unlock()
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded) && ic.readTimedOut():
		log.Info("passthrough client disconnected: idle timeout", "idle", l.srv.cfg.IdleTimeout)
	case err == nil || l.ctx.Err() != nil || errors.Is(err, net.ErrClosed):
		log.Info("passthrough client detached")
	default:
		log.Info("passthrough client detached", "err", err)
	}
}

func (l *listener) close() {
	l.cancel()
	l.ln.Close()
	l.mu.Lock()
	if l.client != nil {
		l.client.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
	l.log.Info("passthrough closed")
}

// idleConn refreshes a read deadline before every read (the idle timeout)
// and bounds every write.
type idleConn struct {
	net.Conn
	idle, write time.Duration

	mu      sync.Mutex
	timeout bool
}

func (c *idleConn) Read(b []byte) (int, error) {
	c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	n, err := c.Conn.Read(b)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.mu.Lock()
		c.timeout = true
		c.mu.Unlock()
	}
	return n, err
}

func (c *idleConn) Write(b []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.write))
	return c.Conn.Write(b)
}

func (c *idleConn) readTimedOut() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.timeout
}
