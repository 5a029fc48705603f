package agentlink

import (
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// A connection's goroutine reads; workers decode and handle. Handling a
// heartbeat grows a goroutine's stack to 16 KiB (decoding, the beat's rules,
// the store's queue), and a goroutine keeps its stack while it waits for
// the next message: on every connection's own goroutine that was 16 KiB
// per idle agent. The workers are as many as messages in hand at once.

// WorkerIdle is how long a worker without a message waits for one before
// it exits.
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
		j.err = s.handleSafely(j)
		j.done.Done()
		t.Reset(WorkerIdle)
		select {
		case j = <-s.jobs:
		case <-t.C:
			return
		}
	}
}

// handleSafely handles j's message; a panic ends that connection only (as
// net/http's recovery did when the session ran on its goroutine), logged
// with its stack.
func (s *Server) handleSafely(j *job) (err error) {
	defer recovered(j.c, &err)
	return j.c.handleFrame(j.typ, j.buf)
}

// recovered turns a panic of c's session into *err, logged with its
// stack; deferred.
func recovered(c *conn, err *error) {
	if p := recover(); p != nil {
		c.log.Error("panic serving an agent connection", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		*err = fmt.Errorf("agentlink: panic: %v", p)
	}
}
