package agentlink

import (
	"sync"
	"time"

	"github.com/coder/websocket"
)

// A connection's goroutine reads; workers decode and handle. Handling a
// heartbeat grows a goroutine's stack to 16 KiB (decoding, the beat's rules,
// the store's queue), and a goroutine keeps its stack while it waits for
// the next message: on every connection's own goroutine that was 16 KiB
// per idle agent. The workers are as many as messages in hand at once;
// one idle for WorkerIdle exits.
const WorkerIdle = 5 * time.Second

// job is one message handed from a connection's goroutine to a worker.
type job struct {
	c    *conn
	typ  websocket.MessageType
	buf  *[]byte
	err  error
	done sync.WaitGroup
}

// handle has a worker handle the message in buf for c and waits for it.
func (s *Server) handle(c *conn, typ websocket.MessageType, buf *[]byte) error {
	j := &c.job
	j.c, j.typ, j.buf = c, typ, buf
	j.done.Add(1)
	select {
	case s.jobs <- j:
	default:
		go s.work(j)
	}
	j.done.Wait()
	err := j.err
	j.buf, j.err = nil, nil
	return err
}

// work handles j, then the jobs handed to it until none came for
// WorkerIdle.
func (s *Server) work(j *job) {
	t := time.NewTimer(WorkerIdle)
	defer t.Stop()
	for {
		j.err = j.c.handleFrame(j.typ, j.buf)
		j.done.Done()
		t.Reset(WorkerIdle)
		select {
		case j = <-s.jobs:
		case <-t.C:
			return
		}
	}
}
