// Package smtptest runs a real SMTP server on loopback for tests
// (github.com/emersion/go-smtp's server): plain, with STARTTLS or with
// implicit TLS on a certificate of its own test CA, with or without AUTH
// PLAIN, answering each message as a test scripts it, and recording what it
// accepted.
package smtptest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Mode is how a Server secures its connections.
type Mode int

// Modes.
const (
	Plain    Mode = iota // no TLS, no STARTTLS offered
	StartTLS             // STARTTLS offered
	TLS                  // implicit TLS from the first byte
)

// Options configures a Server.
type Options struct {
	Mode Mode
	// User and Password, when User is set, make the server offer AUTH
	// PLAIN and require it.
	User, Password string
	// Reply, when set, answers each message after its DATA: 0 accepts
	// it (250), another code refuses it with that code.
	Reply func(n int, m Received) int
}

// Received is a message the server got.
type Received struct {
	From string
	To   []string
	Data []byte
	TLS  bool   // the session ran over TLS
	User string // who authenticated ("" without AUTH)
}

// Server is a running SMTP server on 127.0.0.1.
type Server struct {
	// Addr is host:port; CA trusts its certificate.
	Addr string
	CA   *x509.CertPool

	opts Options
	srv  *smtp.Server
	mu   sync.Mutex
	got  []Received
	n    int
	ch   chan Received
}

// Start starts a server; it stops at the end of the test.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s := &Server{opts: opts, ch: make(chan Received, 1000)}
	s.srv = smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		_, tlsOn := c.TLSConnectionState()
		return &session{s: s, tls: tlsOn}, nil
	}))
	s.srv.Domain = "smtptest.localhost"
	s.srv.ReadTimeout, s.srv.WriteTimeout = 10*time.Second, 10*time.Second
	s.srv.MaxMessageBytes = 1 << 20
	var cert tls.Certificate
	cert, s.CA = selfSigned(t)
	tlsCfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	switch opts.Mode {
	case StartTLS:
		s.srv.TLSConfig = tlsCfg
	case TLS:
		ln = tls.NewListener(ln, tlsCfg)
	}
	s.Addr = ln.Addr().String()
	go s.srv.Serve(ln)
	t.Cleanup(func() { s.srv.Close() })
	return s
}

// Port is the server's port.
func (s *Server) Port() int {
	_, p, _ := net.SplitHostPort(s.Addr)
	n, _ := strconv.Atoi(p)
	return n
}

// Messages returns the messages accepted so far.
func (s *Server) Messages() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.got...)
}

// Wait returns the next accepted message, failing the test after d.
func (s *Server) Wait(t testing.TB, d time.Duration) Received {
	t.Helper()
	select {
	case m := <-s.ch:
		return m
	case <-time.After(d):
		t.Fatalf("smtptest: no message within %s", d)
		return Received{}
	}
}

// Attempts is how many messages reached DATA's end (accepted or not).
func (s *Server) Attempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

type session struct {
	s    *Server
	tls  bool
	user string
	cur  Received
}

var errAuthFirst = &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "Authentication required"}

func (ss *session) AuthMechanisms() []string {
	if ss.s.opts.User == "" {
		return nil
	}
	return []string{sasl.Plain}
}

func (ss *session) Auth(mech string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(identity, user, pass string) error {
		if user != ss.s.opts.User || pass != ss.s.opts.Password {
			return smtp.ErrAuthFailed
		}
		ss.user = user
		return nil
	}), nil
}

func (ss *session) Mail(from string, _ *smtp.MailOptions) error {
	if ss.s.opts.User != "" && ss.user == "" {
		return errAuthFirst
	}
	ss.cur = Received{From: from, TLS: ss.tls, User: ss.user}
	return nil
}

func (ss *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	ss.cur.To = append(ss.cur.To, to)
	return nil
}

func (ss *session) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	m := ss.cur
	m.Data = b
	s := ss.s
	s.mu.Lock()
	s.n++
	n := s.n
	s.mu.Unlock()
	if s.opts.Reply != nil {
		if code := s.opts.Reply(n, m); code != 0 {
			return &smtp.SMTPError{Code: code, EnhancedCode: smtp.EnhancedCodeNotSet, Message: "refused by the test (" + strconv.Itoa(code) + ")"}
		}
	}
	s.mu.Lock()
	s.got = append(s.got, m)
	s.mu.Unlock()
	s.ch <- m
	return nil
}

func (ss *session) Reset()        { ss.cur = Received{} }
func (ss *session) Logout() error { return nil }

// selfSigned makes a certificate for 127.0.0.1, ::1 and localhost and the
// pool that trusts it.
func selfSigned(t testing.TB) (tls.Certificate, *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "smtptest"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(errors.Join(errors.New("smtptest: certificate"), err))
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}
