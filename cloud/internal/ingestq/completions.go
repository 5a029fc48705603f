package ingestq

// Completions carry the outcomes of each batch a writer finished to a
// goroutine of their own, which completes them (calls the callers' callbacks)
// in the writer's order while the writer goes on with its next batch. The
// writer fills a slice from Slice and hands it over with Send; the slices
// come back for reuse, so a steady writer allocates none.
type Completions[C any] struct {
	batches  chan []C
	spare    chan []C
	finished chan struct{}
}

// NewCompletions starts the goroutine that calls complete with each sent
// slice, in order (complete must not keep the slice).
func NewCompletions[C any](complete func([]C)) *Completions[C] {
	c := &Completions[C]{batches: make(chan []C, 64), spare: make(chan []C, 66), finished: make(chan struct{})}
	go func() {
		defer close(c.finished)
		for cs := range c.batches {
			complete(cs)
			clear(cs)
			c.reuse(cs[:0])
		}
	}()
	return c
}

// Slice returns an empty slice to fill: one sent before, or nil.
func (c *Completions[C]) Slice() []C {
	select {
	case cs := <-c.spare:
		return cs
	default:
		return nil
	}
}

// Send hands cs to the completing goroutine; an empty cs is only kept for
// reuse. Only the writer goroutine sends.
func (c *Completions[C]) Send(cs []C) {
	if len(cs) == 0 {
		c.reuse(cs)
		return
	}
	c.batches <- cs
}

func (c *Completions[C]) reuse(cs []C) {
	if cs == nil {
		return
	}
	select {
	case c.spare <- cs:
	default:
	}
}

// Close waits until every slice sent was completed, once the writer sends
// no more (after its queue's Close).
func (c *Completions[C]) Close() {
	close(c.batches)
	<-c.finished
}
