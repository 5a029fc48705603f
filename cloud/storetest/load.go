package storetest

import (
	"sync"
	"testing"
)

// WriteLoop runs load beside a test: it calls write(0), write(1), ... in
// its own goroutine, a writer that keeps committing while the test checks
// what a reader, a pagination walk or a backup sees meanwhile, until the
// returned stop is called or write fails, which fails tb. stop waits for the
// call under way; it runs at the end of the test if not before.
func WriteLoop(tb testing.TB, write func(i int) error) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			if err := write(i); err != nil {
				tb.Error(err)
				return
			}
		}
	}()
	stop = sync.OnceFunc(func() { close(done); wg.Wait() })
	tb.Cleanup(stop)
	return stop
}
