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
// rotates at Options.SegmentBytes. On Open every segment is scanned; a torn
// or corrupt record (short, wrong length or wrong CRC, as left by a crash in
// the middle of a write) ends the segment there: the file is truncated at the
// last good record and everything before it is kept.
//
// Durability: Append writes each record with one write(2) and returns, so a
// record survives a kill -9 of the agent as soon as Append returns. fsync is
// batched for flash: the data is synced when SyncInterval has passed since the
// last sync (on the next Append or on Sync), and on Close, so a power cut
// loses at most SyncInterval of records.
//
// Ack(seq) marks every record up to seq as delivered; whole segments below
// the mark are deleted, and the mark (with the highest sequence ever given
// out) is persisted in a small state file replaced atomically, so a restart
// resends exactly the unacknowledged records. The spool is bounded by total
// size and by record age: the oldest records go first, and the number dropped
// is reported by TakeDropped so the agent can emit a spool.dropped event.
package spool

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	headerLen = 8  // length + crc
	fixedLen  = 16 // seq + time
	// MaxRecordBytes bounds one record's payload.
	MaxRecordBytes = 1 << 20
	segSuffix      = ".seg"
	stateFile      = "state"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrClosed is returned by operations on a closed spool.
var ErrClosed = errors.New("spool closed")

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
	s.floor = floor
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
	for _, f := range files {
		seg, err := s.scan(f.path, f.first)
		if err != nil {
			return err
		}
		if seg.count == 0 && f.path != files[len(files)-1].path {
			_ = os.Remove(f.path)
			continue
		}
		if seg.count > 0 && seg.last <= s.floor {
			// Fully acknowledged before a crash interrupted its removal.
			_ = os.Remove(f.path)
			continue
		}
		if seg.count > 0 {
			maxSeq = max(maxSeq, seg.last)
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

// scan reads a segment, truncating it at the first torn or corrupt record.
func (s *Spool) scan(path string, first uint64) (*segment, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	defer f.Close()
	seg := &segment{first: first, last: first - 1, path: path}
	r := bufio.NewReader(f)
	var off int64
	prev := first - 1
	for {
		e, n, err := readRecord(r)
		if err == io.EOF {
			break
		}
		if err != nil || (seg.count > 0 && e.Seq <= prev) {
			st, _ := f.Stat()
			s.log.Warn("spool: dropping torn tail of segment", "segment", filepath.Base(path), "offset", off, "bytes", st.Size()-off, "cause", errString(err))
			if err := f.Truncate(off); err != nil {
				return nil, fmt.Errorf("spool: truncate %s: %w", path, err)
			}
			if err := f.Sync(); err != nil {
				return nil, fmt.Errorf("spool: %w", err)
			}
			break
		}
		if seg.count == 0 {
			seg.first = e.Seq
			seg.oldest = e.Time
		}
		seg.count++
		seg.last = e.Seq
		seg.newest = e.Time
		prev = e.Seq
		off += n
	}
	seg.size = off
	return seg, nil
}

func errString(err error) string {
	if err == nil {
		return "sequence out of order"
	}
	return err.Error()
}

var errCorrupt = errors.New("corrupt record")

// readRecord reads one record; it returns io.EOF only at a clean end.
func readRecord(r *bufio.Reader) (Entry, int64, error) {
	var hdr [headerLen]byte
	n, err := io.ReadFull(r, hdr[:])
	if err == io.EOF {
		return Entry{}, 0, io.EOF
	}
	if err != nil {
		return Entry{}, 0, fmt.Errorf("short header (%d bytes): %w", n, errCorrupt)
	}
	length := binary.LittleEndian.Uint32(hdr[0:4])
	sum := binary.LittleEndian.Uint32(hdr[4:8])
	if length < fixedLen || length > fixedLen+MaxRecordBytes {
		return Entry{}, 0, fmt.Errorf("bad length %d: %w", length, errCorrupt)
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(r, body); err != nil {
		return Entry{}, 0, fmt.Errorf("short body: %w", errCorrupt)
	}
	if crc32.Checksum(body, castagnoli) != sum {
		return Entry{}, 0, fmt.Errorf("crc mismatch: %w", errCorrupt)
	}
	e := Entry{
		Seq:     binary.LittleEndian.Uint64(body[0:8]),
		Time:    time.Unix(0, int64(binary.LittleEndian.Uint64(body[8:16]))),
		Payload: body[fixedLen:],
	}
	return e, int64(headerLen) + int64(length), nil
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

func (s *Spool) readSegment(seg *segment, after uint64, cutoff time.Time, max, maxBytes int, out *[]Entry, size *int) (bool, error) {
	f, err := os.Open(seg.path)
	if err != nil {
		return false, fmt.Errorf("spool: %w", err)
	}
	defer f.Close()
	var off int64
	if c := s.cur; c.path == seg.path && c.seq <= after && c.off <= seg.size {
		if _, err := f.Seek(c.off, io.SeekStart); err != nil {
			return false, fmt.Errorf("spool: %w", err)
		}
		off = c.off
	}
	r := bufio.NewReader(io.LimitReader(f, seg.size-off))
	for {
		e, n, err := readRecord(r)
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("spool: %s: %w", filepath.Base(seg.path), err)
		}
		off += n
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
		if len(*out) >= max || (len(*out) > 0 && *size+len(e.Payload) > maxBytes) {
			return true, nil
		}
		*out = append(*out, e)
		*size += len(e.Payload)
		s.cur = readCursor{path: seg.path, seq: e.Seq, off: off}
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
// take them for duplicates. It reports whether anything changed.
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
	if s.w != nil {
		_ = s.w.Close()
		s.w = nil
	}
	for len(s.segs) > 0 {
		s.removeOldest()
	}
	s.next = lastSeq + 1
	s.floor = lastSeq
	for _, e := range pending {
		if err := s.rotateIfNeeded(e); err != nil {
			return true, err
		}
		rec := encodeRecord(s.next, e.Time, e.Payload)
		if _, err := s.w.Write(rec); err != nil {
			return true, fmt.Errorf("spool: write: %w", err)
		}
		cur := s.current()
		if cur.count == 0 {
			cur.first, cur.oldest = s.next, e.Time
		}
		cur.count++
		cur.last, cur.newest = s.next, e.Time
		cur.size += int64(len(rec))
		s.total += int64(len(rec))
		s.next++
	}
	if err := s.syncLocked(s.opts.Now()); err != nil {
		return true, err
	}
	return true, writeState(filepath.Join(s.opts.Dir, stateFile), s.floor, s.next-1)
}

func (s *Spool) rotateIfNeeded(e Entry) error {
	cur := s.current()
	if cur == nil || (cur.size > 0 && cur.size+int64(headerLen+fixedLen+len(e.Payload)) > s.opts.SegmentBytes) {
		return s.rotate()
	}
	return nil
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
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	if _, err := f.Write(b[:]); err != nil {
		f.Close()
		return fmt.Errorf("spool: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("spool: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	return syncDir(filepath.Dir(path))
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
