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
type walIndex struct {
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
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() < walIndexMap {
		return nil, fmt.Errorf("sqlite: %s-shm: %d bytes, not initialized", dbPath, fi.Size())
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, walIndexMap, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("sqlite: map %s-shm: %w", dbPath, err)
	}
	return &walIndex{mem: mem}, nil
}

// header reads the header's first copy, then its second, as SQLite's
// readers do (a writer stores the second copy first); ok is false when they
// differ (a commit is writing it) or the index is not initialized.
func (w *walIndex) header() (h walHeader, ok bool) {
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

func (w *walIndex) close() { _ = syscall.Munmap(w.mem) }
