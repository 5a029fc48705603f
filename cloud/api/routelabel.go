package api

import (
	"maps"
	"strings"
	"sync"
	"sync/atomic"
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
// so that a request costs a map lookup instead of the joins of
// chi.Context.RoutePattern. The map is copied on write (a handful of
// entries, written once each), so readers share no lock.
type routeLabels struct {
	m  atomic.Pointer[map[[2]string]string]
	mu sync.Mutex // writers
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
	if m := l.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	v := routeLabel(rctx.RoutePattern(), rctx.RoutePatterns)
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.m.Load()
	if old != nil && len(*old) >= maxRouteLabels {
		return v
	}
	m := make(map[[2]string]string, 8)
	if old != nil {
		maps.Copy(m, *old)
	}
	m[k] = v
	l.m.Store(&m)
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
