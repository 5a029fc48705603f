// Package linewatch collects what a process prints, line by line, for a
// test that waits for a line matching a pattern (a URL, a key, a
// password printed by a demo) while the process still runs.
package linewatch

import (
	"bytes"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Lines is an io.Writer for a process's stdout and stderr. Create it with
// New.
type Lines struct {
	what string
	done <-chan struct{}

	mu      sync.Mutex
	lines   []string
	partial []byte
	more    chan struct{} // signalled on each new line
}

// New returns Lines for the process named what (in failures), whose exit
// closes done.
func New(what string, done <-chan struct{}) *Lines {
	return &Lines{what: what, done: done, more: make(chan struct{}, 1)}
}

// Write collects p, split into lines.
func (l *Lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
		select {
		case l.more <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// String returns the complete lines so far.
func (l *Lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// Wait returns the submatches of re in the first line that matches,
// waiting up to timeout; it fails tb, with the output so far, when the
// process exits or time runs out first.
func (l *Lines) Wait(tb testing.TB, re *regexp.Regexp, timeout time.Duration) []string {
	tb.Helper()
	deadline := time.After(timeout)
	for {
		if m := l.find(re); m != nil {
			return m
		}
		select {
		case <-l.more:
		case <-l.done:
			if m := l.find(re); m != nil {
				return m
			}
			tb.Fatalf("%s exited before printing a line matching %q:\n%s", l.what, re, l.String())
		case <-deadline:
			tb.Fatalf("%s printed no line matching %q within %s:\n%s", l.what, re, timeout, l.String())
		}
	}
}

func (l *Lines) find(re *regexp.Regexp) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if m := re.FindStringSubmatch(line); m != nil {
			return m
		}
	}
	return nil
}
