package spool

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// OldestPending returns the time the oldest record not yet acknowledged was
// appended; ok is false when nothing is pending. It reads the segment file
// that holds that record from its start, outside the spool's lock (at most
// one segment, SegmentBytes), so callers that ask often should remember the
// answer for as long as Stats().Acked stays the same.
func (s *Spool) OldestPending() (t time.Time, ok bool, err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return time.Time{}, false, ErrClosed
	}
	floor := s.floor
	var seg segment
	for _, sg := range s.segs {
		if sg.count > 0 && sg.last > floor {
			seg, ok = *sg, true
			break
		}
	}
	s.mu.Unlock()
	if !ok {
		return time.Time{}, false, nil
	}
	f, err := os.Open(seg.path)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("spool: %w", err)
	}
	defer f.Close()
	data := make([]byte, seg.size)
	n, err := f.ReadAt(data, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return time.Time{}, false, fmt.Errorf("spool: %w", err)
	}
	sc := scanner{b: data[:n], hint: max(seg.first, 1) - 1}
	for {
		e, _, _, kind := sc.next()
		switch {
		case kind == scanEnd:
			return time.Time{}, false, nil
		case kind == scanRecord && e.Seq > floor:
			return e.Time, true, nil
		}
	}
}
