package api

import (
	"context"
	"net"

	"github.com/fleet/fleet/cloud/internal/onewrite"
)

// Listener wraps the listener of the http.Server that serves the API so
// that a response the API has in full (a list page, a resource) leaves in
// one write to the socket: net/http alone writes one over its 4 KiB buffer
// in two. Serve with ConnContext as the server's ConnContext. Without them
// the API answers the same, in more writes.
func Listener(ln net.Listener) net.Listener { return onewrite.Listener{Listener: ln} }

// ConnContext is the http.Server's ConnContext for a server on Listener.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return onewrite.ConnContext(ctx, c)
}
