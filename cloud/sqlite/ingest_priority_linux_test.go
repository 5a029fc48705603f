package sqlite

import (
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestWriterPriority checks that raiseWriterPriority gives the calling
// goroutine's thread the writer's nice value, as /proc reports it, or,
// where the process may not raise priorities, says why and leaves the
// thread as it was.
func TestWriterPriority(t *testing.T) {
	type result struct {
		err        error
		before, at int
	}
	done := make(chan result)
	go func() {
		runtime.LockOSThread() // before and after on the same thread
		var r result
		r.before = threadNice(t)
		r.err = raiseWriterPriority()
		r.at = threadNice(t)
		done <- r // the goroutine ends, and its locked thread with it
	}()
	r := <-done
	switch {
	case r.err == nil && r.at != writerNice:
		t.Errorf("writer thread nice %d, want %d", r.at, writerNice)
	case r.err != nil && !errors.Is(r.err, syscall.EPERM) && !errors.Is(r.err, syscall.EACCES):
		t.Errorf("raiseWriterPriority: %v", r.err)
	case r.err != nil && r.at != r.before:
		t.Errorf("refused, but the thread's nice moved from %d to %d", r.before, r.at)
	}
}

// threadNice reads the nice value of the calling thread from /proc.
func threadNice(t *testing.T) int {
	b, err := os.ReadFile("/proc/thread-self/stat")
	if err != nil {
		t.Error(err)
		return 0
	}
	// Fields after the command name (which may hold spaces), from field 3.
	rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
	f := strings.Fields(rest)
	n, err := strconv.Atoi(f[19-3])
	if err != nil {
		t.Error(err)
	}
	return n
}
