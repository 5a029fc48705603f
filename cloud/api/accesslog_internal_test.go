package api

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"testing"
	"time"
)

// The access log's lines written straight (Config.AccessLogTo) are the
// lines slog's JSON handler writes for the same record: the same object,
// key for key and value for value, and byte for byte for the requests a
// relay sees every day.
func TestAccessLineIsSlogsLine(t *testing.T) {
	at := time.Date(2026, 11, 27, 11, 30, 54, 341234567, time.UTC)
	for _, c := range []struct {
		name                          string
		id, method, path, key, remote string
		status                        int
		took                          time.Duration
		bytes                         int64
		exact                         bool
	}{
		{"list", "01JDZ3K8Q5", "GET", "/api/v1/public/devices", "k_7f3a", "203.0.113.9", 200, 1234567 * time.Nanosecond, 6824, true},
		{"no key, under a millisecond", "req-1", "POST", "/api/v1/public/devices/x/commands", "", "2001:db8::1", 401, 42 * time.Microsecond, 0, true},
		{"no time taken", "r", "DELETE", "/api/v1/public/alerts/1", "k", "10.0.0.1", 500, 0, 12, true},
		{"minutes", "r", "GET", "/api/v1/public/devices", "k", "10.0.0.1", 504, 3*time.Minute + 7*time.Microsecond, 1 << 40, true},
		{"text to escape", "r\"\\\n\u2028", "GET", "/api/v1/public/devices/\"<tag>&\x01é", "k\t", "::1", 404, time.Millisecond, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := appendAccessLine(nil, at, c.id, c.method, c.path, c.status, c.took, c.bytes, c.key, c.remote)
			var want bytes.Buffer
			h := slog.NewJSONHandler(&want, nil).WithAttrs([]slog.Attr{slog.String("component", "api")})
			r := slog.NewRecord(at, slog.LevelInfo, "request", 0)
			r.AddAttrs(
				slog.String("request_id", c.id),
				slog.String("method", c.method),
				slog.String("path", c.path),
				slog.Int("status", c.status),
				slog.Float64("duration_ms", float64(c.took.Microseconds())/1000),
				slog.Int64("bytes", c.bytes),
				slog.String("key_id", c.key),
				slog.String("remote", c.remote),
			)
			if err := h.Handle(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			if c.exact && !bytes.Equal(got, want.Bytes()) {
				t.Errorf("line\n%s\nslog's\n%s", got, want.Bytes())
			}
			var g, w map[string]any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("line %q is not JSON: %v", got, err)
			}
			if err := json.Unmarshal(want.Bytes(), &w); err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(g, w) {
				t.Errorf("line\n%v\nslog's\n%v", g, w)
			}
			if n := bytes.Count(got, []byte("\n")); n != 1 || got[len(got)-1] != '\n' {
				t.Errorf("line %q: want one line ending in a newline", got)
			}
		})
	}
}
