package refusallog

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/test/rig/logbuf"
)

// TestSummaryWithoutFlush: refusals beyond the lines of their own are
// summed up when the interval ends by itself, with no caller's ticker.
func TestSummaryWithoutFlush(t *testing.T) {
	logs := &logbuf.Buffer{}
	l := New(slog.New(slog.NewTextHandler(logs, nil)), "refused", "refusals", 20*time.Millisecond)
	for range 500 {
		l.Note("192.0.2.1", "wrong")
	}
	l.Note("192.0.2.2", "throttled")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), `msg=refusals`) {
		if time.Now().After(deadline) {
			t.Fatalf("no summary:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("501 refusals from 2 addresses: %d lines, want 2 of their own and a summary:\n%s", len(lines), logs.String())
	}
	for _, want := range []string{"count=501", "addresses=2", "throttled=1", "wrong=500", `top1="192.0.2.1=500"`} {
		if !strings.Contains(lines[2], want) {
			t.Errorf("summary lacks %s: %s", want, lines[2])
		}
	}
}
