package spool

import (
	"testing"
	"time"
)

// TestOldestPending: the time of the oldest unacknowledged record, across
// segments, and none once everything is acknowledged, also after a reopen.
func TestOldestPending(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	s := mustOpen(t, Options{Dir: dir, SegmentBytes: 200, Now: c.Now})
	if _, ok, err := s.OldestPending(); ok || err != nil {
		t.Fatalf("empty spool: ok %v err %v", ok, err)
	}
	start := c.Now()
	for i := 0; i < 10; i++ {
		mustAppend(t, s, "record payload of some length, enough to rotate segments")
		c.Add(time.Minute)
	}
	if s.Stats().Segments < 3 {
		t.Fatalf("want several segments, have %d", s.Stats().Segments)
	}
	for _, c := range []struct {
		ack  uint64
		want time.Time
		ok   bool
	}{{0, start, true}, {1, start.Add(time.Minute), true}, {6, start.Add(6 * time.Minute), true}, {9, start.Add(9 * time.Minute), true}, {10, time.Time{}, false}} {
		if c.ack > 0 {
			if err := s.Ack(c.ack); err != nil {
				t.Fatal(err)
			}
		}
		got, ok, err := s.OldestPending()
		if err != nil || ok != c.ok || !got.Equal(c.want) {
			t.Errorf("after ack %d: %v %v %v, want %v %v", c.ack, got, ok, err, c.want, c.ok)
		}
	}
	mustAppend(t, s, "one more")
	s.Close()
	s = mustOpen(t, Options{Dir: dir, SegmentBytes: 200, Now: c.Now})
	if got, ok, err := s.OldestPending(); err != nil || !ok || !got.Equal(start.Add(10*time.Minute)) {
		t.Errorf("after reopen: %v %v %v", got, ok, err)
	}
	s.Close()
	if _, _, err := s.OldestPending(); err != ErrClosed {
		t.Errorf("closed: %v", err)
	}
}
