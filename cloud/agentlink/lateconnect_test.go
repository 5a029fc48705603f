package agentlink_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// lateConnect holds the first Store.Connect of a device until release is
// closed: before the store write (the attempt's write lands after a newer
// connection's) or after it (the write landed first, the relay registers
// the connection late).
type lateConnect struct {
	agentlink.Store
	afterWrite bool
	reached    chan struct{} // closed when the first Connect is held
	release    chan struct{}
	once       sync.Once
}

func (l *lateConnect) Connect(ctx context.Context, dev agentlink.Device, session string, at, deadline time.Time) (agentlink.StatusChange, error) {
	first := false
	l.once.Do(func() { first = true })
	if !first {
		return l.Store.Connect(ctx, dev, session, at, deadline)
	}
	if !l.afterWrite {
		close(l.reached)
		<-l.release
		return l.Store.Connect(context.Background(), dev, session, at, deadline)
	}
	ch, err := l.Store.Connect(ctx, dev, session, at, deadline)
	close(l.reached)
	<-l.release
	return ch, err
}

// An agent's connection attempt whose store write (or registration) comes
// late, after the agent gave up on it and a newer connection was welcomed,
// is closed as replaced; the newer connection keeps the device: it stays
// open, ONLINE, and its heartbeats are stored. (Before, the late attempt
// replaced the newer connection and then, its own handshake failing,
// stored the device OFFLINE with no connection: issue 31's guest run.)
func TestLateConnectAttemptKeepsNewerConnection(t *testing.T) {
	stores.Run(t, func(t *testing.T, open storetest.Opener) {
		for _, after := range []bool{false, true} {
			name := map[bool]string{false: "write late", true: "register late"}[after]
			t.Run(name, func(t *testing.T) {
				l := &lateConnect{afterWrite: after, reached: make(chan struct{}), release: make(chan struct{})}
				e := newEnv(t, open, func(c *agentlink.Config) {
					l.Store = c.Store
					c.Store = l
					c.WriteTimeout = 30 * time.Second
				})
				id, tok := e.addDevice("IG-500")
				stale := e.mustDial(tok)
				h := hello()
				stale.send(protocol.Message{Type: protocol.TypeHello, Hello: &h})
				select {
				case <-l.reached:
				case <-time.After(5 * time.Second):
					t.Fatal("the first attempt's Connect never reached the store")
				}
				time.Sleep(5 * time.Millisecond) // the newer attempt opens in a later millisecond
				newer, _ := e.connect(tok, hello())
				newer.heartbeat(protocol.Heartbeat{})
				eventually(t, 5*time.Second, func() string {
					if n := e.obs.heartbeatCount(id); n != 1 {
						return "the newer connection's heartbeat is not stored"
					}
					return ""
				})
				close(l.release)
				if ce := stale.expectClose(5 * time.Second); ce.Code != protocol.CloseReplaced {
					t.Fatalf("the late attempt closed with %d %q, want %d", ce.Code, ce.Reason, protocol.CloseReplaced)
				}
				time.Sleep(200 * time.Millisecond) // the late attempt's session ends
				newer.heartbeat(protocol.Heartbeat{})
				eventually(t, 5*time.Second, func() string {
					if n := e.obs.heartbeatCount(id); n != 2 {
						return "the newer connection's heartbeat after the late attempt is not stored"
					}
					return ""
				})
				if n := e.srv.Connections(); n != 1 {
					t.Fatalf("%d connections open, want 1 (the newer)", n)
				}
				if st := e.device(id).Status; st != string(resource.StatusOnline) {
					t.Fatalf("device %s, want ONLINE", st)
				}
			})
		}
	})
}
