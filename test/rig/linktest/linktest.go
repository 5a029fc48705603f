// Package linktest is the agent link for the relay's tests: it serves an
// agent endpoint (cloud/agentlink) behind a real HTTP server on loopback,
// and dials an endpoint as fleet-agent does (bearer token, the protocol's
// subprotocol and read limit).
package linktest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/shared/protocol"
)

// Serve serves agentlink.New(cfg) at protocol.Path on a loopback server
// and runs it until the test ends: then the endpoint shuts down (at most
// 5 s, its observers called for the last time) before the server closes.
// It returns the endpoint and the server's base URL (http://host:port).
func Serve(tb testing.TB, cfg agentlink.Config) (*agentlink.Server, string) {
	tb.Helper()
	srv := agentlink.New(cfg)
	mux := http.NewServeMux()
	mux.Handle(protocol.Path, srv.Handler())
	hs := httptest.NewServer(mux)
	ctx, cancel := context.WithCancel(context.Background())
	go srv.Run(ctx)
	tb.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		srv.Shutdown(sctx)
		cancel()
		hs.Close()
	})
	return srv, hs.URL
}

// Dial opens a websocket to the agent endpoint of the relay at base
// (http://host:port) as the device of token (no Authorization header when
// token is empty), within 10 s; it is closed when the test ends. The HTTP
// response is returned with a refused dial's error.
func Dial(tb testing.TB, base, token string) (*websocket.Conn, *http.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	url := "ws" + strings.TrimPrefix(base, "http") + protocol.Path
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h, Subprotocols: []string{protocol.Subprotocol}})
	if err != nil {
		return nil, resp, err
	}
	ws.SetReadLimit(protocol.MaxMessageBytes)
	tb.Cleanup(func() { ws.CloseNow() })
	return ws, resp, nil
}

// MustDial is Dial failing the test when the dial fails.
func MustDial(tb testing.TB, base, token string) *websocket.Conn {
	tb.Helper()
	ws, _, err := Dial(tb, base, token)
	if err != nil {
		tb.Fatalf("dial %s: %v", base, err)
	}
	return ws
}
