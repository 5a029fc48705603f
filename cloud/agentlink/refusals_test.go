package agentlink

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/test/rig/logbuf"
)

// TestRefusalLogIntervals drives the refusal log interval by interval, as
// the sweeper's ticker does by calling flush: an address has one line of
// its own per interval, at most maxRefusalLines addresses do, and an
// interval with refusals beyond those lines ends with one summary.
func TestRefusalLogIntervals(t *testing.T) {
	logs := &logbuf.Buffer{}
	f := newRefusals(5, time.Minute, time.Minute, slog.New(slog.NewTextHandler(logs, nil)))
	// interval returns the lines logged since the previous call.
	seen := 0
	interval := func() []string {
		all := strings.Split(strings.TrimSpace(logs.String()), "\n")
		if logs.String() == "" {
			all = nil
		}
		lines := all[seen:]
		seen = len(all)
		return lines
	}
	count := func(lines []string, msg string) (n int) {
		for _, l := range lines {
			if strings.Contains(l, `msg="`+msg+`"`) {
				n++
			}
		}
		return n
	}

	// One address, three refusals: its line, then a summary of all three.
	for range 3 {
		f.note("192.0.2.1", refusedBadToken)
	}
	f.flush()
	lines := interval()
	if len(lines) != 2 || count(lines, "agent refused") != 1 || count(lines, "agent refusals") != 1 ||
		!strings.Contains(lines[1], "count=3 addresses=1") || !strings.Contains(lines[1], "unknown_or_revoked_token=3") || !strings.Contains(lines[1], `top1="192.0.2.1=3"`) {
		t.Errorf("first interval:\n%s", strings.Join(lines, "\n"))
	}

	// The next interval: the same address has a line of its own again; a
	// single refusal, logged by itself, needs no summary.
	f.note("192.0.2.1", refusedNoToken)
	f.flush()
	if lines := interval(); len(lines) != 1 || count(lines, "agent refused") != 1 || !strings.Contains(lines[0], "reason=missing_token") {
		t.Errorf("second interval:\n%s", strings.Join(lines, "\n"))
	}

	// An interval with nothing refused logs nothing.
	f.flush()
	if lines := interval(); len(lines) != 0 {
		t.Errorf("an empty interval logged:\n%s", strings.Join(lines, "\n"))
	}

	// Many addresses: maxRefusalLines lines, then the summary counts all.
	for i := range maxRefusalLines + 5 {
		f.note("198.51.100."+string(rune('a'+i)), refusedOverLimit)
	}
	f.flush()
	lines = interval()
	if len(lines) != maxRefusalLines+1 || count(lines, "agent refused") != maxRefusalLines || count(lines, "agent refusals") != 1 ||
		!strings.Contains(lines[len(lines)-1], "count=15 addresses=15") || !strings.Contains(lines[len(lines)-1], "over_limit=15") {
		t.Errorf("an interval of %d addresses:\n%s", maxRefusalLines+5, strings.Join(lines, "\n"))
	}
}
