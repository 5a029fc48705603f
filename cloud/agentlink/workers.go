package agentlink

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/fleet/fleet/shared/protocol"
)

// A connection's goroutine reads; workers decode and handle. Handling a
// heartbeat grows a goroutine's stack to 16 KiB (decoding, the beat's rules,
// the store's queue), and a goroutine keeps its stack while it waits for
// the next message: on every connection's own goroutine that was 16 KiB
// per idle agent.
//
// The workers are bounded (Server.maxWorkers). They were once as many as
// messages in hand at once, and a relay that fell behind (a GC mark phase
// taking its share of the CPUs at 20,000 heartbeats/s) started a worker
// for every connection with a message waiting: thousands of goroutines,
// each growing a 16 KiB stack, which the next mark phase scanned (the
// goroutine stacks measured 237–392 MiB at 20,000 agents under load,
// against 4 KiB per idle agent). Bounded, a backlog waits as connections
// parked on the jobs channel, holding their read buffer and a shallow
// stack, and the workers take it in arrival order.
//
// A worker handles a heartbeat itself: the store takes it without waiting
// for the commit (Store.Heartbeat calls back). Every other message may
// wait on the store (a records batch waits for its commit; a reconnect
// storm sends thousands at once, and their commits share transactions only
// if they wait together), so a worker decodes it and hands it to a
// goroutine of its own, and is free at once.

// WorkerIdle is how long a worker without a message waits for one before
// it exits.
const WorkerIdle = 5 * time.Second

// defaultMaxWorkers is the bound on workers: enough to keep every CPU busy
// while some wait on a lock or a full store queue, few enough that their
// stacks are nothing beside the connections'.
func defaultMaxWorkers() int { return max(32, 16*runtime.GOMAXPROCS(0)) }

// job is one message handed from a connection's goroutine to a worker.
type job struct {
	c    *conn
	typ  websocket.MessageType
	buf  *[]byte
	err  error
	done sync.WaitGroup
}

// handle hands the message in buf to a worker once c's previous message
// is handled (and returns that one's error, if it failed, giving buf
// back): an idle worker, else a new one while there are fewer than the
// bound, else the first to be free. It does not wait for the message.
func (s *Server) handle(c *conn, typ websocket.MessageType, buf *[]byte) error {
	if err := s.settled(c); err != nil {
		s.putBuf(buf)
		return err
	}
	j := &c.job
	j.c, j.typ, j.buf = c, typ, buf
	j.done.Add(1)
	select {
	case s.jobs <- j:
	default:
		select {
		case s.jobs <- j:
		case s.workerSlots <- struct{}{}:
			go s.work(j)
		}
	}
	return nil
}

// settled waits until c's message in a worker's hands (if any) is handled,
// and returns its error.
func (s *Server) settled(c *conn) error {
	j := &c.job
	j.done.Wait()
	return j.err
}

// finish ends j with err; a failed message closes its connection.
func (j *job) finish(err error) {
	j.buf, j.err = nil, err
	if err != nil {
		j.c.stop(err)
	}
	j.done.Done()
}

// work handles j, then the jobs handed to it until none came for
// WorkerIdle; then it gives its slot back.
func (s *Server) work(j *job) {
	defer func() { <-s.workerSlots }()
	t := time.NewTimer(WorkerIdle)
	defer t.Stop()
	// The worker's decoder, not each connection's: the decoded heartbeat
	// and its reused memory stay with the few workers, not with every idle
	// connection between its heartbeats (docs/benchmarks.md, "Memory per
	// idle agent").
	dec := new(decoder)
	for {
		s.run(j, dec)
		t.Reset(WorkerIdle)
		select {
		case j = <-s.jobs:
		case <-t.C:
			return
		}
	}
}

// run decodes j's message with dec and handles a heartbeat; any other
// message (decoded into memory of its own) goes on to a goroutine of its
// own (handleAside), which finishes j.
func (s *Server) run(j *job, dec *decoder) {
	m, err := s.decodeSafely(j, dec)
	if err == nil && m.Type != protocol.TypeHeartbeat {
		go s.handleAside(j, m)
		return
	}
	if err == nil {
		err = s.handleSafely(j, m)
	}
	j.finish(err)
}

// handleAside handles a message that may wait on the store, and finishes
// its job.
func (s *Server) handleAside(j *job, m protocol.Message) {
	j.finish(s.handleSafely(j, m))
}

// decodeSafely decodes j's message and gives its buffer back; a panic ends
// that connection only.
func (s *Server) decodeSafely(j *job, dec *decoder) (m protocol.Message, err error) {
	defer recovered(j.c, &err)
	return j.c.decodeFrame(j.typ, j.buf, dec)
}

// handleSafely handles j's decoded message; a panic ends that connection
// only (as net/http's recovery did when the session ran on its
// goroutine), logged with its stack.
func (s *Server) handleSafely(j *job, m protocol.Message) (err error) {
	defer recovered(j.c, &err)
	return j.c.handleMessage(m)
}

// recovered turns a panic of c's session into *err, logged with its
// stack; deferred.
func recovered(c *conn, err *error) {
	if p := recover(); p != nil {
		c.log().Error("panic serving an agent connection", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		*err = fmt.Errorf("agentlink: panic: %v", p)
	}
}
