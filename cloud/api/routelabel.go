package api

import (
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
)

// RequestObserver hears about every request the server answered, after its
// handler returned: route is the chi route pattern that matched, such as
// "/api/v1/public/devices/{id}" (never the raw path, so the values are
// bounded), or "" when no route matched; status is the status sent; d runs
// from the start of the outermost middleware. It is called on the request's
// goroutine: it must be quick.
type RequestObserver interface {
	ObserveRequest(route, method string, status int, d time.Duration)
}

// routeLabels caches the route label of each list of chi route patterns,
// so that a request costs a read-locked map lookup instead of the joins of
// chi.Context.RoutePattern.
type routeLabels struct {
	mu sync.RWMutex
	m  map[[2]string]string
}

// maxRouteLabels bounds the cache: the patterns are the routes' own, but a
// backstop costs nothing.
const maxRouteLabels = 256

// of returns the route label of a finished request: its full route
// pattern, or "" when no route matched (no pattern, or only a mount's
// "/*").
func (l *routeLabels) of(rctx *chi.Context) string {
	if rctx == nil || len(rctx.RoutePatterns) == 0 {
		return ""
	}
	if len(rctx.RoutePatterns) > 2 {
		return routeLabel(rctx.RoutePattern(), rctx.RoutePatterns)
	}
	var k [2]string
	copy(k[:], rctx.RoutePatterns)
	l.mu.RLock()
	v, ok := l.m[k]
	l.mu.RUnlock()
	if ok {
		return v
	}
	v = routeLabel(rctx.RoutePattern(), rctx.RoutePatterns)
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[[2]string]string)
	}
	if len(l.m) < maxRouteLabels {
		l.m[k] = v
	}
	l.mu.Unlock()
	return v
}

// routeLabel is "" when the last pattern is a mount's wildcard (the
// sub-router matched nothing), else the full pattern.
func routeLabel(full string, patterns []string) string {
	if strings.HasSuffix(patterns[len(patterns)-1], "/*") {
		return ""
	}
	return full
}
