// Package onewrite sends a whole HTTP/1.1 response in one write to the
// socket where net/http would use two.
//
// net/http buffers a connection's output in 4 KiB. A response whose header
// and body pass that size (a page of 25 devices is about 6 KB) leaves in two
// write calls: the full buffer, then the rest when the handler returns. On a
// TCP connection each write is a segment sent, received and woken up for
// on the other side, so the second one costs about as much as the first.
// Listener hands net/http connections that can hold what net/http writes
// while a handler sends a body it already has in full (Write), and send it
// in one write with the rest.
//
// Nothing else changes: a connection that is not holding writes straight
// through (websockets after Hijack, streamed bodies, TLS, which sees only
// its own records), and a handler on a server without the Listener (tests
// on httptest) just writes.
package onewrite

import (
	"context"
	"errors"
	"net"
	"net/http"
	"syscall"
)

// Listener wraps accepted connections; serve with ConnContext as the
// http.Server's ConnContext.
type Listener struct{ net.Listener }

// Accept returns the next connection, able to hold writes.
func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: c}, nil
}

// Conn is a connection that can hold writes until the end of a response.
// Only the goroutine serving its current request writes to it (net/http's
// rule), so it needs no lock.
type Conn struct {
	net.Conn
	holding bool
	held    []byte
}

// Write sends p, or keeps it while the connection holds; the first write
// after a hold sends what was held and p together, in one write.
func (c *Conn) Write(p []byte) (int, error) {
	if c.holding {
		c.held = append(c.held, p...)
		return len(p), nil
	}
	if len(c.held) == 0 {
		return c.Conn.Write(p)
	}
	before := len(c.held)
	c.held = append(c.held, p...)
	n, err := c.Conn.Write(c.held)
	c.release()
	return max(0, n-before), err
}

// flushHeld sends what is held, if anything.
func (c *Conn) flushHeld() error {
	if len(c.held) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.held)
	c.release()
	return err
}

// release empties the held bytes, keeping a buffer of a response's size
// for the next one.
func (c *Conn) release() {
	if cap(c.held) > 64<<10 {
		c.held = nil
		return
	}
	c.held = c.held[:0]
}

// CloseWrite half-closes the connection where the connection can (net/http
// uses it to finish a response before closing).
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

type connKey struct{}

// ConnContext records the request's connection for Write; it is the
// http.Server's ConnContext.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if oc, ok := c.(*Conn); ok {
		return context.WithValue(ctx, connKey{}, oc)
	}
	return ctx
}

// Write writes body, whose header the handler has set (with its
// Content-Length), as the response to r: in one write to the socket when r
// came through a Listener, otherwise as w.Write does.
func Write(w http.ResponseWriter, r *http.Request, body []byte) error {
	c, _ := r.Context().Value(connKey{}).(*Conn)
	if c == nil {
		_, err := w.Write(body)
		return err
	}
	c.holding = true
	_, err := w.Write(body)
	c.holding = false
	if err == nil {
		// Push net/http's buffered rest through Conn.Write, which sends it
		// with what was held.
		err = http.NewResponseController(w).Flush()
	}
	if ferr := c.flushHeld(); err == nil {
		err = ferr
	}
	return err
}

// SyscallConn gives the wrapped connection's descriptor where it has one:
// the agent endpoint reads a hijacked websocket through it
// (cloud/agentlink's read buffers borrowed only while bytes wait).
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}
