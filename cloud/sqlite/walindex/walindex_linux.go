package walindex

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Index is the start of a database's WAL index (the -shm file), mapped
// read-only and shared, so that other processes' commits show at once.
//
// The file stays open until Close, which must come after every SQLite
// connection of this process to the database is closed (cloud/sqlite's
// DB.Close does so). Closing a descriptor drops all of the process's
// POSIX record locks on that file, SQLite's included: closing it while
// SQLite holds its shared lock on the -shm (the "DMS" byte, which tells
// other processes the index is in use) lets the next process that opens the
// database, such as the admin CLI, think it is alone and truncate and rebuild
// the index under the relay: a SIGBUS in the relay's next commit, or a
// corrupt index. See https://www.sqlite.org/howtocorrupt.html#_posix_advisory_locks_canceled_by_a_separate_thread_doing_close_
type Index struct {
	f   *os.File
	mem []byte
}

// mapSize is how much of the -shm file is mapped: one page holds the
// header's two copies (bytes 0..95); the file is at least 32 KiB once
// SQLite has initialized it.
const mapSize = 4096

// Open maps the WAL index of the database file at dbPath, which SQLite must
// have opened in WAL mode (the -shm file exists and is initialized). The
// returned Index is never nil: whatever the error, Close it after the
// database's SQLite connections (on an error, its Header reports not ok).
func Open(dbPath string) (*Index, error) {
	w := &Index{}
	f, err := os.Open(dbPath + "-shm")
	if err != nil {
		return w, err
	}
	// On failure the file stays open, to be closed with the rest (see
	// Index): mem is nil and Header reports not ok.
	w.f = f
	fi, err := f.Stat()
	if err != nil {
		return w, err
	}
	if fi.Size() < mapSize {
		return w, fmt.Errorf("walindex: %s-shm: %d bytes, not initialized", dbPath, fi.Size())
	}
	w.mem, err = syscall.Mmap(int(f.Fd()), 0, mapSize, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return w, fmt.Errorf("walindex: map %s-shm: %w", dbPath, err)
	}
	return w, nil
}

// Header reads the header's first copy, then its second, as SQLite's
// readers do (a writer stores the second copy first); ok is false when they
// differ (a commit is writing it), the index is not initialized or not
// mapped. A commit since the last call changes h; so may a checkpoint.
// Callers serialize their calls with Close.
func (w *Index) Header() (h Header, ok bool) {
	if w == nil || w.mem == nil {
		return h, false
	}
	p := unsafe.Pointer(&w.mem[0])
	var h2 Header
	for i := range h {
		h[i] = atomic.LoadUint32((*uint32)(unsafe.Add(p, 4*i)))
	}
	for i := range h2 {
		h2[i] = atomic.LoadUint32((*uint32)(unsafe.Add(p, 48+4*i)))
	}
	isInit := (*[4]byte)(unsafe.Pointer(&h[3]))[0] != 0 // the byte at offset 12
	return h, h == h2 && isInit
}

// Close unmaps the index and closes the file; call it only after every
// SQLite connection of this process to the database is closed (see Index).
// Close on nil does nothing.
func (w *Index) Close() {
	if w == nil {
		return
	}
	if w.mem != nil {
		_ = syscall.Munmap(w.mem)
		w.mem = nil
	}
	if w.f != nil {
		_ = w.f.Close()
		w.f = nil
	}
}
