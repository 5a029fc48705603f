package sqlite

import (
	"context"
	"sync"
	"testing"
)

// TestIngestSplitsALargeQueue fills the queue (more than a transaction's
// worth of jobs) while the writer is held up, then lets it go: no
// transaction takes more than maxJobsPerTx jobs, and the first jobs
// complete (their callbacks run) before the last ones are even applied.
func TestIngestSplitsALargeQueue(t *testing.T) {
	_, s, _ := newAgentStore(t)
	w := s.w
	ctx := context.Background()
	gate := make(chan struct{})
	held := make(chan struct{})
	blocked := make(chan error, 1)
	go func() {
		blocked <- w.do(ctx, false, func(*ingestTx) error {
			close(held)
			<-gate
			return nil
		})
	}()
	<-held
	before := w.snapshot()

	// A full queue (enqueue blocks beyond it while the writer is held).
	n := w.q.Size()
	if n <= maxJobsPerTx {
		t.Fatalf("the queue (%d) holds no more than one transaction of %d jobs", n, maxJobsPerTx)
	}
	var mu sync.Mutex
	var order []string // "apply" and "done" of the first and last job
	var wg sync.WaitGroup
	txs := make(map[*ingestTx]int)
	for i := range n {
		wg.Add(1)
		job := &ingestJob{
			apply: func(tx *ingestTx) error {
				mu.Lock()
				txs[tx]++
				if i == n-1 {
					order = append(order, "apply last")
				}
				mu.Unlock()
				return nil
			},
			after: func(err error) {
				if err != nil {
					t.Error(err)
				}
				if i == 0 {
					mu.Lock()
					order = append(order, "done first")
					mu.Unlock()
				}
				wg.Done()
			},
		}
		if err := w.enqueue(ctx, job); err != nil {
			t.Fatal(err)
		}
	}
	close(gate)
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	if len(txs) < 2 {
		t.Errorf("%d jobs went into %d transactions, want at least 2", n, len(txs))
	}
	for _, k := range txs {
		if k > maxJobsPerTx {
			t.Errorf("a transaction held %d jobs, more than %d", k, maxJobsPerTx)
		}
	}
	if len(order) != 2 || order[0] != "done first" {
		t.Errorf("order = %v: the first job should complete before the last is applied", order)
	}
	if st := w.snapshot(); st.Jobs-before.Jobs < int64(n) || st.MaxBatch > maxJobsPerTx {
		t.Errorf("stats: %d jobs since, max batch %d", st.Jobs-before.Jobs, st.MaxBatch)
	}
}
