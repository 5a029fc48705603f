// Package spool is the agent's on-disk queue of records (metric samples and
// events) waiting for the relay's acknowledgement.
//
// Records are appended to segment files in a directory; each record gets the
// next sequence number, which is monotonic across restarts. A record is
//
//	length uint32 | crc32c uint32 | seq uint64 | unix-nano uint64 | payload
//
// (little endian; length counts seq, time and payload; the CRC covers the
// same bytes). A segment is named after the sequence of its first record and
// rotates at Options.SegmentBytes; the records of a segment are numbered
// consecutively.
//
// On Open every segment is checked, oldest first, and sequence numbers must
// rise across the whole spool, from one segment to the next too, and stay at
// or below MaxSeq (so that Read never returns a sequence twice and Append
// never wraps). A torn last record (short, wrong length or wrong CRC, as
// left by a crash in the middle of a write) is cut off. Corrupt bytes before
// the end are skipped up to the next well-formed record (found by its
// length, its CRC and its sequence just above the last good one), so
// corruption loses only the records it touched. A segment holding corrupt
// bytes or records out of order is repaired: its good records are written to
// a new file that replaces it, the original is kept aside as
// <segment>.<time>.quarantine, and TakeQuarantined reports it so the agent
// can emit a spool.quarantined event.
//
// Durability: Append writes each record with one write(2) and returns, so a
// record survives a kill -9 of the agent as soon as Append returns. fsync is
// batched for flash: the data is synced when SyncInterval has passed since the
// last sync (on the next Append or on Sync), and on Close, so a power cut
// loses at most SyncInterval of records.
//
// Rebase renumbers the pending records crash-safely: they are written to a
// new segment under a temporary name and synced, the file is renamed into
// place, the state file is replaced, and only then are the old segments
// deleted. A crash at any point leaves every pending record on disk, under
// its old number or its new one (the relay's next welcome acknowledges the
// old ones away).
//
// Ack(seq) marks every record up to seq as delivered; whole segments below
// the mark are deleted, and the mark (with the highest sequence ever given
// out) is persisted in a small state file replaced atomically, so a restart
// resends exactly the unacknowledged records. The spool is bounded by total
// size and by record age: the oldest records go first, and the number dropped
// is reported by TakeDropped so the agent can emit a spool.dropped event.
package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleet/fleet/shared/protocol"
)

const (
	headerLen = 8  // length + crc
	fixedLen  = 16 // seq + time
	// MaxRecordBytes bounds one record's payload.
	MaxRecordBytes = 1 << 20
	segSuffix      = ".seg"
	stateFile      = "state"
	tmpSuffix      = ".tmp"
	quarSuffix     = ".quarantine"
	// MaxSeq is the highest sequence the spool gives out: the protocol's
	// bound (2^63-1).
	MaxSeq = protocol.MaxSeq
	// maxQuarantined bounds the quarantined segment files kept (the newest).
	maxQuarantined = 8
	// resyncWindow bounds how far above the last good sequence a record
	// found after corrupt bytes may be numbered. The records of a segment
	// are numbered consecutively, so the record after a corrupt one carries
	// the next number or close; the window also keeps the search cheap.
	resyncWindow = 1 << 16
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrClosed is returned by operations on a closed spool.
var ErrClosed = errors.New("spool closed")

// ErrExhausted is returned by Append once MaxSeq was given out.
var ErrExhausted = errors.New("spool: sequence numbers exhausted (2^63-1 given out)")

// Quarantine reports a segment that Open repaired: the original file was
// moved to Path; Disordered well-formed records broke the sequence order
// (repeated or not rising, or above MaxSeq) and CorruptBytes bytes were no
// records. Both are gone from the spool.
type Quarantine struct {
	Segment      string
	Path         string
	Disordered   int
	CorruptBytes int
}

// Options configures a spool.
type Options struct {
	// Dir holds the segment files; it is created when missing.
	Dir string
	// MaxBytes bounds the total size of the segments (default 64 MiB).
	MaxBytes int64
	// MaxAge drops records older than this (default 7 days; negative: never).
	MaxAge time.Duration
	// SegmentBytes is the size at which a segment rotates (default 1 MiB,
	// capped at MaxBytes/4 so that the size bound drops in small steps).
	SegmentBytes int64
	// SyncInterval is the longest time written data stays unsynced
	// (default 5s; 0 keeps the default, negative syncs every append).
	SyncInterval time.Duration
	// Now replaces time.Now.
	Now func() time.Time
	// Logger receives recovery and drop notices.
	Logger *slog.Logger
}

// Entry is one record read back.
type Entry struct {
	Seq     uint64
	Time    time.Time
	Payload []byte
}

type segment struct {
	first, last uint64 // seq range; last < first when empty
	count       int
	size        int64
	newest      time.Time
	oldest      time.Time
	path        string
}

// Spool is an on-disk record queue. It is safe for concurrent use.
type Spool struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	segs     []*segment // oldest first; the last one is open for writing
	w        *os.File
	floor    uint64 // every record <= floor is acked or dropped
	next     uint64 // the next sequence to give out
	total    int64
	dropped  uint64
	lastSync time.Time
	dirty    bool
	closed   bool
	notify   chan struct{}
	// quarantined lists the segments Open repaired, until TakeQuarantined.
	quarantined []Quarantine
	// crash, when set (tests), is called at each step of Rebase.
	crash func(step string)
	// cur remembers where the last Read stopped, so a reader walking the
	// spool batch by batch does not rescan each segment from its start.
	cur readCursor
}

// readCursor is the file offset just past record seq in segment path.
type readCursor struct {
	path string
	seq  uint64
	off  int64
}

// Open opens (or creates) the spool in opts.Dir, recovering from a torn
// last record.
func Open(opts Options) (*Spool, error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 64 << 20
	}
	if opts.MaxAge == 0 {
		opts.MaxAge = 7 * 24 * time.Hour
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = 1 << 20
	}
	if q := opts.MaxBytes / 4; opts.SegmentBytes > q && q > 0 {
		opts.SegmentBytes = q
	}
	if opts.SyncInterval == 0 {
		opts.SyncInterval = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	s := &Spool{opts: opts, log: opts.Logger, notify: make(chan struct{}, 1), lastSync: opts.Now()}
	if err := s.load(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Spool) load() error {
	floor, high, err := readState(filepath.Join(s.opts.Dir, stateFile))
	if err != nil {
		return err
	}
	if floor > MaxSeq || high > MaxSeq {
		// Only tampering or a disk fault does this: resend what is on disk
		// (the relay stores each record once) rather than wrap.
		s.log.Warn("spool: state file holds a sequence above 2^63-1; ignored", "floor", floor, "high", high)
		floor, high = 0, 0
	}
	s.floor = floor
	// Leftovers of an interrupted repair, Rebase or state write: the
	// originals are still in place.
	if tmps, err := filepath.Glob(filepath.Join(s.opts.Dir, "*"+tmpSuffix)); err == nil {
		for _, p := range tmps {
			_ = os.Remove(p)
		}
	}
	names, err := filepath.Glob(filepath.Join(s.opts.Dir, "*"+segSuffix))
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	type named struct {
		first uint64
		path  string
	}
	var files []named
	for _, p := range names {
		n, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(p), segSuffix), 10, 64)
		if err != nil {
			continue
		}
		files = append(files, named{n, p})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].first < files[j].first })
	maxSeq := max(high, floor)
	var prev uint64 // the last sequence kept so far, across segments
	for i, f := range files {
		seg, err := s.check(f.path, f.first, prev)
		if err != nil {
			return err
		}
		if seg == nil || seg.count == 0 && i != len(files)-1 {
			_ = os.Remove(f.path)
			continue
		}
		if seg.count > 0 {
			prev = seg.last
			maxSeq = max(maxSeq, seg.last)
			if seg.last <= s.floor {
				// Fully acknowledged before a crash interrupted its removal.
				_ = os.Remove(f.path)
				continue
			}
		}
		s.segs = append(s.segs, seg)
		s.total += seg.size
	}
	s.next = maxSeq + 1
	if len(s.segs) > 0 {
		last := s.segs[len(s.segs)-1]
		w, err := os.OpenFile(last.path, os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("spool: %w", err)
		}
		s.w = w
	}
	return nil
}

// check reads the segment at path, named after sequence first, whose
// records must all be above prev. It cuts off a torn tail, and repairs a
// segment holding corrupt bytes or records out of order (see the package
// comment). It returns nil when nothing of the segment is left.
func (s *Spool) check(path string, first, prev uint64) (*segment, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	seg := &segment{first: first, path: path}
	sc := scanner{b: data, prev: prev, hint: max(first, 1) - 1}
	var keep [][2]int
	disordered, corrupt, torn := 0, 0, -1
	var cause string
	for {
		e, start, end, kind := sc.next()
		if kind == scanEnd {
			break
		}
		switch kind {
		case scanRecord:
			keep = append(keep, [2]int{start, end})
			if seg.count == 0 {
				seg.first, seg.oldest = e.Seq, e.Time
			}
			seg.count++
			seg.last, seg.newest = e.Seq, e.Time
			seg.size += int64(end - start)
		case scanDisorder:
			disordered++
			cause = fmt.Sprintf("sequence %d after %d", e.Seq, sc.prev)
		case scanCorrupt:
			if end == len(data) {
				torn = start
			} else {
				corrupt += end - start
			}
		}
	}
	if disordered == 0 && corrupt == 0 {
		if torn >= 0 {
			s.log.Warn("spool: dropping torn tail of segment", "segment", filepath.Base(path), "offset", torn, "bytes", len(data)-torn)
			if err := truncateSync(path, int64(torn)); err != nil {
				return nil, err
			}
		}
		return seg, nil
	}
	q := Quarantine{Segment: filepath.Base(path), Disordered: disordered, CorruptBytes: corrupt}
	if cause == "" {
		cause = fmt.Sprintf("%d corrupt bytes", corrupt)
	}
	q.Path, err = s.quarantine(path, data)
	if err != nil {
		return nil, err
	}
	var good []byte
	for _, r := range keep {
		good = append(good, data[r[0]:r[1]]...)
	}
	if len(good) == 0 {
		err = os.Remove(path)
	} else {
		err = replaceFile(path, good)
	}
	if err != nil {
		return nil, fmt.Errorf("spool: repair %s: %w", filepath.Base(path), err)
	}
	s.log.Warn("spool: segment repaired, original quarantined", "segment", q.Segment, "quarantine", filepath.Base(q.Path),
		"disordered", disordered, "corruptBytes", corrupt, "kept", seg.count, "cause", cause)
	s.quarantined = append(s.quarantined, q)
	if seg.count == 0 {
		return nil, nil
	}
	return seg, nil
}

// quarantine keeps a copy of a segment's original bytes beside the spool
// (at most maxQuarantined such files, the newest) and returns its path.
func (s *Spool) quarantine(path string, data []byte) (string, error) {
	q := fmt.Sprintf("%s.%d%s", path, s.opts.Now().UnixNano(), quarSuffix)
	if err := writeSynced(q, data); err != nil {
		return "", fmt.Errorf("spool: quarantine: %w", err)
	}
	old, _ := filepath.Glob(filepath.Join(s.opts.Dir, "*"+quarSuffix))
	if len(old) > maxQuarantined {
		type aged struct {
			p string
			t time.Time
		}
		var as []aged
		for _, p := range old {
			if st, err := os.Stat(p); err == nil {
				as = append(as, aged{p, st.ModTime()})
			}
		}
		sort.Slice(as, func(i, j int) bool { return as[i].t.After(as[j].t) })
		for _, a := range as[min(len(as), maxQuarantined):] {
			_ = os.Remove(a.p)
		}
	}
	return q, nil
}

// TakeQuarantined returns the segments Open repaired since the last call.
func (s *Spool) TakeQuarantined() []Quarantine {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.quarantined
	s.quarantined = nil
	return q
}

// scanKind is what scanner.next found.
type scanKind int

const (
	scanEnd      scanKind = iota
	scanRecord            // a well-formed record above the previous one
	scanDisorder          // a well-formed record not above the previous one, or above MaxSeq
	scanCorrupt           // bytes that are no record, up to the next record found (or the end)
)

// scanner walks the records of a segment's bytes. Records must rise above
// prev; after corrupt bytes it looks for the next well-formed record
// numbered just above max(prev, hint).
type scanner struct {
	b    []byte
	off  int
	prev uint64
	hint uint64
}

func (sc *scanner) next() (e Entry, start, end int, kind scanKind) {
	start = sc.off
	if start >= len(sc.b) {
		return Entry{}, start, start, scanEnd
	}
	if e, n, ok := parseRecord(sc.b[start:]); ok {
		sc.off = start + n
		if e.Seq <= sc.prev || e.Seq > MaxSeq {
			return e, start, sc.off, scanDisorder
		}
		sc.prev = e.Seq
		return e, start, sc.off, scanRecord
	}
	sc.off = sc.resync(start + 1)
	return Entry{}, start, sc.off, scanCorrupt
}

// resync returns the offset of the first well-formed record at or after
// from numbered within resyncWindow above max(prev, hint), or len(b).
func (sc *scanner) resync(from int) int {
	base := max(sc.prev, sc.hint)
	for j := from; j+headerLen+fixedLen <= len(sc.b); j++ {
		length := binary.LittleEndian.Uint32(sc.b[j:])
		if length < fixedLen || length > fixedLen+MaxRecordBytes || int64(j)+headerLen+int64(length) > int64(len(sc.b)) {
			continue
		}
		seq := binary.LittleEndian.Uint64(sc.b[j+headerLen:])
		if seq <= base || seq-base > resyncWindow {
			continue
		}
		if _, _, ok := parseRecord(sc.b[j:]); ok {
			return j
		}
	}
	return len(sc.b)
}

// parseRecord decodes the record at the start of b; ok is false when b
// does not start with a whole, well-formed one. The payload aliases b.
func parseRecord(b []byte) (e Entry, n int, ok bool) {
	if len(b) < headerLen {
		return Entry{}, 0, false
	}
	length := binary.LittleEndian.Uint32(b[0:4])
	if length < fixedLen || length > fixedLen+MaxRecordBytes || int64(len(b)) < headerLen+int64(length) {
		return Entry{}, 0, false
	}
	body := b[headerLen : headerLen+int(length)]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[4:8]) {
		return Entry{}, 0, false
	}
	return Entry{
		Seq:     binary.LittleEndian.Uint64(body[0:8]),
		Time:    time.Unix(0, int64(binary.LittleEndian.Uint64(body[8:16]))),
		Payload: body[fixedLen:],
	}, headerLen + int(length), true
}

func encodeRecord(seq uint64, t time.Time, payload []byte) []byte {
	buf := make([]byte, headerLen+fixedLen+len(payload))
	body := buf[headerLen:]
	binary.LittleEndian.PutUint64(body[0:8], seq)
	binary.LittleEndian.PutUint64(body[8:16], uint64(t.UnixNano()))
	copy(body[fixedLen:], payload)
	binary.LittleEndian.PutUint32(buf[0:4], uint32(len(body)))
	binary.LittleEndian.PutUint32(buf[4:8], crc32.Checksum(body, castagnoli))
	return buf
}

// Append stores payload as the next record and returns its sequence.
func (s *Spool) Append(payload []byte) (uint64, error) {
	if len(payload) > MaxRecordBytes {
		return 0, fmt.Errorf("spool: record of %d bytes over %d", len(payload), MaxRecordBytes)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	if s.next > MaxSeq {
		return 0, ErrExhausted
	}
	now := s.opts.Now()
	rec := encodeRecord(s.next, now, payload)
	cur := s.current()
	if cur == nil || (cur.size > 0 && cur.size+int64(len(rec)) > s.opts.SegmentBytes) {
		if err := s.rotate(); err != nil {
			return 0, err
		}
		cur = s.current()
	}
	if _, err := s.w.Write(rec); err != nil {
		// A partial write is a torn record: cut it off so the segment stays
		// readable for the records that follow.
		_ = s.w.Truncate(cur.size)
		return 0, fmt.Errorf("spool: write: %w", err)
	}
	seq := s.next
	s.next++
	if cur.count == 0 {
		cur.first = seq
		cur.oldest = now
	}
	cur.count++
	cur.last = seq
	cur.newest = now
	cur.size += int64(len(rec))
	s.total += int64(len(rec))
	s.dirty = true
	if s.opts.SyncInterval < 0 || now.Sub(s.lastSync) >= s.opts.SyncInterval {
		if err := s.syncLocked(now); err != nil {
			return seq, err
		}
	}
	s.enforceLocked(now)
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return seq, nil
}

func (s *Spool) current() *segment {
	if len(s.segs) == 0 || s.w == nil {
		return nil
	}
	return s.segs[len(s.segs)-1]
}

func (s *Spool) rotate() error {
	if s.w != nil {
		if err := s.w.Sync(); err != nil {
			return fmt.Errorf("spool: %w", err)
		}
		if err := s.w.Close(); err != nil {
			return fmt.Errorf("spool: %w", err)
		}
		s.w = nil
	}
	path := filepath.Join(s.opts.Dir, fmt.Sprintf("%020d%s", s.next, segSuffix))
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	s.w = w
	s.segs = append(s.segs, &segment{first: s.next, last: s.next - 1, path: path})
	return syncDir(s.opts.Dir)
}

// Notify returns a channel that receives a value after an Append.
func (s *Spool) Notify() <-chan struct{} { return s.notify }

// Read returns up to max records with a sequence above after (and above
// every acknowledged record), at most maxBytes of payload in all (at least
// one record is returned when one is pending).
func (s *Spool) Read(after uint64, max, maxBytes int) ([]Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	after = maxU(after, s.floor)
	var cutoff time.Time
	if s.opts.MaxAge > 0 {
		cutoff = s.opts.Now().Add(-s.opts.MaxAge)
	}
	var out []Entry
	size := 0
	for _, seg := range s.segs {
		if seg.count == 0 || seg.last <= after {
			continue
		}
		done, err := s.readSegment(seg, after, cutoff, max, maxBytes, &out, &size)
		if err != nil {
			return out, err
		}
		if done {
			break
		}
	}
	return out, nil
}

func (s *Spool) readSegment(seg *segment, after uint64, cutoff time.Time, maxN, maxBytes int, out *[]Entry, size *int) (bool, error) {
	f, err := os.Open(seg.path)
	if err != nil {
		return false, fmt.Errorf("spool: %w", err)
	}
	defer f.Close()
	var off int64
	hint := max(seg.first, 1) - 1
	if c := s.cur; c.path == seg.path && c.seq <= after && c.off <= seg.size {
		off, hint = c.off, c.seq
	}
	data := make([]byte, seg.size-off)
	if _, err := f.ReadAt(data, off); err != nil {
		return false, fmt.Errorf("spool: %s: %w", filepath.Base(seg.path), err)
	}
	// Open checked the segment; corruption since (a disk fault) is skipped
	// as Open would, and logged.
	sc := scanner{b: data, hint: hint}
	for {
		e, start, end, kind := sc.next()
		switch kind {
		case scanEnd:
			return false, nil
		case scanCorrupt, scanDisorder:
			s.log.Warn("spool: skipping unreadable bytes", "segment", filepath.Base(seg.path), "offset", off+int64(start), "bytes", end-start)
			continue
		}
		if e.Seq <= after {
			continue
		}
		if !cutoff.IsZero() && e.Time.Before(cutoff) && len(*out) == 0 {
			// Expired and nothing newer returned yet: drop it like the
			// size bound would.
			if e.Seq > s.floor {
				s.dropped++
				s.floor = e.Seq
			}
			continue
		}
		if len(*out) >= maxN || (len(*out) > 0 && *size+len(e.Payload) > maxBytes) {
			return true, nil
		}
		e.Payload = append([]byte(nil), e.Payload...) // not the whole buffer
		*out = append(*out, e)
		*size += len(e.Payload)
		s.cur = readCursor{path: seg.path, seq: e.Seq, off: off + int64(end)}
	}
}

// Ack marks every record up to and including seq as delivered: they are
// never returned again, and segments holding only such records are deleted.
func (s *Spool) Ack(seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if seq >= s.next {
		seq = s.next - 1
	}
	if seq <= s.floor {
		return nil
	}
	s.floor = seq
	return s.compactLocked()
}

// compactLocked deletes fully consumed segments (never the open one) and
// persists the state.
func (s *Spool) compactLocked() error {
	for len(s.segs) > 1 && s.segs[0].last <= s.floor {
		s.removeOldest()
	}
	return writeState(filepath.Join(s.opts.Dir, stateFile), s.floor, s.next-1)
}

func (s *Spool) removeOldest() {
	seg := s.segs[0]
	if err := os.Remove(seg.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("spool: remove segment", "segment", filepath.Base(seg.path), "err", err)
	}
	s.total -= seg.size
	s.segs = s.segs[1:]
	if s.cur.path == seg.path {
		s.cur = readCursor{}
	}
}

// enforceLocked applies the size and age bounds, dropping the oldest
// segments first. The segment being written is never dropped whole.
func (s *Spool) enforceLocked(now time.Time) {
	changed := false
	for len(s.segs) > 1 {
		seg := s.segs[0]
		tooBig := s.total > s.opts.MaxBytes
		tooOld := s.opts.MaxAge > 0 && seg.count > 0 && now.Sub(seg.newest) > s.opts.MaxAge
		if !tooBig && !tooOld && seg.count > 0 {
			break
		}
		if seg.last > s.floor {
			n := seg.count
			if seg.first <= s.floor {
				n = int(seg.last - s.floor)
			}
			s.dropped += uint64(n)
			s.log.Warn("spool: dropping unacknowledged records", "count", n, "reason", map[bool]string{true: "size", false: "age"}[tooBig])
			s.floor = seg.last
		}
		s.removeOldest()
		changed = true
	}
	if changed {
		if err := writeState(filepath.Join(s.opts.Dir, stateFile), s.floor, s.next-1); err != nil {
			s.log.Warn("spool: write state", "err", err)
		}
	}
}

// Rebase is called when the relay reports a stored sequence (lastSeq) that
// this spool has not given out yet, which happens when the agent's state was
// lost: the pending records are renumbered above lastSeq so the relay does not
// take them for duplicates. It reports whether anything changed. The steps
// are ordered so that a crash anywhere keeps every pending record (see the
// package comment).
func (s *Spool) Rebase(lastSeq uint64) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, ErrClosed
	}
	if lastSeq < s.next {
		return false, nil
	}
	var pending []Entry
	size := 0
	for _, seg := range s.segs {
		if seg.count == 0 || seg.last <= s.floor {
			continue
		}
		if _, err := s.readSegment(seg, s.floor, time.Time{}, int(^uint(0)>>1), int(^uint(0)>>1), &pending, &size); err != nil {
			return false, err
		}
	}
	if lastSeq >= MaxSeq || uint64(len(pending)) > MaxSeq-lastSeq {
		return false, fmt.Errorf("spool: rebase above %d: %w", lastSeq, ErrExhausted)
	}
	first := lastSeq + 1
	seg := &segment{first: first, path: filepath.Join(s.opts.Dir, fmt.Sprintf("%020d%s", first, segSuffix))}
	if len(pending) > 0 {
		// 1. The renumbered records, in one new segment under a temporary
		// name, synced.
		var buf []byte
		for i, e := range pending {
			rec := encodeRecord(first+uint64(i), e.Time, e.Payload)
			buf = append(buf, rec...)
			if i == 0 {
				seg.oldest = e.Time
			}
			seg.newest = e.Time
		}
		seg.count, seg.last, seg.size = len(pending), first+uint64(len(pending))-1, int64(len(buf))
		tmp := seg.path + tmpSuffix
		if err := writeSynced(tmp, buf); err != nil {
			return false, fmt.Errorf("spool: rebase: %w", err)
		}
		s.crashPoint("written")
		// 2. Into place, atomically: from here the new copies survive a
		// crash; the old ones, numbered below lastSeq, are acknowledged
		// away by the relay's next welcome.
		if err := os.Rename(tmp, seg.path); err != nil {
			return false, fmt.Errorf("spool: rebase: %w", err)
		}
		if err := syncDir(s.opts.Dir); err != nil {
			return false, err
		}
		s.crashPoint("renamed")
	}
	// 3. The state: everything up to lastSeq is the relay's.
	next := first + uint64(len(pending))
	if err := writeState(filepath.Join(s.opts.Dir, stateFile), lastSeq, next-1); err != nil {
		return false, err
	}
	s.crashPoint("state")
	// 4. The old segments go.
	if s.w != nil {
		_ = s.w.Close()
		s.w = nil
	}
	for len(s.segs) > 0 {
		s.removeOldest()
	}
	s.next, s.floor = next, lastSeq
	if len(pending) > 0 {
		w, err := os.OpenFile(seg.path, os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return true, fmt.Errorf("spool: %w", err)
		}
		s.w = w
		s.segs = []*segment{seg}
		s.total = seg.size
	}
	return true, nil
}

func (s *Spool) crashPoint(step string) {
	if s.crash != nil {
		s.crash(step)
	}
}

// TakeDropped returns the number of unacknowledged records dropped by the
// size and age bounds since the last call, and resets it.
func (s *Spool) TakeDropped() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.dropped
	s.dropped = 0
	return n
}

// Stats describes the spool's content.
type Stats struct {
	Pending  int    // records not yet acknowledged
	Bytes    int64  // size of the segment files
	Acked    uint64 // every record up to Acked is delivered or dropped
	LastSeq  uint64 // the last sequence given out
	Segments int
}

// Stats returns the spool's current figures.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Bytes: s.total, Acked: s.floor, LastSeq: s.next - 1, Segments: len(s.segs)}
	for _, seg := range s.segs {
		if seg.count == 0 || seg.last <= s.floor {
			continue
		}
		if seg.first > s.floor {
			st.Pending += seg.count
		} else {
			st.Pending += int(seg.last - s.floor)
		}
	}
	return st
}

// Sync flushes written records to stable storage if any are unsynced.
func (s *Spool) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return s.syncLocked(s.opts.Now())
}

func (s *Spool) syncLocked(now time.Time) error {
	s.lastSync = now
	if !s.dirty || s.w == nil {
		return nil
	}
	s.dirty = false
	if err := s.w.Sync(); err != nil {
		return fmt.Errorf("spool: fsync: %w", err)
	}
	return nil
}

// Close syncs and closes the spool.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	err := s.syncLocked(s.opts.Now())
	s.closed = true
	if s.w != nil {
		if cerr := s.w.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("spool: %w", cerr)
		}
	}
	return err
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// The state file holds the acknowledged floor and the highest sequence
// given out, with a CRC, replaced atomically.
func readState(path string) (floor, high uint64, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("spool: %w", err)
	}
	if len(b) != 20 || crc32.Checksum(b[:16], castagnoli) != binary.LittleEndian.Uint32(b[16:]) {
		// A torn state file (rename is atomic, so only a disk fault does
		// this): resend everything on disk rather than lose anything.
		return 0, 0, nil
	}
	return binary.LittleEndian.Uint64(b[0:8]), binary.LittleEndian.Uint64(b[8:16]), nil
}

func writeState(path string, floor, high uint64) error {
	var b [20]byte
	binary.LittleEndian.PutUint64(b[0:8], floor)
	binary.LittleEndian.PutUint64(b[8:16], high)
	binary.LittleEndian.PutUint32(b[16:], crc32.Checksum(b[:16], castagnoli))
	if err := replaceFile(path, b[:]); err != nil {
		return fmt.Errorf("spool: state: %w", err)
	}
	return nil
}

// replaceFile replaces path with data crash-safely: written to a temporary
// file, synced, renamed over path, and the directory synced.
func replaceFile(path string, data []byte) error {
	tmp := path + tmpSuffix
	if err := writeSynced(tmp, data); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// writeSynced creates (or truncates) path with data and syncs it.
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func truncateSync(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("spool: truncate %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("spool: sync dir: %w", err)
	}
	return nil
}
