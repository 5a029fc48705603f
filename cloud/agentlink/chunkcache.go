package agentlink

import "io"

// chunkCache is an io.ReaderAt over src (size bytes long) that reads src
// only in whole chunks at multiples of chunk, and keeps the last one read.
// http.ServeContent copies a body 32 KiB at a time; over the store, whose
// ReadRelease reads whole stored chunks (cloud.ReleaseChunkBytes), each of
// those reads would read a 1 MiB chunk for 32 KiB of it. Through the cache a
// download reads each stored chunk once. Not safe for concurrent use.
type chunkCache struct {
	src   io.ReaderAt
	size  int64
	chunk int64
	buf   []byte // the chunk at offset at; empty for none
	at    int64
}

func newChunkCache(src io.ReaderAt, size int64, chunk int) *chunkCache {
	return &chunkCache{src: src, size: size, chunk: int64(chunk)}
}

// ReadAt implements io.ReaderAt.
func (c *chunkCache) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		pos := off + int64(n)
		if pos >= c.size {
			return n, io.EOF
		}
		if len(c.buf) == 0 || pos < c.at || pos >= c.at+int64(len(c.buf)) {
			if err := c.fill(pos - pos%c.chunk); err != nil {
				return n, err
			}
		}
		n += copy(p[n:], c.buf[pos-c.at:])
	}
	return n, nil
}

// fill reads the chunk at start into buf.
func (c *chunkCache) fill(start int64) error {
	want := min(c.chunk, c.size-start)
	if int64(cap(c.buf)) < want {
		c.buf = make([]byte, c.chunk)
	}
	k, err := c.src.ReadAt(c.buf[:want], start)
	if int64(k) < want {
		c.buf = c.buf[:0]
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	c.buf, c.at = c.buf[:k], start
	return nil
}
