package link

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// The clamps themselves are tested, and fuzzed against the relay's checks,
// in shared/protocol and cloud/agentlink; these tests hold the agent's
// entry point to them.

func TestSanitizeMetric(t *testing.T) {
	m := &resource.MetricSample{CapturedAt: resource.T(time.Now()), CPUPct: math.NaN(), MemPct: 100.4, DiskUsedPct: -1, TempCPU: math.Inf(1), LoadAvg1: 2.5}
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
	now := resource.T(time.Now())
	ev := func(typ string, sev resource.Severity, msg, data string) protocol.Event {
		return protocol.Event{ID: ids.New(), Type: typ, Severity: sev, Message: msg, Data: json.RawMessage(data), CreatedAt: now}
	}
	tests := []struct {
		name     string
		ev       protocol.Event
		wantErr  bool
		wantData string
		wantMsg  int
	}{
		{"fine", ev("usb.attached", resource.SeverityInfo, "m", `{"a":1}`), false, `{"a":1}`, 1},
		{"long message", ev("serial.error", resource.SeverityError, strings.Repeat("é", 2000), ""), false, "", 2048},
		{"big data", ev("serial.error", resource.SeverityError, "", `{"x":"`+strings.Repeat("y", 9000)+`"}`), false, `{"truncated":true}`, 0},
		{"array data", ev("serial.error", resource.SeverityError, "", `[1,2]`), false, `{"truncated":true}`, 0},
		{"bad type", ev("Serial Error", resource.SeverityError, "", ""), true, "", 0},
		{"the relay's own type", ev("device.online", resource.SeverityInfo, "", ""), true, "", 0},
		{"no severity", ev("usb.attached", "", "", ""), true, "", 0},
		{"no id", protocol.Event{Type: "usb.attached", Severity: resource.SeverityInfo, CreatedAt: now}, true, "", 0},
		{"clock not set", protocol.Event{ID: ids.New(), Type: "agent.started", Severity: resource.SeverityInfo, CreatedAt: resource.T(time.Unix(100, 0))}, true, "", 0},
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
