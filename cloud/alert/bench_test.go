package alert_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/test/rig/dialects"
)

// benchPoints is how many points the benchmark's device has (one sampling
// round of each is a PointsStored batch).
const benchPoints = 50

// BenchmarkRules1000 measures the cost per sample of the engine's
// evaluation path (MetricsStored, PointsStored) in an organization with
// 1,000 rules (cloud.MaxRulesPerOrg): the seven defaults and 993 more,
// mixed as people would write them. Four in ten are metric thresholds on
// every device, three in ten point thresholds on every device (spread
// over the device's 50 points), one in ten scoped to another device, one
// in ten to a tag the device lacks, one in ten offline, event and status
// rules. Half the thresholds are held over their value with a `for` of
// 24h, the other half never reached: no sample decides anything, so no
// store call is made (the rules and the device's state are read once,
// before the timer). It reports ns per sample: a metrics sample (one
// record of the five metrics) and a point sample.
func BenchmarkRules1000(b *testing.B) {
	ctx := context.Background()
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	s := dialects.SQLite(b, func() time.Time { return now })
	org := storetest.Org(b, s.Store, "acme")
	d, _ := storetest.Device(b, s.Store, cloud.NewDevice{OrgID: org.ID, Name: "gw", SerialNumber: "SN1", Model: "IG-500"})
	other, _ := storetest.Device(b, s.Store, cloud.NewDevice{OrgID: org.ID, Name: "gw2", SerialNumber: "SN2", Model: "IG-500"})
	cfg := serialcfg.Config{Kind: "rs485", RS485: &serialcfg.RS485{Kind: "rs485", BaudRate: 9600, DataBits: 8, Parity: "even", StopBits: 1,
		Mode: "modbus_rtu_master", SlaveID: 7}}
	for i := range benchPoints {
		cfg.RS485.Points = append(cfg.RS485.Points, serialcfg.RS485Point{Name: fmt.Sprintf("p%d", i), Function: "holding", Register: i, Type: "u16"})
	}
	for _, id := range []string{d.ID, other.ID} {
		if _, err := s.Store.Serial().PutChannel(ctx, org.ID, id, "rs485-1", cfg); err != nil {
			b.Fatal(err)
		}
	}
	existing, err := s.Engine.Rules(ctx, org.ID)
	if err != nil {
		b.Fatal(err)
	}
	for i := range cloud.MaxRulesPerOrg - len(existing) {
		if _, err := s.Store.Rules().CreateRule(ctx, org.ID, benchRule(i, other.ID)); err != nil {
			b.Fatalf("rule %d: %v", i, err)
		}
	}
	if rs, err := s.Engine.Rules(ctx, org.ID); err != nil || len(rs) != cloud.MaxRulesPerOrg {
		b.Fatalf("%d rules, %v", len(rs), err)
	}
	dev := cloud.DeviceRef{ID: d.ID, OrgID: org.ID, Model: "IG-500"}
	e := alert.New(alert.Config{Store: s.Engine, Now: func() time.Time { return now }})

	b.Run("metrics", func(b *testing.B) {
		const batch = 64
		samples := make([]resource.MetricSample, batch)
		at := now.Add(-time.Hour)
		fill := func() {
			for i := range samples {
				at = at.Add(time.Millisecond)
				samples[i] = resource.MetricSample{CapturedAt: resource.T(at), CPUPct: 50, MemPct: 50, DiskUsedPct: 50, TempCPU: 50, LoadAvg1: 0.5}
			}
		}
		fill()
		e.MetricsStored(ctx, dev, samples) // reads the rules and the device's state
		b.ResetTimer()
		for range b.N {
			b.StopTimer()
			fill()
			b.StartTimer()
			e.MetricsStored(ctx, dev, samples)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/sample")
		checkNoAlerts(b, s, org.ID)
	})
	b.Run("points", func(b *testing.B) {
		samples := make([]protocol.PointSample, benchPoints)
		at := now.Add(-time.Hour)
		fill := func() {
			at = at.Add(time.Millisecond)
			for i := range samples {
				samples[i] = protocol.PointSample{Point: fmt.Sprintf("rs485-1.p%d", i), At: resource.T(at), Value: 50}
			}
		}
		fill()
		e.PointsStored(ctx, dev, samples)
		b.ResetTimer()
		for range b.N {
			b.StopTimer()
			fill()
			b.StartTimer()
			e.PointsStored(ctx, dev, samples)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchPoints), "ns/sample")
		checkNoAlerts(b, s, org.ID)
	})
}

// benchRule is the benchmark's i-th rule (see BenchmarkRules1000); other
// is a device other than the one measured.
func benchRule(i int, other string) resource.AlertRule {
	name := fmt.Sprintf("rule %d", i)
	held := i%2 == 0 // over its value, for 24h; else never reached
	thr := func(source string) resource.RuleCondition {
		if held {
			return resource.RuleCondition{Kind: resource.ConditionThreshold, Source: source, Op: ">", Value: num(10), Clear: num(5), For: "24h"}
		}
		return resource.RuleCondition{Kind: resource.ConditionThreshold, Source: source, Op: ">=", Value: num(1e6), For: "5m"}
	}
	metric := "metric." + cloud.RuleMetrics[i%len(cloud.RuleMetrics)]
	point := fmt.Sprintf("point.rs485-1.p%d", i%benchPoints)
	r := resource.AlertRule{Name: name, Enabled: true, Severity: resource.SeverityWarning}
	switch i % 10 {
	case 0, 1, 2, 3:
		r.Condition = thr(metric)
	case 4, 5, 6:
		r.Condition = thr(point)
	case 7:
		r.Condition, r.Scope = thr(point), resource.RuleScope{DeviceIDs: []string{other}}
	case 8:
		r.Condition, r.Scope = thr(metric), resource.RuleScope{Tags: []string{"site-b"}}
	default:
		switch i % 3 {
		case 0:
			r.Condition = resource.RuleCondition{Kind: resource.ConditionOffline, After: "5m"}
		case 1:
			r.Condition = resource.RuleCondition{Kind: resource.ConditionEvent, Type: fmt.Sprintf("custom.e%d", i)}
		default:
			r.Condition = resource.RuleCondition{Kind: resource.ConditionStatus, Status: resource.StatusUpdating, For: "1h"}
		}
	}
	return r
}

// checkNoAlerts fails b when the benchmark opened an alert: it measures
// the path that decides nothing.
func checkNoAlerts(b *testing.B, s storetest.Stores, orgID string) {
	b.Helper()
	l, err := s.Store.Alerts().ListAlerts(context.Background(), orgID, cloud.AlertFilter{Page: cloud.Page{Limit: 10}})
	if err != nil || len(l.Data) != 0 {
		b.Fatalf("alerts opened: %+v %v", l.Data, err)
	}
}
