package logbuf_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fleet/fleet/test/rig/logbuf"
)

func TestBufferKeepsAllOrTheLastMaxBytes(t *testing.T) {
	var all logbuf.Buffer
	bounded := &logbuf.Buffer{Max: 20}
	for i := range 10 {
		fmt.Fprintf(&all, "line %d\n", i)
		fmt.Fprintf(bounded, "line %d\n", i)
	}
	if got := all.String(); !strings.HasPrefix(got, "line 0\n") || !strings.HasSuffix(got, "line 9\n") || len(got) != 70 {
		t.Errorf("unbounded buffer holds %q", got)
	}
	if got := bounded.String(); got != "ine 7\nline 8\nline 9\n" {
		t.Errorf("Max 20 holds %q, want the last 20 bytes", got)
	}
	if got := all.Tail(2); got != "line 8\nline 9" {
		t.Errorf("Tail(2) = %q", got)
	}
	if got := all.Tail(50); got != strings.TrimSpace(all.String()) {
		t.Errorf("Tail beyond the line count = %q", got)
	}
}
