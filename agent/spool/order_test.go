package spool

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// writeSegment writes a segment file named after first holding records
// numbered seqs, as a tampered or corrupted disk might.
func writeSegment(tb testing.TB, dir string, first uint64, seqs ...uint64) string {
	tb.Helper()
	var b []byte
	for _, q := range seqs {
		b = append(b, encodeRecord(q, time.Now(), []byte(fmt.Sprintf("forged-%d", q)))...)
	}
	p := filepath.Join(dir, fmt.Sprintf("%020d%s", first, segSuffix))
	if err := os.WriteFile(p, b, 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

func quarantineFiles(tb testing.TB, dir string) []string {
	tb.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "*"+quarSuffix))
	return m
}

// checkRising fails unless the sequences rise strictly and stay at or
// below MaxSeq.
func checkRising(tb testing.TB, es []Entry) {
	tb.Helper()
	var prev uint64
	for _, e := range es {
		if e.Seq <= prev || e.Seq > MaxSeq {
			tb.Fatalf("sequence %d after %d in %v", e.Seq, prev, seqs(es))
		}
		prev = e.Seq
	}
}

// TestOrderAcrossSegmentsOnOpen: a segment whose records repeat numbers of
// an earlier segment is repaired on Open, its original quarantined and
// reported; Read returns every sequence once; Append carries on above.
func TestOrderAcrossSegmentsOnOpen(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir, SegmentBytes: 100})
	for i := 1; i <= 6; i++ {
		mustAppend(t, s, fmt.Sprintf("rec-%02d", i))
	}
	s.Close()
	// A later segment repeating 2..4 and then carrying one new record.
	writeSegment(t, dir, 7, 2, 3, 4, 7)

	s2 := mustOpen(t, Options{Dir: dir, SegmentBytes: 100})
	es := readAll(t, s2, 0)
	checkRising(t, es)
	if got := fmt.Sprint(seqs(es)); got != "[1 2 3 4 5 6 7]" {
		t.Errorf("after open = %v, want [1 2 3 4 5 6 7]", got)
	}
	for _, e := range es[:6] {
		if string(e.Payload) != fmt.Sprintf("rec-%02d", e.Seq) {
			t.Errorf("seq %d holds %q: the forged copy replaced the original", e.Seq, e.Payload)
		}
	}
	q := s2.TakeQuarantined()
	if len(q) != 1 || q[0].Disordered != 3 || q[0].Segment != fmt.Sprintf("%020d.seg", 7) {
		t.Errorf("quarantined %+v, want one segment with 3 disordered records", q)
	}
	if files := quarantineFiles(t, dir); len(files) != 1 || len(q) == 1 && files[0] != q[0].Path {
		t.Errorf("quarantine files %v", files)
	}
	if len(s2.TakeQuarantined()) != 0 {
		t.Error("TakeQuarantined did not reset")
	}
	if got := mustAppend(t, s2, "rec-08"); got != 8 {
		t.Errorf("next seq %d, want 8", got)
	}
	s2.Close()
	s3 := mustOpen(t, Options{Dir: dir, SegmentBytes: 100})
	if q := s3.TakeQuarantined(); len(q) != 0 {
		t.Errorf("the repaired spool was quarantined again: %+v", q)
	}
	if got := fmt.Sprint(seqs(readAll(t, s3, 0))); got != "[1 2 3 4 5 6 7 8]" {
		t.Errorf("after reopen = %v", got)
	}
}

// TestSeqNeverWraps: a record numbered 2^64-1 (or anything above 2^63-1)
// on disk, or such a number in the state file, never makes Append give out
// 0 or repeat a number; once MaxSeq itself is given out Append refuses.
func TestSeqNeverWraps(t *testing.T) {
	t.Run("record", func(t *testing.T) {
		dir := t.TempDir()
		s := mustOpen(t, Options{Dir: dir})
		for i := 1; i <= 3; i++ {
			mustAppend(t, s, "r")
		}
		s.Close()
		writeSegment(t, dir, 4, math.MaxUint64)
		s2 := mustOpen(t, Options{Dir: dir})
		if got := mustAppend(t, s2, "next"); got != 4 {
			t.Errorf("next seq %d, want 4", got)
		}
		checkRising(t, readAll(t, s2, 0))
		if q := s2.TakeQuarantined(); len(q) != 1 || q[0].Disordered != 1 {
			t.Errorf("quarantined %+v", q)
		}
	})
	t.Run("state", func(t *testing.T) {
		dir := t.TempDir()
		s := mustOpen(t, Options{Dir: dir})
		mustAppend(t, s, "r")
		s.Close()
		if err := writeState(filepath.Join(dir, stateFile), 0, math.MaxUint64); err != nil {
			t.Fatal(err)
		}
		s2 := mustOpen(t, Options{Dir: dir})
		if got := mustAppend(t, s2, "next"); got != 2 {
			t.Errorf("next seq %d, want 2", got)
		}
	})
	t.Run("exhausted", func(t *testing.T) {
		dir := t.TempDir()
		writeSegment(t, dir, MaxSeq-1, MaxSeq-1, MaxSeq)
		s := mustOpen(t, Options{Dir: dir})
		if got := fmt.Sprint(seqs(readAll(t, s, 0))); got != fmt.Sprint([]uint64{MaxSeq - 1, MaxSeq}) {
			t.Errorf("read %v", got)
		}
		if seq, err := s.Append([]byte("one too many")); err != ErrExhausted {
			t.Errorf("Append after MaxSeq = %d, %v; want ErrExhausted", seq, err)
		}
		s2 := mustOpen(t, Options{Dir: t.TempDir()})
		mustAppend(t, s2, "pending")
		if _, err := s2.Rebase(MaxSeq); err == nil {
			t.Error("a Rebase that would number a record above MaxSeq was accepted")
		}
		if got := fmt.Sprint(seqs(readAll(t, s2, 0))); got != "[1]" {
			t.Errorf("after the refused Rebase: %v", got)
		}
	})
}

// TestCorruptionInTheMiddleLosesOnlyThatRecord: bytes flipped inside one
// record of a segment lose that record only; the segment is repaired and
// reported, and the records after it are read as before.
func TestCorruptionInTheMiddleLosesOnlyThatRecord(t *testing.T) {
	for _, at := range []string{"payload", "length", "crc", "seq"} {
		t.Run(at, func(t *testing.T) {
			dir := t.TempDir()
			seg := writtenSegment(t, dir, 10, "record-%02d")
			b, _ := os.ReadFile(seg)
			recLen := len(b) / 10
			off := 4*recLen + map[string]int{"payload": recLen - 2, "length": 1, "crc": 5, "seq": headerLen}[at]
			b[off] ^= 0x5a
			os.WriteFile(seg, b, 0o600)

			s2 := mustOpen(t, Options{Dir: dir})
			es := readAll(t, s2, 0)
			checkRising(t, es)
			if got := fmt.Sprint(seqs(es)); got != "[1 2 3 4 6 7 8 9 10]" {
				t.Errorf("after corrupting record 5 = %v", got)
			}
			if q := s2.TakeQuarantined(); len(q) != 1 || q[0].CorruptBytes == 0 {
				t.Errorf("quarantined %+v", q)
			}
			if got := mustAppend(t, s2, "record-11"); got != 11 {
				t.Errorf("next seq %d", got)
			}
		})
	}
}

// TestRebaseCrashSafe kills a process with SIGKILL at each step of Rebase
// and reopens its spool: every pending record is still there, and after
// the relay's next welcome (Rebase again, or Ack of the relay's last
// sequence, as agent/link does) each is pending exactly once, numbered
// above the relay's.
func TestRebaseCrashSafe(t *testing.T) {
	if dir := os.Getenv("SPOOL_REBASE_DIR"); dir != "" {
		s, err := Open(Options{Dir: dir, SegmentBytes: 100})
		exitOn("open", err)
		step := os.Getenv("SPOOL_REBASE_CRASH")
		s.SetCrashHook(func(at string) {
			if at == step {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				time.Sleep(time.Minute)
			}
		})
		_, err = s.Rebase(100)
		exitOn("rebase", err)
		os.Exit(0)
	}
	for _, step := range []string{"written", "renamed", "state", "none"} {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			s := mustOpen(t, Options{Dir: dir, SegmentBytes: 100})
			for i := 1; i <= 8; i++ {
				mustAppend(t, s, fmt.Sprintf("rec-%d", i))
			}
			if err := s.Ack(2); err != nil {
				t.Fatal(err)
			}
			s.Close()

			cmd := exec.Command(os.Args[0], "-test.run=^TestRebaseCrashSafe$")
			cmd.Env = append(os.Environ(), "SPOOL_REBASE_DIR="+dir, "SPOOL_REBASE_CRASH="+step)
			out, err := cmd.CombinedOutput()
			killed := err != nil && strings.Contains(err.Error(), "killed")
			if step == "none" && err != nil || step != "none" && !killed {
				t.Fatalf("child: %v: %s", err, out)
			}

			s2 := mustOpen(t, Options{Dir: dir, SegmentBytes: 100})
			if changed, err := s2.Rebase(100); err != nil {
				t.Fatal(err)
			} else if !changed {
				if err := s2.Ack(100); err != nil {
					t.Fatal(err)
				}
			}
			es := readAll(t, s2, 0)
			var got []string
			for _, e := range es {
				got = append(got, fmt.Sprintf("%d:%s", e.Seq, e.Payload))
			}
			want := "[101:rec-3 102:rec-4 103:rec-5 104:rec-6 105:rec-7 106:rec-8]"
			if fmt.Sprint(got) != want {
				t.Errorf("after a crash at %q: %v, want %s", step, got, want)
			}
			if next := mustAppend(t, s2, "rec-9"); next != 107 {
				t.Errorf("next seq %d, want 107", next)
			}
		})
	}
}
