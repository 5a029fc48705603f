package logbatch

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is what a log file or journald receives: each Write call
// recorded as one chunk.
type lockedBuffer struct {
	mu     sync.Mutex
	chunks []string
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.chunks = append(b.chunks, string(p))
	return len(p), nil
}

func (b *lockedBuffer) got() (string, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.chunks, ""), len(b.chunks)
}

func TestWritesLinesInBatches(t *testing.T) {
	var out lockedBuffer
	b := New(&out, 1<<10, 50*time.Millisecond)
	var want bytes.Buffer
	for i := range 10 {
		line := strings.Repeat("x", i) + "\n"
		want.WriteString(line)
		b.Write([]byte(line))
	}
	if s, _ := out.got(); s != "" {
		t.Fatalf("lines written at once (%q), not batched", s)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, n := out.got()
		if s == want.String() {
			if n != 1 {
				t.Errorf("10 short lines took %d writes, want 1", n)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5s the output is %q, want %q", s, want.String())
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A full batch is written before the line that would overflow it; a
	// line as large as a batch goes out on its own, in order.
	big := strings.Repeat("b", 1<<10) + "\n"
	a := strings.Repeat("a", 700) + "\n"
	b.Write([]byte(a))
	b.Write([]byte(a))
	b.Write([]byte(big))
	b.Close()
	s, n := out.got()
	if s != want.String()+a+a+big {
		t.Fatalf("lines out of order or lost around a full batch")
	}
	if n != 4 {
		t.Errorf("%d writes, want 4 (the first batch, then a, a and the large line)", n)
	}

	// After Close (the relay shutting down) lines go straight out.
	b.Write([]byte("late\n"))
	if s, _ := out.got(); !strings.HasSuffix(s, "late\n") {
		t.Fatalf("a line written after Close was held back")
	}
	b.Close() // twice is harmless
}

func TestCloseWritesWhatWaits(t *testing.T) {
	var out lockedBuffer
	b := New(&out, 64<<10, time.Hour)
	b.Write([]byte("one\n"))
	b.Write([]byte("two\n"))
	b.Close()
	if s, _ := out.got(); s != "one\ntwo\n" {
		t.Fatalf("after Close the output is %q", s)
	}
}
