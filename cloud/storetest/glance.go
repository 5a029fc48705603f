package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// The fleet page at a glance (cloud.FleetGlance) and its worst-first
// order (cloud.SortWorst), each scoped to its organization.

// severeAlert opens an alert of rule on d at the clock's time with
// severity sev instead of the rule's, then moves it to state.
func (e *env) severeAlert(d device, rule string, sev resource.Severity, state resource.AlertState) {
	e.t.Helper()
	r := e.rule(d.OrgID, rule)
	r.Severity = sev
	e.openAlert(d, r, state)
}

// sample is a metric sample at at with the given CPU, memory and disk.
func sample(at time.Time, cpu, mem, disk float64) resource.MetricSample {
	return resource.MetricSample{CapturedAt: resource.T(at), CPUPct: cpu, MemPct: mem, DiskUsedPct: disk, TempCPU: 40, LoadAvg1: 0.5}
}

// glanceText is g as the fleet page's row reads: status, last seen,
// CPU/memory/disk ("—" for none) and the open alerts with the worst.
func glanceText(g cloud.DeviceGlance) string {
	pct := func(v *float64) string {
		if v == nil {
			return "—"
		}
		return fmt.Sprintf("%g%%", *v)
	}
	seen := "never"
	if g.LastSeen != nil {
		seen = g.LastSeen.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%s seen %s cpu %s mem %s disk %s alerts %d %s", g.Status, seen, pct(g.CPU), pct(g.Memory), pct(g.Disk), g.OpenAlerts, g.Worst)
}

func testFleetGlance(t *testing.T, open Opener) {
	e := newEnv(t, open)
	o, other := e.org("acme"), e.org("other")
	busy, quiet, gone := e.device(o.ID, "IG-500"), e.device(o.ID, "IG-500"), e.device(o.ID, "IG-500")
	foreign := e.device(other.ID, "IG-500")

	e.online(busy, time.Minute)
	Metrics(t, e.Agent, e.auth(busy), sample(t0.Add(-2*time.Minute), 10, 20, 30), sample(t0.Add(-time.Minute), 42.5, 61, 77.25))
	e.severeAlert(busy, "high_cpu", resource.SeverityWarning, resource.AlertActive)
	e.severeAlert(busy, "disk_full", resource.SeverityCritical, resource.AlertAcknowledged)
	e.severeAlert(busy, "high_mem", resource.SeverityCritical, resource.AlertResolved)
	Offline(t, e.Agent, e.auth(gone), t0.Add(-time.Hour), time.Minute)
	e.severeAlert(gone, "device_offline", resource.SeverityError, resource.AlertResolved)
	e.online(foreign, time.Minute)
	Metrics(t, e.Agent, e.auth(foreign), sample(t0, 99, 99, 99))
	e.severeAlert(foreign, "high_cpu", resource.SeverityInfo, resource.AlertActive)

	got, err := e.Panel.Glance(e.ctx, o.ID, []string{busy.ID, quiet.ID, gone.ID, foreign.ID, "nosuchdevice"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		busy.ID:  "ONLINE seen 2026-05-01T10:00:00Z cpu 42.5% mem 61% disk 77.25% alerts 2 CRITICAL",
		quiet.ID: "PROVISIONING seen never cpu — mem — disk — alerts 0 ",
		gone.ID:  "OFFLINE seen 2026-05-01T09:00:00Z cpu — mem — disk — alerts 0 ",
	}
	if len(got) != len(want) {
		t.Errorf("Glance answered %d devices, want %d (another organization's and unknown ids left out): %v", len(got), len(want), got)
	}
	for id, w := range want {
		if g, ok := got[id]; !ok || g.ID != id || glanceText(g) != w {
			t.Errorf("%s at a glance: %q, want %q", id, glanceText(g), w)
		}
	}
	if _, ok := got[foreign.ID]; ok {
		t.Errorf("another organization's device at a glance: %+v", got[foreign.ID])
	}
	if g, err := e.Panel.Glance(e.ctx, other.ID, []string{busy.ID, foreign.ID}); err != nil || len(g) != 1 || glanceText(g[foreign.ID]) != "ONLINE seen 2026-05-01T10:00:00Z cpu 99% mem 99% disk 99% alerts 1 INFO" {
		t.Errorf("the other organization's glance: %v, %v", g, err)
	}

	// More ids than one statement takes.
	many := []string{busy.ID}
	for i := range 250 {
		many = append(many, fmt.Sprintf("unknown-%d", i))
	}
	many = append(many, gone.ID)
	if g, err := e.Panel.Glance(e.ctx, o.ID, many); err != nil || len(g) != 2 || g[gone.ID].Status != resource.StatusOffline || g[busy.ID].OpenAlerts != 2 {
		t.Errorf("Glance of 252 ids: %v, %v", g, err)
	}
	if g, err := e.Panel.Glance(e.ctx, o.ID, nil); err != nil || len(g) != 0 {
		t.Errorf("Glance of none: %v, %v", g, err)
	}

	sum, err := e.Panel.FleetSummary(e.ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Devices) != len(resource.DeviceStatuses) || len(sum.OpenAlerts) != len(resource.Severities) {
		t.Errorf("summary lacks a status or severity: %+v", sum)
	}
	var devs, alerts []string
	for _, s := range resource.DeviceStatuses {
		devs = append(devs, fmt.Sprintf("%s %d", s, sum.Devices[s]))
	}
	for _, s := range resource.Severities {
		alerts = append(alerts, fmt.Sprintf("%s %d", s, sum.OpenAlerts[s]))
	}
	if got, want := strings.Join(devs, ", "), "ONLINE 1, OFFLINE 1, CONNECTING 0, ERROR 0, PROVISIONING 1, REBOOTING 0, UPDATING 0"; got != want {
		t.Errorf("devices by status: %s, want %s", got, want)
	}
	if got, want := strings.Join(alerts, ", "), "INFO 0, WARNING 1, ERROR 0, CRITICAL 1"; got != want {
		t.Errorf("open alerts by severity: %s, want %s", got, want)
	}
	empty, err := e.Panel.FleetSummary(e.ctx, e.org("empty").ID)
	if err != nil || len(empty.Devices) != len(resource.DeviceStatuses) || len(empty.OpenAlerts) != len(resource.Severities) || empty.Devices[resource.StatusOnline] != 0 {
		t.Errorf("an empty organization's summary: %+v, %v", empty, err)
	}
}

func testFleetSortWorst(t *testing.T, open Opener) {
	e := newEnv(t, open)
	o, other := e.org("acme"), e.org("other")
	var name = map[string]string{}
	add := func(n string) device {
		e.clock.Add(time.Millisecond)
		d := e.device(o.ID, "IG-500")
		name[d.ID] = n
		return d
	}
	// Made in this order: the default sort lists them so.
	calm, old, _, warned, acked, critical, twoWarnings, erroring, offline := add("calm"), add("old"), add("never"),
		add("warned"), add("acked"), add("critical"), add("two-warnings"), add("erroring"), add("offline")
	for _, d := range []device{calm, warned, acked, critical, twoWarnings} {
		e.online(d, time.Minute)
	}
	Offline(t, e.Agent, e.auth(old), t0.Add(-2*time.Hour), time.Minute)
	Offline(t, e.Agent, e.auth(offline), t0.Add(-time.Hour), time.Minute)
	ad := e.auth(erroring)
	s := Connect(t, e.Agent, ad, t0, protocol.Hello{AgentVersion: "1.0.0"})
	Heartbeat(t, e.Agent, agentlink.HeartbeatIn{Device: ad, Session: s, At: t0, Deadline: t0.Add(3 * time.Minute), Status: resource.StatusError, PrevStatus: resource.StatusOnline})
	e.severeAlert(warned, "high_cpu", resource.SeverityWarning, resource.AlertActive)
	e.severeAlert(acked, "high_cpu", resource.SeverityError, resource.AlertAcknowledged)
	e.severeAlert(critical, "high_cpu", resource.SeverityCritical, resource.AlertActive)
	e.severeAlert(calm, "high_cpu", resource.SeverityCritical, resource.AlertResolved)
	e.severeAlert(twoWarnings, "high_cpu", resource.SeverityWarning, resource.AlertActive)
	e.severeAlert(twoWarnings, "high_mem", resource.SeverityWarning, resource.AlertAcknowledged)
	foreign := e.device(other.ID, "IG-500")
	e.severeAlert(foreign, "high_cpu", resource.SeverityCritical, resource.AlertActive)

	page := func(q cloud.DeviceSearch) (int, string) {
		t.Helper()
		p, err := e.Panel.SearchDevices(e.ctx, o.ID, q)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range p.Devices {
			n, ok := name[d.ID]
			if !ok {
				n = "FOREIGN " + d.ID
			}
			got = append(got, n)
		}
		return p.Total, strings.Join(got, ",")
	}
	worst := "critical,acked,two-warnings,warned,old,offline,erroring,never,calm"
	if total, got := page(cloud.DeviceSearch{Sort: cloud.SortWorst, Limit: 50}); total != 9 || got != worst {
		t.Errorf("worst first: %d %s, want 9 %s", total, got, worst)
	}
	// Page by page, the same order: every device once.
	var paged []string
	for off := 0; off < 9; off += 2 {
		_, got := page(cloud.DeviceSearch{Sort: cloud.SortWorst, Limit: 2, Offset: off})
		paged = append(paged, got)
	}
	if got := strings.Join(paged, ","); got != worst {
		t.Errorf("worst first, 2 a page: %s, want %s", got, worst)
	}
	if total, got := page(cloud.DeviceSearch{Limit: 50}); total != 9 || got != "calm,old,never,warned,acked,critical,two-warnings,erroring,offline" {
		t.Errorf("default order: %d %s", total, got)
	}
	// Filters apply as in the default order.
	if total, got := page(cloud.DeviceSearch{Sort: cloud.SortWorst, Status: resource.StatusOnline, Limit: 50}); total != 5 || got != "critical,acked,two-warnings,warned,calm" {
		t.Errorf("worst first, ONLINE only: %d %s", total, got)
	}
	if err := e.Store.SetDeviceTags(e.ctx, warned.ID, []string{"pump"}); err != nil {
		t.Fatal(err)
	}
	if err := e.Store.SetDeviceTags(e.ctx, offline.ID, []string{"pump"}); err != nil {
		t.Fatal(err)
	}
	if total, got := page(cloud.DeviceSearch{Sort: cloud.SortWorst, Tags: []string{"pump"}, Query: "dev", Limit: 50}); total != 2 || got != "warned,offline" {
		t.Errorf("worst first, tag pump: %d %s", total, got)
	}
}
