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

// DecodePointChunk calls each for the samples of a chunk, ascending; n is
// the count stored beside it, lastErr the cause of its last sample.
func DecodePointChunk(data []byte, n int, lastErr *string, each func(StoredSample) error) error {
	c, err := chunkenc.FromData(chunkenc.EncXOR, data)
	if err != nil {
		return fmt.Errorf("point chunk: %w", err)
	}
	if got := c.NumSamples(); got != n {
		return fmt.Errorf("point chunk: %d samples where %d were stored", got, n)
	}
	it := c.Iterator(nil)
	for i := 0; it.Next() == chunkenc.ValFloat; i++ {
		t, v := it.At()
		smp := StoredSample{At: t, Value: v}
		if math.IsNaN(v) {
			smp = StoredSample{At: t, Bad: true}
			if i == n-1 && lastErr != nil {
				smp.Error = *lastErr
			}
		}
		if err := each(smp); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("point chunk: %w", err)
	}
	return nil
}
