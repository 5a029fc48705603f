package cloud_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

func rule(t *testing.T, js string) resource.AlertRule {
	t.Helper()
	var r resource.AlertRule
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestCompileRuleNamesTheField(t *testing.T) {
	base := `"name":"Boiler hot","severity":"WARNING","enabled":true`
	for _, c := range []struct{ body, field string }{
		{`{` + base + `,"condition":{"kind":"threshold","source":"metric.cpuPct","op":"=>","value":1}}`, "condition.op"},
		{`{` + base + `,"condition":{"kind":"threshold","source":"metric.cpuPct","op":">","value":90,"clear":95}}`, "condition.clear"},
		{`{` + base + `,"condition":{"kind":"threshold","source":"metric.cpuPct","op":"<","value":10,"clear":5}}`, "condition.clear"},
		{`{` + base + `,"condition":{"kind":"threshold","source":"metric.nope","op":">","value":1}}`, "condition.source"},
		{`{` + base + `,"condition":{"kind":"threshold","source":"point.nodot","op":">","value":1}}`, "condition.source"},
		{`{` + base + `,"condition":{"kind":"threshold","source":"disk","op":">","value":1}}`, "condition.source"},
		{`{` + base + `,"condition":{"kind":"threshold","source":"metric.cpuPct","op":">"}}`, "condition.value"},
		{`{` + base + `,"condition":{"kind":"threshold","source":"metric.cpuPct","op":">","value":1,"for":"25h"}}`, "condition.for"},
		{`{` + base + `,"condition":{"kind":"offline","after":"10s"}}`, "condition.after"},
		{`{` + base + `,"condition":{"kind":"status","status":"ONLINE"}}`, "condition.status"},
		{`{` + base + `,"condition":{"kind":"event"}}`, "condition.type"},
		{`{` + base + `,"condition":{"kind":"weird"}}`, "condition.kind"},
		{`{` + base + `,"condition":{"kind":"offline","after":"1m"},"repeatEvery":"1m"}`, "repeatEvery"},
		{`{` + base + `,"condition":{"kind":"offline","after":"1m"},"scope":{"tags":["Bad Tag"]}}`, "scope.tags[0]"},
		{`{` + base + `,"condition":{"kind":"offline","after":"1m"},"scope":{"tags":["a"],"deviceIds":["d"]}}`, "scope"},
		{`{"name":"","severity":"WARNING","condition":{"kind":"offline","after":"1m"}}`, "name"},
		{`{"name":"x","severity":"LOUD","condition":{"kind":"offline","after":"1m"}}`, "severity"},
	} {
		_, err := cloud.CompileRule("org", rule(t, c.body))
		if cloud.ErrorCode(err) != cloud.EINVALID || !strings.HasPrefix(cloud.ErrorMessage(err), c.field) {
			t.Errorf("%s: got %v, want a validation_error naming %s", c.body, err, c.field)
		}
	}
}

func TestCompileRuleRoundTrips(t *testing.T) {
	r, err := cloud.CompileRule("org", rule(t, `{"name":"Boiler hot","severity":"ERROR","enabled":true,"scope":{"tags":["line3","boiler"]},
		"condition":{"kind":"threshold","source":"point.rs485-1.temp","op":">","value":80,"clear":75,"for":"90s"},"notify":["ch1"],"repeatEvery":"30m"}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.Cond.PointID != "rs485-1.temp" || r.Cond.For.Seconds() != 90 || r.Repeat.Minutes() != 30 || r.Scope.Tags[0] != "boiler" {
		t.Fatalf("compiled %+v", r)
	}
	if !r.Cond.Breaches(80.5) || r.Cond.Breaches(80) || !r.Cond.Clears(74.9) || r.Cond.Clears(75) {
		t.Fatal("threshold sides")
	}
	back := r.Resource()
	if back.Condition.For != "1m30s" || back.RepeatEvery != "30m" || *back.Condition.Clear != 75 {
		t.Fatalf("resource %+v", back.Condition)
	}
	if r.EventType() != "alert.boiler_hot" {
		t.Fatal(r.EventType())
	}
	for _, d := range cloud.DefaultAlertRules() {
		c, err := cloud.CompileRule("org", d)
		if err != nil {
			t.Fatalf("default %s: %v", d.Name, err)
		}
		if c.EventType() != "alert."+d.Name {
			t.Fatalf("default %s event type %s", d.Name, c.EventType())
		}
	}
}

func TestInScope(t *testing.T) {
	if !cloud.InScope(resource.RuleScope{}, "d1", nil) || cloud.InScope(resource.RuleScope{DeviceIDs: []string{"d2"}}, "d1", nil) ||
		!cloud.InScope(resource.RuleScope{Tags: []string{"a", "b"}}, "d1", []string{"b", "a", "c"}) ||
		cloud.InScope(resource.RuleScope{Tags: []string{"a", "b"}}, "d1", []string{"a"}) {
		t.Fatal("scope")
	}
}
