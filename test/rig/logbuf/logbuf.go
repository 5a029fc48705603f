// Package logbuf is the log sink of tests and benchmarks: a buffer that
// the code under test (loggers, handlers, child processes) writes from
// several goroutines while the test reads what has been written so far,
// or, bounded, the tail of a long run's output for a failure report.
package logbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent Write and String. The zero
// value is ready to use and keeps everything; with Max set it keeps only
// the last Max bytes written.
type Buffer struct {
	Max int

	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p (and drops the oldest bytes beyond Max).
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.b.Write(p)
	if over := l.b.Len() - l.Max; l.Max > 0 && over > 0 {
		l.b.Next(over)
	}
	return n, err
}

// String returns all that has been written (the last Max bytes of it).
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Tail returns the last n lines written.
func (l *Buffer) Tail(n int) string {
	lines := strings.Split(strings.TrimSpace(l.String()), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
