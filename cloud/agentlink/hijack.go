package agentlink

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
)

// An idle agent connection holds no read buffer. net/http hands a hijacked
// connection over with its two 4 KiB buffers, which coder/websocket keeps
// for the connection's life: 8 KiB of the 41 KiB an idle connection cost
// (docs/benchmarks.md, "Memory per idle agent"). smallBufs gives the
// library a read buffer of bufio's least size (a frame header's bytes;
// a payload larger than it is read straight into the message) over a
// lazyReader, which borrows a readBufSize buffer from a pool only when the
// socket has bytes and gives it back once they are read, and a
// writeBufSize write buffer, which holds a whole ack, pong or close frame
// with a short reason (larger messages, a welcome or a configuration,
// leave in two writes). Every byte of these is kept by every connection,
// and at GOGC 100 a byte kept costs about two of RSS.
const (
	readBufSize  = 4096
	peekBufSize  = 16
	writeBufSize = 64
)

// smallBufs is the ResponseWriter handed to websocket.Accept: its Hijack
// returns the connection with small buffers where the connection's
// descriptor can be read directly (a TCP connection, not TLS), and
// net/http's own buffers elsewhere.
type smallBufs struct {
	http.ResponseWriter
	pool *sync.Pool // *[readBufSize]byte
}

func (h smallBufs) Unwrap() http.ResponseWriter { return h.ResponseWriter }

func (h smallBufs) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return conn, brw, nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return conn, brw, nil
	}
	lc := &lazyConn{Conn: conn, lr: lazyReader{raw: raw, pool: h.pool}}
	if n := brw.Reader.Buffered(); n > 0 {
		// What the agent sent right behind its request, read ahead by
		// net/http.
		b, _ := brw.Reader.Peek(n)
		lc.lr.pre = bytes.Clone(b)
	}
	// coder/websocket reads the connection it is given through the reader
	// it is given (after what that reader holds, here nothing): both read
	// through lc.
	return lc, bufio.NewReadWriter(bufio.NewReaderSize(lc, peekBufSize), bufio.NewWriterSize(conn, writeBufSize)), nil
}

// lazyConn is a hijacked connection read through a lazyReader.
type lazyConn struct {
	net.Conn
	lr lazyReader
}

func (c *lazyConn) Read(p []byte) (int, error) { return c.lr.Read(p) }

// lazyReader reads a connection's descriptor through a buffer borrowed from
// pool only while bytes wait in it: it waits for the socket to be readable
// holding no buffer, takes one to read what arrived, and returns it once
// the reader took every byte. Only one goroutine reads at a time
// (coder/websocket's read lock).
type lazyReader struct {
	raw  syscall.RawConn
	pool *sync.Pool
	pre  []byte // bytes read before the hijack

	buf  *[readBufSize]byte // nil: nothing waiting
	r, w int                // buf[r:w] waits to be read

	readFD func(fd uintptr) bool // readReady, bound once
	n      int                   // bytes the last readReady read
	rerr   error                 // its error
}

func (l *lazyReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(l.pre) > 0 {
		n := copy(p, l.pre)
		l.pre = l.pre[n:]
		if len(l.pre) == 0 {
			l.pre = nil
		}
		return n, nil
	}
	if l.buf == nil {
		if err := l.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, l.buf[l.r:l.w])
	l.r += n
	if l.r == l.w {
		l.pool.Put(l.buf)
		l.buf = nil
	}
	return n, nil
}

// fill waits until the socket is readable and reads what it holds into a
// pooled buffer; the wait holds none. It returns io.EOF at the end of the
// stream and the net package's errors for a closed connection.
func (l *lazyReader) fill() error {
	if l.readFD == nil {
		l.readFD = l.readReady // bound once: a closure per read would allocate
	}
	l.n, l.rerr = 0, nil
	if err := l.raw.Read(l.readFD); err != nil {
		return err
	}
	if l.rerr != nil {
		return &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", l.rerr)}
	}
	if l.n == 0 {
		return io.EOF
	}
	return nil
}

// readReady is fill's read of the descriptor: false (wait for the poller)
// when nothing is there yet, having given the buffer back.
func (l *lazyReader) readReady(fd uintptr) bool {
	b, _ := l.pool.Get().(*[readBufSize]byte)
	if b == nil {
		b = new([readBufSize]byte)
	}
	var n int
	var err error
	for {
		n, err = syscall.Read(int(fd), b[:])
		if err != syscall.EINTR {
			break
		}
	}
	if err == syscall.EAGAIN {
		l.pool.Put(b)
		return false // wait for the poller, holding no buffer
	}
	if err == nil && n > 0 {
		l.buf, l.r, l.w = b, 0, n
	} else {
		l.pool.Put(b)
		n = 0
	}
	l.n, l.rerr = n, err
	return true
}
