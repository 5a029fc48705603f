// Package logbatch writes log lines in batches, never splitting a line: a
// Writer keeps the lines slog hands it and writes them when a batch is
// full, every interval, and at Close.
package logbatch

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/fleet/fleet/shared/tick"
)

// Writer collects log lines and writes them in batches: when size bytes
// are waiting, every interval, and at Close. The relay's access log (a
// line per API request) goes through one, as web servers buffer their access logs:
// at 10,000 requests a second a write system call per line cost a relay a
// quarter of its CPU. Everything else the relay logs is written at once. A
// relay killed with SIGKILL loses at most the last interval's lines.
//
// A line is never split between two writes (bufio.Writer would split one
// that does not fit the space left): the relay's other log lines go to the
// same file descriptor, and a line cut in two could get one of them in
// its middle.
type Writer struct {
	mu     sync.Mutex
	w      io.Writer
	buf    []byte
	size   int
	closed bool // after Close every line is written at once

	stop context.CancelFunc // ends the flusher
	done chan struct{}
}

// New starts a Writer writing to w; Close flushes and stops it.
func New(w io.Writer, size int, interval time.Duration) *Writer {
	ctx, stop := context.WithCancel(context.Background())
	b := &Writer{w: w, buf: make([]byte, 0, size), size: size, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		tick.Every(ctx, interval, b.Flush)
		b.Flush()
	}()
	return b
}

// Write keeps p (one log line: slog writes a line per call) for the next
// batch; a full batch is written first. A write error of w is dropped, as
// slog drops it.
func (b *Writer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf)+len(p) > b.size || b.closed {
		b.flushLocked() // in order: what waits goes first
	}
	if len(p) >= b.size || b.closed {
		b.w.Write(p)
		return len(p), nil
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *Writer) flushLocked() {
	if len(b.buf) > 0 {
		b.w.Write(b.buf)
		b.buf = b.buf[:0]
	}
}

// Flush writes what is waiting.
func (b *Writer) Flush() {
	b.mu.Lock()
	b.flushLocked()
	b.mu.Unlock()
}

// Close writes what is waiting and stops the flusher; lines written after
// Close are written at once.
func (b *Writer) Close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.stop()
	<-b.done
}
