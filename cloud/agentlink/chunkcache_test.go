package agentlink

import (
	"bytes"
	"crypto/rand"
	"io"
	"testing"
)

// countingReaderAt counts the reads made of a bytes.Reader.
type countingReaderAt struct {
	r     *bytes.Reader
	reads int
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	c.reads++
	return c.r.ReadAt(p, off)
}

// TestChunkCache: read sequentially in small pieces the content reads
// whole and each chunk of the source once; reads at any offset give the
// source's bytes; past the end is io.EOF; a source shorter than it says
// is io.ErrUnexpectedEOF.
func TestChunkCache(t *testing.T) {
	data := make([]byte, 3500)
	rand.Read(data)
	src := &countingReaderAt{r: bytes.NewReader(data)}
	c := newChunkCache(src, int64(len(data)), 1000)
	var got bytes.Buffer
	if _, err := io.CopyBuffer(&got, io.NewSectionReader(c, 0, int64(len(data))), make([]byte, 32)); err != nil || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("sequential read: %d bytes, %v", got.Len(), err)
	}
	if src.reads != 4 {
		t.Errorf("sequential read of 4 chunks read the source %d times", src.reads)
	}
	for _, tc := range []struct {
		off     int64
		n, want int
		err     error
	}{
		{0, 10, 10, nil},
		{995, 10, 10, nil},
		{999, 1002, 1002, nil},
		{3495, 10, 5, io.EOF},
		{3500, 1, 0, io.EOF},
		{500, 3000, 3000, nil},
	} {
		p := make([]byte, tc.n)
		n, err := c.ReadAt(p, tc.off)
		if n != tc.want || err != tc.err || !bytes.Equal(p[:n], data[tc.off:tc.off+int64(n)]) {
			t.Errorf("ReadAt(%d at %d) = %d, %v; want %d, %v and the source's bytes", tc.n, tc.off, n, err, tc.want, tc.err)
		}
	}
	short := newChunkCache(bytes.NewReader(data[:2500]), int64(len(data)), 1000)
	if n, err := short.ReadAt(make([]byte, 1000), 2000); err != io.ErrUnexpectedEOF || n != 0 {
		t.Errorf("short source: %d, %v", n, err)
	}
}
