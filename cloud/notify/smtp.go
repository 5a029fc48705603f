package notify

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// SMTP URL schemes (--smtp-url).
const (
	SchemeSTARTTLS = "smtp"          // STARTTLS required, port 587 by default
	SchemeTLS      = "smtps"         // implicit TLS, port 465 by default
	SchemeInsecure = "smtp+insecure" // plain, loopback hosts only, port 25 by default
)

// DefaultSMTPTimeout bounds the dial and each SMTP command.
const DefaultSMTPTimeout = 10 * time.Second

// SMTPServer is a parsed --smtp-url.
type SMTPServer struct {
	Scheme   string
	Host     string // without port
	Port     string
	User     string
	Password string
}

// Addr is host:port.
func (s SMTPServer) Addr() string { return net.JoinHostPort(s.Host, s.Port) }

// String is the URL with its password hidden: safe to log.
func (s SMTPServer) String() string {
	u := url.URL{Scheme: s.Scheme, Host: s.Addr()}
	if s.User != "" {
		u.User = url.User(s.User)
		if s.Password != "" {
			u.User = url.UserPassword(s.User, "xxxxx")
		}
	}
	return u.String()
}

// ParseSMTPURL parses an SMTP URL: smtp://[user[:pass]@]host[:port]
// (STARTTLS required), smtps://... (implicit TLS) or
// smtp+insecure://host[:port] (no TLS; the host must be loopback). Errors
// never show the password.
func ParseSMTPURL(raw string) (SMTPServer, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return SMTPServer{}, errors.New("not a valid URL (want smtp://user:pass@host:587, smtps://user:pass@host:465 or smtp+insecure://127.0.0.1:25)")
	}
	s := SMTPServer{Scheme: strings.ToLower(u.Scheme), Host: u.Hostname(), Port: u.Port()}
	if u.User != nil {
		s.User = u.User.Username()
		s.Password, _ = u.User.Password()
	}
	switch s.Scheme {
	case SchemeSTARTTLS:
		s.Port = cmpOr(s.Port, "587")
	case SchemeTLS:
		s.Port = cmpOr(s.Port, "465")
	case SchemeInsecure:
		s.Port = cmpOr(s.Port, "25")
		if !loopbackHost(s.Host) {
			return s, fmt.Errorf("smtp+insecure:// sends without TLS, so only to a relay on loopback (localhost, 127.0.0.1, ::1), not %q: use smtp:// (STARTTLS) or smtps://", s.Host)
		}
	default:
		return s, fmt.Errorf("scheme %q: want smtp:// (STARTTLS), smtps:// (TLS) or smtp+insecure:// (loopback only)", u.Scheme)
	}
	switch {
	case s.Host == "":
		return s, errors.New("a host is required")
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		return s, errors.New("no path, query or fragment allowed")
	case s.User == "" && s.Password != "":
		return s, errors.New("a password needs a user")
	}
	if _, err := net.LookupPort("tcp", s.Port); err != nil {
		return s, fmt.Errorf("port %q: %w", s.Port, err)
	}
	return s, nil
}

func loopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.Unmap().IsLoopback()
}

// SMTPConfig configures an SMTP sender.
type SMTPConfig struct {
	Server SMTPServer
	// From is the sender address (a plain address: fleet@example.com).
	From string
	// RootCAs verifies the server's certificate; nil is the system's pool.
	// Tests trust their own CA here: there is no way to skip verification.
	RootCAs *x509.CertPool
	// Timeout bounds the dial and each command; 0 means DefaultSMTPTimeout.
	Timeout time.Duration
}

// SMTP sends e-mail through one SMTP server. It is safe for concurrent use:
// each Send is its own connection.
type SMTP struct {
	cfg  SMTPConfig
	helo string
}

// NewSMTP checks cfg and returns its sender.
func NewSMTP(cfg SMTPConfig) (*SMTP, error) {
	if cfg.Server.Host == "" {
		return nil, errors.New("notify: an SMTP server is required")
	}
	a, err := mail.ParseAddress(cfg.From)
	if err != nil || a.Name != "" || a.Address != cfg.From {
		return nil, fmt.Errorf("notify: sender %q is not a plain e-mail address", cfg.From)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultSMTPTimeout
	}
	return &SMTP{cfg: cfg, helo: cfg.From[strings.LastIndexByte(cfg.From, '@')+1:]}, nil
}

// From is the sender address.
func (s *SMTP) From() string { return s.cfg.From }

// Server is the server the sender sends through.
func (s *SMTP) Server() SMTPServer { return s.cfg.Server }

// ErrPermanent marks a failure that sending again will not cure: the
// server answered 5xx (errors.Is(err, ErrPermanent)).
var ErrPermanent = errors.New("permanent failure")

// SendError is why a Send failed: the SMTP reply code when the server
// answered (0 for a connection, TLS or timeout failure), what the relay
// was doing, and the cause. Its text holds no password.
type SendError struct {
	Code  int
	Stage string // "dial", "starttls", "auth", "mail", "rcpt", "data", ...
	Err   error
}

func (e *SendError) Error() string { return "smtp " + e.Stage + ": " + e.Err.Error() }
func (e *SendError) Unwrap() error { return e.Err }

// Is makes a 5xx reply ErrPermanent.
func (e *SendError) Is(target error) bool {
	return target == ErrPermanent && e.Code >= 500 && e.Code <= 599
}

// Send sends msg (an RFC 5322 message, CRLF lines) to the recipients and
// returns the server's final reply code (250 when accepted). A failure is
// a *SendError; a 5xx reply is ErrPermanent, anything else (4xx, timeout,
// connection, TLS) may succeed later.
func (s *SMTP) Send(ctx context.Context, to []string, msg []byte) (int, error) {
	c, err := s.dial(ctx)
	if err != nil {
		return code(err), err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	step := func(stage string, err error) error {
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return &SendError{Code: smtpCode(err), Stage: stage, Err: err}
	}
	if s.cfg.Server.User != "" {
		if ok, _ := c.Extension("AUTH"); !ok {
			return 0, &SendError{Stage: "auth", Err: errors.New("the server offers no AUTH, but the URL has a user")}
		}
		if err := step("auth", c.Auth(sasl.NewPlainClient("", s.cfg.Server.User, s.cfg.Server.Password))); err != nil {
			return code(err), err
		}
	}
	if err := step("mail", c.Mail(s.cfg.From, nil)); err != nil {
		return code(err), err
	}
	for _, a := range to {
		if err := step("rcpt", c.Rcpt(a, nil)); err != nil {
			return code(err), err
		}
	}
	w, err := c.Data()
	if err := step("data", err); err != nil {
		return code(err), err
	}
	if _, err := w.Write(msg); err != nil {
		return 0, step("data", err)
	}
	if _, err := w.CloseWithResponse(); err != nil {
		err = step("data", err)
		return code(err), err
	}
	c.Quit() // the message is accepted; a failed QUIT changes nothing
	return 250, nil
}

// dial connects, greets, secures (STARTTLS or implicit TLS) and says
// EHLO as the sender's domain.
func (s *SMTP) dial(ctx context.Context) (*smtp.Client, error) {
	srv := s.cfg.Server
	d := &net.Dialer{Timeout: s.cfg.Timeout}
	if srv.Scheme == SchemeInsecure {
		// The address the name resolved to must be loopback too.
		d.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil || !ap.Addr().Unmap().IsLoopback() {
				return fmt.Errorf("smtp+insecure:// dials loopback only, not %s", address)
			}
			return nil
		}
	}
	dctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	raw, err := d.DialContext(dctx, "tcp", srv.Addr())
	if err != nil {
		return nil, &SendError{Stage: "dial", Err: err}
	}
	conn := &boundedConn{Conn: raw, limit: s.cfg.Timeout}
	tlsCfg := &tls.Config{ServerName: srv.Host, RootCAs: s.cfg.RootCAs, MinVersion: tls.VersionTLS12}
	var c *smtp.Client
	switch srv.Scheme {
	case SchemeTLS:
		tc := tls.Client(conn, tlsCfg)
		if err := tc.HandshakeContext(dctx); err != nil {
			raw.Close()
			return nil, &SendError{Stage: "tls", Err: err}
		}
		c = smtp.NewClient(tc)
	case SchemeSTARTTLS:
		c, err = smtp.NewClientStartTLS(conn, tlsCfg)
		if err != nil {
			raw.Close()
			if smtpCode(err) == 0 && strings.Contains(err.Error(), "STARTTLS") && !errors.Is(err, net.ErrClosed) {
				err = errors.New("the server does not offer STARTTLS: refusing to send in clear (use smtps:// for implicit TLS)")
			}
			return nil, &SendError{Code: smtpCode(err), Stage: "starttls", Err: err}
		}
	default:
		c = smtp.NewClient(conn)
	}
	c.CommandTimeout, c.SubmissionTimeout = s.cfg.Timeout, s.cfg.Timeout
	if err := c.Hello(s.helo); err != nil {
		c.Close()
		return nil, &SendError{Code: smtpCode(err), Stage: "hello", Err: err}
	}
	return c, nil
}

// boundedConn caps every deadline go-smtp sets (and its "none") at limit
// from now: the greeting and the STARTTLS exchange, which run before the
// client's CommandTimeout can be set, are bounded too.
type boundedConn struct {
	net.Conn
	limit time.Duration
}

func (c *boundedConn) SetDeadline(t time.Time) error {
	if max := time.Now().Add(c.limit); t.IsZero() || t.After(max) {
		t = max
	}
	return c.Conn.SetDeadline(t)
}

func smtpCode(err error) int {
	var se *smtp.SMTPError
	if errors.As(err, &se) {
		return se.Code
	}
	return 0
}

func code(err error) int {
	var se *SendError
	if errors.As(err, &se) {
		return se.Code
	}
	return 0
}

// SendMessage renders m as an e-mail (Message.Email, Message-ID from
// deliveryID) and sends it; see Send.
func (s *SMTP) SendMessage(ctx context.Context, deliveryID string, to []string, m Message, publicURL string, now time.Time) (int, error) {
	msg, err := m.Email(Mail{From: s.cfg.From, To: to, ID: deliveryID, Date: now}, publicURL)
	if err != nil {
		return 0, &SendError{Code: 554, Stage: "render", Err: err}
	}
	return s.Send(ctx, to, msg)
}
