package agentlink_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// TestSilentAgentClosedAtHandshakeTimeout: an agent that sends no hello is
// closed with a protocol error once the handshake timeout passed, while an
// agent that said hello within the same shared deadline stays connected
// past it and is served.
func TestSilentAgentClosedAtHandshakeTimeout(t *testing.T) {
	stores.Run(t, func(t *testing.T, open storetest.Opener) {
		const timeout = 300 * time.Millisecond
		e := newEnv(t, open, func(c *agentlink.Config) { c.HandshakeTimeout = timeout })
		_, silentTok := e.addDevice("IG-500")
		id, tok := e.addDevice("IG-500")
		start := time.Now()
		silent := e.mustDial(silentTok)
		a, _ := e.connect(tok, hello())
		ce := silent.expectClose(10 * time.Second)
		if ce.Code != protocol.CloseProtocolError || !strings.Contains(ce.Reason, "no hello within") {
			t.Fatalf("silent agent closed with %d %q", ce.Code, ce.Reason)
		}
		if waited := time.Since(start); waited < timeout {
			t.Fatalf("closed after %s, before the handshake timeout", waited)
		}
		time.Sleep(timeout) // past the deadline the two handshakes shared
		a.heartbeat(protocol.Heartbeat{At: resource.T(time.Now()), Status: resource.StatusOnline, IPAddress: "10.9.8.7"})
		eventually(t, 5*time.Second, func() string {
			if ip := e.device(id).IP; ip != "10.9.8.7" {
				return "ip " + ip
			}
			return ""
		})
	})
}
