package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// testMetricsMissing: a sample's missing (the metrics its host has no
// sensor for, issue 29) is stored with it and read back as sent, through
// both of a store's record paths (a batch of samples alone, and one with
// an event); a sample without it reads back without it; the engine's
// history of a rule on tempCpu leaves out the samples without a sensor.
func testMetricsMissing(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	d := e.device(org.ID, "IG-100")
	noSensor := func(at time.Time) protocol.Record {
		r := metricRecord(at, 10)
		r.Metric.TempCPU, r.Metric.Missing = 0, []string{"tempCpu"}
		return r
	}
	e.records(d, noSensor(t0), metricRecord(t0.Add(time.Minute), 11))
	e.records(d, eventRecord("usb.attached", resource.SeverityInfo, t0.Add(2*time.Minute)), noSensor(t0.Add(3*time.Minute)))
	got := e.metricsOf(d, t0, t0.Add(time.Hour))
	var missing [][]string
	for _, m := range got {
		missing = append(missing, m.Missing)
	}
	if want := [][]string{{"tempCpu"}, nil, {"tempCpu"}}; len(got) != 3 || !slices.EqualFunc(missing, want, slices.Equal) {
		t.Fatalf("missing read back: %q, want %q", missing, want)
	}
	if got[0].TempCPU != 0 || got[1].TempCPU != 3 {
		t.Errorf("tempCpu read back: %v, %v", got[0].TempCPU, got[1].TempCPU)
	}
	temp := e.rule(org.ID, alert.RuleHighTemp)
	hist, err := e.Engine.History(e.ctx, org.ID, d.ID, temp.Cond, t0, t0.Add(time.Hour), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 1 || !hist[0].At.Equal(t0.Add(time.Minute)) || hist[0].Value != 3 {
		t.Errorf("tempCpu history: %+v, want the one sample with a sensor", hist)
	}
	cpu := e.rule(org.ID, alert.RuleHighCPU)
	if hist, err := e.Engine.History(e.ctx, org.ID, d.ID, cpu.Cond, t0, t0.Add(time.Hour), 10); err != nil || len(hist) != 3 {
		t.Errorf("cpuPct history: %d samples (%v), want all 3", len(hist), err)
	}
}
