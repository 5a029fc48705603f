package api

import (
	"testing"

	"github.com/go-chi/chi/v5"
)

// BenchmarkRouteLabel is the cost of a request's route label from the
// cache, against chi's RoutePattern that it saves.
func BenchmarkRouteLabel(b *testing.B) {
	rctx := chi.NewRouteContext()
	rctx.RoutePatterns = []string{"/api/v1/public/*", "/devices/{id}/serial/channels/{channelId}"}
	b.Run("cached", func(b *testing.B) {
		var l routeLabels
		b.ReportAllocs()
		for b.Loop() {
			if l.of(rctx) != "/api/v1/public/devices/{id}/serial/channels/{channelId}" {
				b.Fatal(l.of(rctx))
			}
		}
	})
	b.Run("chi", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = rctx.RoutePattern()
		}
	})
}
