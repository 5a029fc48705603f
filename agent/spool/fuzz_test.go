package spool

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fuzzSegments are the segments FuzzSpoolCorruption corrupts: 4 segments
// of 6 records each, numbered 1 to 24.
const fuzzSegs, fuzzPerSeg = 4, 6

func fuzzPayload(seq uint64) []byte {
	return []byte(fmt.Sprintf(`{"event":{"id":"e%02d","message":"%s"}}`, seq, bytes.Repeat([]byte{'a' + byte(seq%26)}, int(seq%7))))
}

// FuzzSpoolCorruption writes a spool's segments, corrupts them as the
// input says (pairs of a 16-bit position in the concatenated segment bytes
// and a byte to XOR there; an odd last byte cuts that many bytes off the
// last segment), and opens the spool: no panic, no error, sequences rising
// and never above MaxSeq, every record whose bytes were not touched read
// back with its own payload, Append numbering above them, and a second open
// finding nothing more to repair.
func FuzzSpoolCorruption(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x00, 0x80, 0xff})       // one byte in the first segment's second record
	f.Add([]byte{0x01, 0x00, 0x01, 0x09}) // a length and a torn tail of 9 bytes
	f.Fuzz(func(t *testing.T, ops []byte) {
		dir := t.TempDir()
		var files [][]byte
		var starts []int // offset of each record in the concatenation
		total := 0
		for g := 0; g < fuzzSegs; g++ {
			var b []byte
			for i := 0; i < fuzzPerSeg; i++ {
				seq := uint64(g*fuzzPerSeg + i + 1)
				starts = append(starts, total+len(b))
				b = append(b, encodeRecord(seq, time.Unix(1_800_000_000, int64(seq)), fuzzPayload(seq))...)
			}
			files = append(files, b)
			total += len(b)
		}
		starts = append(starts, total)
		touched := make([]bool, fuzzSegs*fuzzPerSeg)
		touch := func(pos int) {
			for r := range touched {
				if pos >= starts[r] && pos < starts[r+1] {
					touched[r] = true
				}
			}
		}
		for len(ops) >= 3 {
			pos := int(binary.LittleEndian.Uint16(ops)) % total
			x := ops[2]
			ops = ops[3:]
			if x == 0 {
				continue
			}
			off := pos
			for g := range files {
				if off < len(files[g]) {
					files[g][off] ^= x
					touch(pos)
					break
				}
				off -= len(files[g])
			}
		}
		if len(ops) == 1 || len(ops) == 2 {
			last := files[fuzzSegs-1]
			cut := min(int(ops[0]), len(last))
			files[fuzzSegs-1] = last[:len(last)-cut]
			for p := total - cut; p < total; p++ {
				touch(p)
			}
		}
		for g, b := range files {
			p := filepath.Join(dir, fmt.Sprintf("%020d%s", g*fuzzPerSeg+1, segSuffix))
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}

		opts := Options{Dir: dir, SegmentBytes: 1 << 20, Now: func() time.Time { return time.Unix(1_800_000_100, 0) }}
		s, err := Open(opts)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		es, err := s.Read(0, 1<<20, 1<<30)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		got := map[uint64]bool{}
		var prev uint64
		for _, e := range es {
			if e.Seq <= prev || e.Seq > MaxSeq {
				t.Fatalf("sequence %d after %d", e.Seq, prev)
			}
			prev = e.Seq
			if e.Seq >= 1 && e.Seq <= fuzzSegs*fuzzPerSeg && !bytes.Equal(e.Payload, fuzzPayload(e.Seq)) && !touched[e.Seq-1] {
				t.Fatalf("record %d reads %q", e.Seq, e.Payload)
			}
			got[e.Seq] = true
		}
		for r, bad := range touched {
			if !bad && !got[uint64(r+1)] {
				t.Fatalf("record %d, untouched, was lost (read %v)", r+1, seqs(es))
			}
		}
		next, err := s.Append([]byte("after"))
		if err != nil || next <= prev {
			t.Fatalf("append after %d: %d, %v", prev, next, err)
		}
		s.Close()

		s2, err := Open(opts)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer s2.Close()
		if q := s2.TakeQuarantined(); len(q) != 0 {
			t.Fatalf("second open repaired again: %+v", q)
		}
		es2, err := s2.Read(0, 1<<20, 1<<30)
		if err != nil || len(es2) != len(es)+1 {
			t.Fatalf("reopen read %d records (%v), want %d", len(es2), err, len(es)+1)
		}
	})
}
