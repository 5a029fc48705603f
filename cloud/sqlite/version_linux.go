package sqlite

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// walIndex is the start of a database's WAL index (the -shm file), mapped
// read-only and shared, so that other processes' commits show at once.
//
// The file stays open until close, which DB.Close calls after every SQLite
// connection is closed. Closing a descriptor drops all of the process's
// POSIX record locks on that file, SQLite's included: closing it while
// SQLite holds its shared lock on the -shm (the "DMS" byte, which tells
// other processes the index is in use) lets the next process that opens the
// database, such as the admin CLI, think it is alone and truncate and rebuild
// the index under the relay: a SIGBUS in the relay's next commit, or a
// corrupt index. See https://www.sqlite.org/howtocorrupt.html#_posix_advisory_locks_canceled_by_a_separate_thread_doing_close_
type walIndex struct {
	f   *os.File
	mem []byte
}

// walIndexMap is how much of the -shm file is mapped: one page holds the
// header's two copies (bytes 0..95); the file is at least 32 KiB once
// SQLite has initialized it.
const walIndexMap = 4096

func openWALIndex(dbPath string) (*walIndex, error) {
	f, err := os.Open(dbPath + "-shm")
	if err != nil {
		return nil, err
	}
	// On failure the file is still returned, to be closed with the rest
	// (see walIndex): its mem is nil and header reports not ok.
	w := &walIndex{f: f}
	fi, err := f.Stat()
	if err != nil {
		return w, err
	}
	if fi.Size() < walIndexMap {
		return w, fmt.Errorf("sqlite: %s-shm: %d bytes, not initialized", dbPath, fi.Size())
	}
	w.mem, err = syscall.Mmap(int(f.Fd()), 0, walIndexMap, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return w, fmt.Errorf("sqlite: map %s-shm: %w", dbPath, err)
	}
	return w, nil
}

// header reads the header's first copy, then its second, as SQLite's
// readers do (a writer stores the second copy first); ok is false when they
// differ (a commit is writing it) or the index is not initialized.
func (w *walIndex) header() (h walHeader, ok bool) {
	if w.mem == nil {
		return h, false
	}
	p := unsafe.Pointer(&w.mem[0])
	var h2 walHeader
	for i := range h {
		h[i] = atomic.LoadUint32((*uint32)(unsafe.Add(p, 4*i)))
	}
	for i := range h2 {
		h2[i] = atomic.LoadUint32((*uint32)(unsafe.Add(p, 48+4*i)))
	}
	isInit := (*[4]byte)(unsafe.Pointer(&h[3]))[0] != 0 // the byte at offset 12
	return h, h == h2 && isInit
}

// close unmaps the index and closes the file; call it only after every
// SQLite connection to the database is closed.
func (w *walIndex) close() {
	if w.mem != nil {
		_ = syscall.Munmap(w.mem)
	}
	_ = w.f.Close()
}
