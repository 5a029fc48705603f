package onewrite_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/internal/onewrite"
)

// counted counts the writes that reach a server-side connection.
type counted struct {
	net.Conn
	l *countingListener
}

func (c *counted) Write(p []byte) (int, error) {
	c.l.mu.Lock()
	c.l.sizes = append(c.l.sizes, len(p))
	c.l.mu.Unlock()
	return c.Conn.Write(p)
}

type countingListener struct {
	net.Listener
	mu    sync.Mutex
	sizes []int
}

// writes returns the sizes of the writes so far.
func (l *countingListener) writes() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.sizes...)
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &counted{Conn: c, l: l}, nil
}

// client is one keep-alive connection to a server that serves through
// onewrite.Listener, and the writes the server's connections received.
type client struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
	cl *countingListener
}

// serve starts an HTTP server on loopback with h and dials it.
func serve(t *testing.T, h http.Handler) *client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, ConnContext: onewrite.ConnContext, Handler: h}
	go srv.Serve(onewrite.Listener{Listener: cl})
	t.Cleanup(func() { srv.Close() })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c, br: bufio.NewReader(c), cl: cl}
}

// bodies answers GET /?n=N&how=onewrite|plain with N bytes of body.
func bodies(t *testing.T) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.WriteHeader(http.StatusOK)
		if r.URL.Query().Get("how") == "plain" {
			_, _ = w.Write(body(n))
			return
		}
		if err := onewrite.Write(w, r, body(n)); err != nil && r.Method != http.MethodHead {
			t.Errorf("onewrite.Write: %v", err)
		}
	})
}

func body(n int) []byte { return bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n] }

// get sends one request and reads its response.
func (c *client) get(method, target string) *http.Response {
	c.t.Helper()
	fmt.Fprintf(c.c, "%s %s HTTP/1.1\r\nHost: x\r\n\r\n", method, target)
	req, _ := http.NewRequest(method, target, nil)
	res, err := http.ReadResponse(c.br, req)
	if err != nil {
		c.t.Fatal(err)
	}
	return res
}

func TestOneWritePerResponse(t *testing.T) {
	c := serve(t, bodies(t))
	// Sizes around net/http's 2 KiB and 4 KiB buffers, a page of devices
	// and a body many times the buffer, all on one keep-alive connection.
	for _, n := range []int{0, 10, 2048, 3900, 4096, 6200, 8192, 100_000} {
		before := len(c.cl.writes())
		res := c.get(http.MethodGet, fmt.Sprintf("/?n=%d", n))
		got, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusOK || !bytes.Equal(got, body(n)) {
			t.Fatalf("n=%d: status %d, body of %d bytes, want 200 and %d bytes as sent", n, res.StatusCode, len(got), n)
		}
		if w := c.cl.writes()[before:]; len(w) != 1 {
			t.Errorf("n=%d: the response took %d writes %v, want 1", n, len(w), w)
		}
	}
	// HEAD: the header alone, in one write, and the connection stays usable.
	before := len(c.cl.writes())
	res := c.get(http.MethodHead, "/?n=6200")
	if res.ContentLength != 6200 || len(c.cl.writes())-before != 1 {
		t.Errorf("HEAD: Content-Length %d in %d writes, want 6200 in 1", res.ContentLength, len(c.cl.writes())-before)
	}
	res = c.get(http.MethodGet, "/?n=5")
	if b, _ := io.ReadAll(res.Body); string(b) != "01234" {
		t.Errorf("after HEAD: body %q, want 01234", b)
	}
}

// The same body written as net/http alone writes it leaves in two writes:
// what the package exists to avoid (and what makes the test above able to
// fail).
func TestPlainWriteTakesTwo(t *testing.T) {
	c := serve(t, bodies(t))
	res := c.get(http.MethodGet, "/?n=6200&how=plain")
	if b, _ := io.ReadAll(res.Body); len(b) != 6200 {
		t.Fatalf("body of %d bytes, want 6200", len(b))
	}
	if w := c.cl.writes(); len(w) != 2 {
		t.Errorf("plain w.Write took %d writes %v; net/http's buffering changed, revisit onewrite", len(w), w)
	}
}

// A hijacked connection (the agents' websockets) writes straight through.
func TestHijackedWritesThrough(t *testing.T) {
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_ = brw.Flush()
		for _, s := range []string{"one\n", "two\n"} {
			if _, err := conn.Write([]byte(s)); err != nil {
				t.Error(err)
			}
		}
	}))
	fmt.Fprint(c.c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	got, _ := io.ReadAll(c.c)
	if w := c.cl.writes(); string(got) != "one\ntwo\n" || len(w) != 2 {
		t.Errorf("hijacked: read %q in %d writes %v, want \"one\\ntwo\\n\" in 2", got, len(w), w)
	}
}

// A wrapped TCP connection hands its descriptor on (the agent endpoint
// reads hijacked websockets through it); one without a descriptor says so.
func TestSyscallConn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			defer c.Close()
			time.Sleep(time.Second)
		}
	}()
	c, err := onewrite.Listener{Listener: ln}.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*onewrite.Conn).SyscallConn()
	if err != nil {
		t.Fatalf("SyscallConn of a TCP connection: %v", err)
	}
	var fd uintptr
	if err := raw.Control(func(f uintptr) { fd = f }); err != nil || fd == 0 {
		t.Fatalf("descriptor %d, %v", fd, err)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, err := (&onewrite.Conn{Conn: a}).SyscallConn(); err == nil {
		t.Fatal("a pipe gave a descriptor")
	}
}
