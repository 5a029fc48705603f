package link

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

func TestSanitizeMetric(t *testing.T) {
	now := resource.T(time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC))
	m := &resource.MetricSample{CapturedAt: now, CPUPct: math.NaN(), MemPct: 100.4, DiskUsedPct: -1, TempCPU: math.Inf(1), LoadAvg1: 2.5}
	if err := Sanitize(&protocol.Record{Metric: m}); err != nil {
		t.Fatal(err)
	}
	if m.CPUPct != 0 || m.MemPct != 100 || m.DiskUsedPct != 0 || m.TempCPU != 300 || m.LoadAvg1 != 2.5 {
		t.Fatalf("sanitized %+v", m)
	}
	old := &resource.MetricSample{CapturedAt: resource.T(time.Unix(0, 0))}
	if err := Sanitize(&protocol.Record{Metric: old}); !errors.Is(err, ErrClockNotSet) {
		t.Fatalf("1970 sample: %v", err)
	}
}

func TestSanitizeEvent(t *testing.T) {
	now := resource.T(time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC))
	tests := []struct {
		name     string
		ev       protocol.Event
		wantErr  bool
		wantData string
		wantMsg  int
	}{
		{"fine", protocol.Event{Type: "usb.attached", Message: "m", Data: json.RawMessage(`{"a":1}`), CreatedAt: now}, false, `{"a":1}`, 1},
		{"long message", protocol.Event{Type: "serial.error", Message: strings.Repeat("é", 2000), CreatedAt: now}, false, "", 2048},
		{"big data", protocol.Event{Type: "serial.error", Data: json.RawMessage(`{"x":"` + strings.Repeat("y", 9000) + `"}`), CreatedAt: now}, false, `{"truncated":true}`, 0},
		{"array data", protocol.Event{Type: "serial.error", Data: json.RawMessage(`[1,2]`), CreatedAt: now}, false, `{"truncated":true}`, 0},
		{"bad type", protocol.Event{Type: "Serial Error", CreatedAt: now}, true, "", 0},
		{"clock not set", protocol.Event{Type: "agent.started", CreatedAt: resource.T(time.Unix(100, 0))}, true, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := tc.ev
			err := Sanitize(&protocol.Record{Event: &ev})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			if err != nil {
				return
			}
			if string(ev.Data) != tc.wantData {
				t.Errorf("data = %.40s", ev.Data)
			}
			if len(ev.Message) > tc.wantMsg || !utf8Valid(ev.Message) || (tc.wantMsg == 2048 && len(ev.Message) < 2046) {
				t.Errorf("message of %d bytes", len(ev.Message))
			}
		})
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "?") == s }

func TestSanitizeHeartbeat(t *testing.T) {
	hb := protocol.Heartbeat{IPAddress: strings.Repeat("1", 300)}
	for i := 0; i < 70; i++ {
		hb.Channels = append(hb.Channels, protocol.ChannelState{ID: "c", Live: strings.Repeat("x", 5000), Error: strings.Repeat("e", 600)})
	}
	sanitizeHeartbeat(&hb)
	if len(hb.IPAddress) != 200 || len(hb.Channels) != protocol.MaxChannels || len(hb.Channels[0].Live) != 1024 || len(hb.Channels[0].Error) != 512 {
		t.Fatalf("ip %d, channels %d, live %d, error %d", len(hb.IPAddress), len(hb.Channels), len(hb.Channels[0].Live), len(hb.Channels[0].Error))
	}
}
