package spool

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// exitOn ends a crash test's child process with status 2 when err is
// not nil, printing what failed for the parent to show.
func exitOn(what string, err error) {
	if err != nil {
		fmt.Println(what+":", err)
		os.Exit(2)
	}
}

func mustOpen(tb testing.TB, opts Options) *Spool {
	tb.Helper()
	s, err := Open(opts)
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func mustAppend(tb testing.TB, s *Spool, payload string) uint64 {
	tb.Helper()
	seq, err := s.Append([]byte(payload))
	if err != nil {
		tb.Fatalf("append: %v", err)
	}
	return seq
}

func readAll(tb testing.TB, s *Spool, after uint64) []Entry {
	tb.Helper()
	es, err := s.Read(after, 1<<30, 1<<30)
	if err != nil {
		tb.Fatalf("read: %v", err)
	}
	return es
}

func seqs(es []Entry) []uint64 {
	out := make([]uint64, len(es))
	for i, e := range es {
		out[i] = e.Seq
	}
	return out
}

func TestAppendReadAckReopen(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir, SegmentBytes: 100})
	for i := 1; i <= 10; i++ {
		if got := mustAppend(t, s, fmt.Sprintf("rec-%02d", i)); got != uint64(i) {
			t.Fatalf("seq = %d, want %d", got, i)
		}
	}
	es := readAll(t, s, 0)
	if len(es) != 10 || string(es[0].Payload) != "rec-01" || string(es[9].Payload) != "rec-10" {
		t.Fatalf("read %d records: %q .. ", len(es), es[0].Payload)
	}
	if got := seqs(readAll(t, s, 7)); fmt.Sprint(got) != "[8 9 10]" {
		t.Fatalf("read after 7 = %v", got)
	}
	batch, _ := s.Read(0, 3, 1<<20)
	if fmt.Sprint(seqs(batch)) != "[1 2 3]" {
		t.Fatalf("batch of 3 = %v", seqs(batch))
	}
	if err := s.Ack(6); err != nil {
		t.Fatal(err)
	}
	if got := seqs(readAll(t, s, 0)); fmt.Sprint(got) != "[7 8 9 10]" {
		t.Fatalf("after ack 6 = %v", got)
	}
	segsBefore := s.Stats().Segments
	s.Close()

	s2 := mustOpen(t, Options{Dir: dir, SegmentBytes: 100})
	if got := seqs(readAll(t, s2, 0)); fmt.Sprint(got) != "[7 8 9 10]" {
		t.Fatalf("after reopen = %v", got)
	}
	if st := s2.Stats(); st.Pending != 4 || st.Acked != 6 || st.LastSeq != 10 || st.Segments > segsBefore {
		t.Fatalf("stats = %+v (segments before %d)", st, segsBefore)
	}
	if got := mustAppend(t, s2, "rec-11"); got != 11 {
		t.Fatalf("seq after reopen = %d", got)
	}
	// Everything acked: segments go, the sequence carries on after a restart.
	if err := s2.Ack(11); err != nil {
		t.Fatal(err)
	}
	if st := s2.Stats(); st.Pending != 0 || st.Segments != 1 {
		t.Fatalf("stats after full ack = %+v", st)
	}
	s2.Close()
	s3 := mustOpen(t, Options{Dir: dir, SegmentBytes: 100})
	if es := readAll(t, s3, 0); len(es) != 0 {
		t.Fatalf("acked records came back: %v", seqs(es))
	}
	if got := mustAppend(t, s3, "rec-12"); got != 12 {
		t.Fatalf("seq after full ack and reopen = %d, want 12", got)
	}
}

func lastSegment(tb testing.TB, dir string) string {
	tb.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(m) == 0 {
		tb.Fatal("no segment")
	}
	return m[len(m)-1]
}

// writtenSegment writes n records (payload format with the record's
// number) to a spool in dir and closes it; it returns the path of the
// last segment, for a test to damage.
func writtenSegment(tb testing.TB, dir string, n int, format string) string {
	tb.Helper()
	s := mustOpen(tb, Options{Dir: dir})
	for i := 1; i <= n; i++ {
		mustAppend(tb, s, fmt.Sprintf(format, i))
	}
	s.Close()
	return lastSegment(tb, dir)
}

func TestTornTail(t *testing.T) {
	full := encodeRecord(4, time.Now(), []byte("the fourth record"))
	badCRC := append([]byte(nil), full...)
	badCRC[len(badCRC)-1] ^= 0xff
	huge := append([]byte(nil), full...)
	huge[3] = 0x7f // length far over the limit
	cases := []struct {
		name string
		tail []byte
	}{
		{"half header", full[:5]},
		{"header only", full[:headerLen]},
		{"half body", full[:len(full)-4]},
		{"bad crc", badCRC},
		{"bad length", huge},
		{"zeros", make([]byte, 64)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			seg := writtenSegment(t, dir, 3, "rec-%d")
			goodSize := fileSize(t, seg)
			f, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write(tc.tail)
			f.Close()

			s2 := mustOpen(t, Options{Dir: dir})
			if got := seqs(readAll(t, s2, 0)); fmt.Sprint(got) != "[1 2 3]" {
				t.Fatalf("after torn tail = %v", got)
			}
			if got := fileSize(t, seg); got != goodSize {
				t.Fatalf("segment size %d, want truncated to %d", got, goodSize)
			}
			if got := mustAppend(t, s2, "rec-4"); got != 4 {
				t.Fatalf("next seq = %d", got)
			}
			s2.Close()
			s3 := mustOpen(t, Options{Dir: dir})
			es := readAll(t, s3, 0)
			if fmt.Sprint(seqs(es)) != "[1 2 3 4]" || string(es[3].Payload) != "rec-4" {
				t.Fatalf("after append past torn tail = %v", seqs(es))
			}
		})
	}
}

func fileSize(tb testing.TB, p string) int64 {
	tb.Helper()
	st, err := os.Stat(p)
	if err != nil {
		tb.Fatal(err)
	}
	return st.Size()
}

// TestKill9 appends from a child process and kills it with SIGKILL in the
// middle of the stream: every record the child reported as appended is
// there, in order, and the spool carries on.
func TestKill9(t *testing.T) {
	if dir := os.Getenv("SPOOL_CHILD_DIR"); dir != "" {
		s, err := Open(Options{Dir: dir, SegmentBytes: 4096})
		exitOn("open", err)
		for i := 0; ; i++ {
			seq, err := s.Append([]byte(fmt.Sprintf("child-%06d-%s", i, "padding-padding-padding")))
			exitOn("append", err)
			fmt.Println(seq)
		}
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill9$")
	cmd.Env = append(os.Environ(), "SPOOL_CHILD_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var reported uint64
	buf := make([]byte, 1<<16)
	var line []byte
	for reported < 2000 {
		n, err := out.Read(buf)
		if err != nil {
			t.Fatalf("child: %v", err)
		}
		for _, b := range buf[:n] {
			if b == '\n' {
				v, err := strconv.ParseUint(string(line), 10, 64)
				if err != nil {
					t.Fatalf("child said %q", line)
				}
				reported = v
				line = line[:0]
			} else {
				line = append(line, b)
			}
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	s := mustOpen(t, Options{Dir: dir, SegmentBytes: 4096})
	es := readAll(t, s, 0)
	if uint64(len(es)) < reported {
		t.Fatalf("%d records after kill -9, child reported %d appended", len(es), reported)
	}
	for i, e := range es {
		if e.Seq != uint64(i+1) || string(e.Payload) != fmt.Sprintf("child-%06d-%s", i, "padding-padding-padding") {
			t.Fatalf("record %d: seq %d payload %q", i, e.Seq, e.Payload)
		}
	}
	next := mustAppend(t, s, "after")
	if next != uint64(len(es)+1) {
		t.Fatalf("next seq %d after %d records", next, len(es))
	}
}

func TestSizeBound(t *testing.T) {
	dir := t.TempDir()
	// Each record is 8+16+10 = 34 bytes; segments hold 3 (SegmentBytes
	// capped at MaxBytes/4 = 102), so at most 12 records stay.
	s := mustOpen(t, Options{Dir: dir, MaxBytes: 408, SegmentBytes: 1 << 20})
	for i := 1; i <= 30; i++ {
		mustAppend(t, s, fmt.Sprintf("record-%03d", i))
	}
	es := readAll(t, s, 0)
	if len(es) == 0 || es[len(es)-1].Seq != 30 {
		t.Fatalf("newest record lost: %v", seqs(es))
	}
	for i, e := range es {
		if e.Seq != es[0].Seq+uint64(i) {
			t.Fatalf("gap in kept records: %v", seqs(es))
		}
	}
	dropped := s.TakeDropped()
	if dropped+uint64(len(es)) != 30 {
		t.Fatalf("dropped %d + kept %d != 30", dropped, len(es))
	}
	if dropped == 0 || s.Stats().Bytes > 408 {
		t.Fatalf("bound not enforced: dropped %d, bytes %d", dropped, s.Stats().Bytes)
	}
	if s.TakeDropped() != 0 {
		t.Fatal("TakeDropped did not reset")
	}
	// Records acked before the bound hit are not counted as dropped.
	s2 := mustOpen(t, Options{Dir: t.TempDir(), MaxBytes: 408})
	for i := 1; i <= 12; i++ {
		mustAppend(t, s2, fmt.Sprintf("record-%03d", i))
	}
	s2.Ack(12)
	for i := 13; i <= 24; i++ {
		mustAppend(t, s2, fmt.Sprintf("record-%03d", i))
	}
	if d := s2.TakeDropped(); d != 0 {
		t.Fatalf("acked records counted as dropped: %d", d)
	}
}

func TestAgeBound(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := mustOpen(t, Options{Dir: t.TempDir(), MaxAge: time.Hour, SegmentBytes: 70, Now: c.Now})
	for i := 1; i <= 6; i++ { // two per segment
		mustAppend(t, s, fmt.Sprintf("old-%d", i))
		c.Add(time.Minute)
	}
	c.Add(2 * time.Hour)
	mustAppend(t, s, "new-7")
	es := readAll(t, s, 0)
	if fmt.Sprint(seqs(es)) != "[7]" {
		t.Fatalf("after max age = %v", seqs(es))
	}
	if d := s.TakeDropped(); d != 6 {
		t.Fatalf("dropped %d, want 6", d)
	}
}

func TestRebase(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir})
	for i := 1; i <= 3; i++ {
		mustAppend(t, s, fmt.Sprintf("r%d", i))
	}
	if changed, err := s.Rebase(2); err != nil || changed {
		t.Fatalf("rebase below next: %v %v", changed, err)
	}
	// The relay has stored up to 100: state was lost here.
	if changed, err := s.Rebase(100); err != nil || !changed {
		t.Fatalf("rebase: %v %v", changed, err)
	}
	es := readAll(t, s, 0)
	if fmt.Sprint(seqs(es)) != "[101 102 103]" || string(es[0].Payload) != "r1" || string(es[2].Payload) != "r3" {
		t.Fatalf("after rebase = %v", seqs(es))
	}
	s.Close()
	s2 := mustOpen(t, Options{Dir: dir})
	if got := mustAppend(t, s2, "r4"); got != 104 {
		t.Fatalf("seq after rebase and reopen = %d", got)
	}
}

// Reading batch by batch (as the link does) returns every record once, in
// order, across segments, and a reader that goes back gets the same records.
func TestBatchedReads(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir(), SegmentBytes: 300})
	for i := 1; i <= 200; i++ {
		mustAppend(t, s, fmt.Sprintf("r%03d", i))
	}
	var after uint64
	var got []uint64
	for {
		es, err := s.Read(after, 7, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			if string(e.Payload) != fmt.Sprintf("r%03d", e.Seq) {
				t.Fatalf("seq %d payload %q", e.Seq, e.Payload)
			}
		}
		got = append(got, seqs(es)...)
		after = es[len(es)-1].Seq
	}
	if len(got) != 200 || got[0] != 1 || got[199] != 200 {
		t.Fatalf("read %d records", len(got))
	}
	for i, v := range got {
		if v != uint64(i+1) {
			t.Fatalf("out of order at %d: %d", i, v)
		}
	}
	// Going back (a reconnect resends from the ack floor) works too.
	if es, _ := s.Read(10, 3, 1<<20); fmt.Sprint(seqs(es)) != "[11 12 13]" {
		t.Fatalf("re-read = %v", seqs(es))
	}
	// Byte bound: at least one record, then stop before going over.
	if es, _ := s.Read(0, 100, 9); len(es) != 2 {
		t.Fatalf("byte-bounded read returned %d records", len(es))
	}
}
