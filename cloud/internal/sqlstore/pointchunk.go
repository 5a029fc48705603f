package sqlstore

import (
	"fmt"
	"math"

	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// A chunk of point history (point_chunks.data) is a Prometheus XOR chunk
// (tsdb/chunkenc, the Gorilla encoding: delta-of-delta times, XORed
// values), the format Prometheus keeps on disk since 2017. A bad reading
// is stored as badNaN, the NaN Prometheus marks stale samples with, and
// any NaN reads back as a bad reading (the API has no NaN to show).

// badNaN marks a bad reading in a chunk.
var badNaN = math.Float64frombits(0x7ff0000000000002)

// MaxChunkSamples bounds the samples of one chunk (an XOR chunk counts
// them in 16 bits).
const MaxChunkSamples = math.MaxUint16

// EncodePointChunk encodes samples (ascending by At, at most
// MaxChunkSamples) as one chunk: its data and the cause of its last
// sample when that is a bad reading (nil otherwise).
func EncodePointChunk(samples []StoredSample) (data []byte, lastErr *string, err error) {
	if len(samples) == 0 || len(samples) > MaxChunkSamples {
		return nil, nil, fmt.Errorf("point chunk: %d samples (1..%d)", len(samples), MaxChunkSamples)
	}
	c := chunkenc.NewXORChunk()
	app, err := c.Appender()
	if err != nil {
		return nil, nil, fmt.Errorf("point chunk: %w", err)
	}
	for i, smp := range samples {
		if i > 0 && smp.At <= samples[i-1].At {
			return nil, nil, fmt.Errorf("point chunk: sample %d at %d not after %d", i, smp.At, samples[i-1].At)
		}
		v := smp.Value
		if smp.Bad {
			v = badNaN
		}
		app.Append(0, smp.At, v)
	}
	c.Compact()
	if last := samples[len(samples)-1]; last.Bad && last.Error != "" {
		e := last.Error
		lastErr = &e
	}
	return c.Bytes(), lastErr, nil
}

// ChunkSample is a sample as a chunk holds it: a NaN Value is a bad
// reading. It holds no pointer, so that decoding a week of samples into
// a reused slice costs the garbage collector nothing.
type ChunkSample struct {
	At    int64
	Value float64
}

// AppendPointChunk appends the samples of a chunk, ascending, to dst; n
// is the count stored beside it.
func AppendPointChunk(dst []ChunkSample, data []byte, n int) ([]ChunkSample, error) {
	var c chunkenc.XORChunk
	c.Reset(data)
	if got := c.NumSamples(); got != n {
		return dst, fmt.Errorf("point chunk: %d samples where %d were stored", got, n)
	}
	it := c.Iterator(nil)
	for it.Next() == chunkenc.ValFloat {
		t, v := it.At()
		dst = append(dst, ChunkSample{At: t, Value: v})
	}
	if err := it.Err(); err != nil {
		return dst, fmt.Errorf("point chunk: %w", err)
	}
	return dst, nil
}

// Stored is the sample as StoredSample, with cause when it is bad.
func (x ChunkSample) Stored(cause *string) StoredSample {
	if x.Value != x.Value {
		s := StoredSample{At: x.At, Bad: true}
		if cause != nil {
			s.Error = *cause
		}
		return s
	}
	return StoredSample{At: x.At, Value: x.Value}
}

// storedSamples converts a chunk's samples (its last one's cause lastErr).
func storedSamples(cs []ChunkSample, lastErr *string) []StoredSample {
	out := make([]StoredSample, len(cs))
	for i, x := range cs {
		var cause *string
		if i == len(cs)-1 {
			cause = lastErr
		}
		out[i] = x.Stored(cause)
	}
	return out
}
