package api_test

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/api"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// call is one request to the public API at path (under api.Prefix).
func (e *env) call(method, path, key string, body any) resp {
	e.t.Helper()
	return e.req(method, api.Prefix+path, key, body)
}

// wantInvalid asserts 400 validation_error whose message starts with
// field.
func (r resp) wantInvalid(tb testing.TB, field string) {
	tb.Helper()
	r.want(tb, http.StatusBadRequest, cloud.EINVALID)
	if !strings.HasPrefix(r.errMessage(), field) {
		tb.Errorf("message %q does not start with %s", r.errMessage(), field)
	}
}

// decodeRule decodes {"data": rule}.
func decodeRule(t *testing.T, r resp) resource.AlertRule {
	t.Helper()
	var one resource.One[resource.AlertRule]
	r.decode(t, &one)
	return one.Data
}

// cpuRule is a minimal threshold rule body named name.
func cpuRule(name string) map[string]any {
	return map[string]any{"name": name, "severity": "WARNING",
		"condition": map[string]any{"kind": "threshold", "source": "metric.cpuPct", "op": ">", "value": 85}}
}

// rulesOf walks GET /alert-rules page by page (limit per page) and returns
// every rule in order.
func (e *env) rulesOf(t *testing.T, key string, limit int) []resource.AlertRule {
	t.Helper()
	var all []resource.AlertRule
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("GET /alert-rules: more than 100 pages")
		}
		path := "/alert-rules?limit=" + strconv.Itoa(limit)
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		r := e.get(path, key)
		r.want(t, http.StatusOK, "")
		var l resource.List[resource.AlertRule]
		r.decode(t, &l)
		if len(l.Data) > limit {
			t.Fatalf("limit %d answered %d rules", limit, len(l.Data))
		}
		all = append(all, l.Data...)
		if !l.Pagination.HasMore {
			if l.Pagination.NextCursor != nil {
				t.Fatalf("last page has a nextCursor: %s", r.body)
			}
			return all
		}
		cursor = *l.Pagination.NextCursor
	}
}

func TestAlertRulesCRUD(t *testing.T) {
	t.Parallel()
	stores.Run(t, testAlertRulesCRUD)
}

func testAlertRulesCRUD(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	read := e.key(e.orgA.ID, cloud.ScopeAlertsRead)
	write := e.key(e.orgA.ID, cloud.ScopeAlertsRead, cloud.ScopeAlertsWrite)
	devicesOnly := e.key(e.orgA.ID, cloud.ScopeDevicesRead)

	// A new organization has the defaults, as ordinary rules.
	var names []string
	for _, r := range e.rulesOf(t, read, 100) {
		names = append(names, r.Name)
	}
	for _, d := range cloud.DefaultAlertRules() {
		if !slices.Contains(names, d.Name) {
			t.Errorf("default rule %s not listed: %v", d.Name, names)
		}
	}

	// Create: 201 with the defaults of what the body left out.
	r := e.call(http.MethodPost, "/alert-rules", write, cpuRule("Hot CPU"))
	r.want(t, http.StatusCreated, "")
	got := decodeRule(t, r)
	if got.ID == "" || got.Name != "Hot CPU" || !got.Enabled || got.Severity != resource.SeverityWarning ||
		len(got.Scope.DeviceIDs)+len(got.Scope.Tags) != 0 || got.Notify == nil || len(got.Notify) != 0 || got.RepeatEvery != "0s" {
		t.Fatalf("created rule: %s", r.body)
	}
	c := got.Condition
	if c.Kind != "threshold" || c.Source != "metric.cpuPct" || c.Op != ">" || c.Value == nil || *c.Value != 85 ||
		c.Clear == nil || *c.Clear != 85 || c.For != "0s" || got.CreatedAt.IsZero() {
		t.Fatalf("created condition: %s", r.body)
	}
	if !strings.Contains(string(r.body), `"scope":{}`) || !strings.Contains(string(r.body), `"notify":[]`) {
		t.Errorf("empty scope and notify must be {} and []: %s", r.body)
	}
	path := "/alert-rules/" + got.ID

	// Read it back, alone and in the list.
	r = e.get(path, read)
	r.want(t, http.StatusOK, "")
	if again := decodeRule(t, r); again.ID != got.ID || again.Name != got.Name || !again.CreatedAt.Equal(got.CreatedAt.Time) {
		t.Fatalf("GET %s: %s", path, r.body)
	}
	if !slices.ContainsFunc(e.rulesOf(t, read, 100), func(x resource.AlertRule) bool { return x.ID == got.ID }) {
		t.Fatal("the created rule is not listed")
	}

	// Patch: only the members given change; condition is replaced whole.
	r = e.call(http.MethodPatch, path, write, map[string]any{"enabled": false, "repeatEvery": "30m"})
	r.want(t, http.StatusOK, "")
	p := decodeRule(t, r)
	if p.Enabled || p.RepeatEvery != "30m" || p.Name != "Hot CPU" || p.Condition.Source != "metric.cpuPct" || p.Severity != resource.SeverityWarning {
		t.Fatalf("patched: %s", r.body)
	}
	r = e.call(http.MethodPatch, path, write, map[string]any{"severity": "CRITICAL",
		"condition": map[string]any{"kind": "threshold", "source": "metric.memPct", "op": ">=", "value": 95, "clear": 90, "for": "5m"}})
	r.want(t, http.StatusOK, "")
	p = decodeRule(t, r)
	if c := p.Condition; c.Source != "metric.memPct" || c.Op != ">=" || *c.Value != 95 || *c.Clear != 90 || c.For != "5m" ||
		p.Severity != resource.SeverityCritical || p.Enabled || p.RepeatEvery != "30m" {
		t.Fatalf("patched condition: %s", r.body)
	}
	if !strings.Contains(string(r.body), `"condition":{"kind":"threshold","source":"metric.memPct","op":">=","value":95,"clear":90,"for":"5m"}`) {
		t.Errorf("condition not replaced whole: %s", r.body)
	}
	r = e.call(http.MethodPatch, path, write, map[string]any{"condition": map[string]any{"kind": "offline", "after": "10m"}})
	r.want(t, http.StatusOK, "")
	if !strings.Contains(string(r.body), `"condition":{"kind":"offline","after":"10m"}`) {
		t.Errorf("condition not replaced whole: %s", r.body)
	}
	if g := decodeRule(t, e.get(path, read)); g.Condition.Kind != "offline" || g.Condition.After != "10m" || g.Severity != resource.SeverityCritical {
		t.Fatalf("after the patch, GET answers %+v", g)
	}

	// Scopes: a key without alerts:write cannot change rules, one without
	// alerts:read cannot read them.
	for _, c := range []struct {
		method, path, key, scope string
		body                     any
	}{
		{http.MethodGet, "/alert-rules", devicesOnly, cloud.ScopeAlertsRead, nil},
		{http.MethodGet, path, devicesOnly, cloud.ScopeAlertsRead, nil},
		{http.MethodPost, "/alert-rules/preview", devicesOnly, cloud.ScopeAlertsRead, cpuRule("x")},
		{http.MethodPost, "/alert-rules", read, cloud.ScopeAlertsWrite, cpuRule("Other")},
		{http.MethodPatch, path, read, cloud.ScopeAlertsWrite, map[string]any{"enabled": true}},
		{http.MethodDelete, path, read, cloud.ScopeAlertsWrite, nil},
	} {
		r := e.call(c.method, c.path, c.key, c.body)
		r.want(t, http.StatusForbidden, cloud.EFORBIDDEN)
		if !strings.Contains(r.errMessage(), c.scope) || !strings.Contains(r.header.Get("WWW-Authenticate"), `scope="`+c.scope+`"`) {
			t.Errorf("%s %s: 403 does not name %s: %s (%s)", c.method, c.path, c.scope, r.body, r.header.Get("WWW-Authenticate"))
		}
	}
	if g := decodeRule(t, e.get(path, read)); g.Enabled {
		t.Fatal("a refused PATCH changed the rule")
	}

	// Another organization's rule does not exist for this key.
	e.get(path, e.keyB).want(t, http.StatusNotFound, cloud.ENOTFOUND)
	e.call(http.MethodPatch, path, e.keyB, map[string]any{"enabled": true}).want(t, http.StatusNotFound, cloud.ENOTFOUND)
	e.call(http.MethodDelete, path, e.keyB, nil).want(t, http.StatusNotFound, cloud.ENOTFOUND)
	if slices.ContainsFunc(e.rulesOf(t, e.keyB, 100), func(x resource.AlertRule) bool { return x.ID == got.ID }) {
		t.Fatal("org B lists org A's rule")
	}
	e.get("/alert-rules/nosuchrule00000000000000", read).want(t, http.StatusNotFound, cloud.ENOTFOUND)
	e.get("/alert-rules/Not-An-Id", read).want(t, http.StatusNotFound, cloud.ENOTFOUND)

	// Other methods: 405 with the ones the path allows.
	for _, c := range []struct{ method, path, allow string }{
		{http.MethodPut, path, "GET, PATCH, DELETE"},
		{http.MethodDelete, "/alert-rules", "GET, POST"},
		{http.MethodGet, "/silences/" + got.ID, "DELETE"},
		{http.MethodPut, "/silences", "GET, POST"},
	} {
		r := e.call(c.method, c.path, write, nil)
		r.want(t, http.StatusMethodNotAllowed, "method_not_allowed")
		if a := r.header.Get("Allow"); a != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, a, c.allow)
		}
	}

	// Delete: 204, then gone; its name is free again.
	r = e.call(http.MethodDelete, path, write, nil)
	r.want(t, http.StatusNoContent, "")
	if len(r.body) != 0 {
		t.Errorf("204 with a body: %q", r.body)
	}
	e.get(path, read).want(t, http.StatusNotFound, cloud.ENOTFOUND)
	e.call(http.MethodDelete, path, write, nil).want(t, http.StatusNotFound, cloud.ENOTFOUND)
	e.call(http.MethodPost, "/alert-rules", write, cpuRule("Hot CPU")).want(t, http.StatusCreated, "")
}

// TestDeleteRuleResolvesItsAlerts: deleting a rule through the API resolves
// its open alerts; other rules' alerts stay open.
func TestDeleteRuleResolvesItsAlerts(t *testing.T) {
	t.Parallel()
	stores.Run(t, testDeleteRuleResolvesItsAlerts)
}

func testDeleteRuleResolvesItsAlerts(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	cpu := e.alert(d.ID, "high_cpu", resource.AlertActive, time.Now().Add(-time.Minute))
	ack := e.alert(e.device(e.orgA.ID, "IG-500").ID, "high_cpu", resource.AlertAcknowledged, time.Now().Add(-time.Minute))
	mem := e.alert(d.ID, "high_mem", resource.AlertActive, time.Now().Add(-time.Minute))
	e.call(http.MethodDelete, "/alert-rules/"+cpu.RuleID, e.keyA, nil).want(t, http.StatusNoContent, "")

	var l resource.List[resource.Alert]
	e.get("/alerts?state=RESOLVED", e.keyA).decode(t, &l)
	var resolved []string
	for _, a := range l.Data {
		resolved = append(resolved, a.ID)
	}
	if !slices.Contains(resolved, cpu.ID) || !slices.Contains(resolved, ack.ID) || slices.Contains(resolved, mem.ID) {
		t.Fatalf("resolved after deleting high_cpu: %v (high_cpu: %s %s, high_mem: %s)", resolved, cpu.ID, ack.ID, mem.ID)
	}
	e.get("/alert-rules/"+cpu.RuleID, e.keyA).want(t, http.StatusNotFound, cloud.ENOTFOUND)
}

func TestAlertRulesPagination(t *testing.T) {
	t.Parallel()
	stores.Run(t, testAlertRulesPagination)
}

func testAlertRulesPagination(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	before := len(e.rulesOf(t, e.keyA, 100))
	var made []string
	for i := range 9 {
		r := e.call(http.MethodPost, "/alert-rules", e.keyA, cpuRule("rule "+strconv.Itoa(i)))
		r.want(t, http.StatusCreated, "")
		made = append(made, decodeRule(t, r).ID)
	}
	all := e.rulesOf(t, e.keyA, 100)
	if len(all) != before+9 {
		t.Fatalf("%d rules listed, want %d", len(all), before+9)
	}
	// Oldest first: the created rules come last, in order.
	var tail []string
	for _, r := range all[before:] {
		tail = append(tail, r.ID)
	}
	if !slices.Equal(tail, made) {
		t.Errorf("order: %v, want %v", tail, made)
	}
	for _, limit := range []int{1, 4, 7} {
		paged := e.rulesOf(t, e.keyA, limit)
		var ids []string
		for _, r := range paged {
			ids = append(ids, r.ID)
		}
		var want []string
		for _, r := range all {
			want = append(want, r.ID)
		}
		if !slices.Equal(ids, want) {
			t.Errorf("limit=%d walks %v, want %v", limit, ids, want)
		}
	}
	// The default page is 25.
	var l resource.List[resource.AlertRule]
	e.get("/alert-rules", e.keyA).decode(t, &l)
	if len(l.Data) != min(len(all), 25) {
		t.Errorf("default page: %d rules", len(l.Data))
	}
	for _, q := range []string{"limit=0", "limit=101", "limit=x", "limit=5&limit=6", "state=ACTIVE"} {
		r := e.get("/alert-rules?"+q, e.keyA)
		r.want(t, http.StatusBadRequest, cloud.EINVALID)
	}
	e.get("/alert-rules?cursor=Not-A-Cursor", e.keyA).want(t, http.StatusBadRequest, cloud.ECURSOR)
	// A cursor of another organization's list is not one of this list.
	e.get("/alert-rules?cursor="+made[0], e.keyB).want(t, http.StatusBadRequest, cloud.ECURSOR)
}

// TestAlertRuleValidation: every refused body is 400 validation_error
// whose message names the field, and nothing is stored.
func TestAlertRuleValidation(t *testing.T) {
	t.Parallel()
	stores.Run(t, testAlertRuleValidation)
}

func testAlertRuleValidation(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	other := e.device(e.orgB.ID, "IG-500")
	e.req(http.MethodPut, "/api/v1/public/devices/"+d.ID+"/serial/channels/rs485-1", e.keyA, rs485PointsBody()).want(t, http.StatusOK, "")
	threshold := func(mod func(c map[string]any)) map[string]any {
		b := cpuRule("Checked")
		mod(b["condition"].(map[string]any))
		return b
	}
	with := func(k string, v any) map[string]any {
		b := cpuRule("Checked")
		b[k] = v
		return b
	}
	before := len(e.rulesOf(t, e.keyA, 100))
	for _, c := range []struct {
		name  string
		body  any
		field string // the message starts with it
	}{
		{"bad op", threshold(func(c map[string]any) { c["op"] = "=>" }), "condition.op"},
		{"clear on the wrong side of >", threshold(func(c map[string]any) { c["clear"] = 90 }), "condition.clear"},
		{"clear on the wrong side of <", threshold(func(c map[string]any) { c["op"] = "<"; c["clear"] = 80 }), "condition.clear"},
		{"unknown metric", threshold(func(c map[string]any) { c["source"] = "metric.fanRpm" }), "condition.source"},
		{"unknown source", threshold(func(c map[string]any) { c["source"] = "sensor.x" }), "condition.source"},
		{"unknown point", threshold(func(c map[string]any) { c["source"] = "point.rs485-1.nope" }), "condition.source"},
		{"point no device of the scope has", map[string]any{"name": "Checked", "severity": "INFO", "scope": map[string]any{"tags": []string{"nobody"}},
			"condition": map[string]any{"kind": "threshold", "source": "point.rs485-1.boiler_temp", "op": ">", "value": 80}}, "condition.source"},
		{"no value", threshold(func(c map[string]any) { delete(c, "value") }), "condition.value"},
		{"for too long", threshold(func(c map[string]any) { c["for"] = "25h" }), "condition.for"},
		{"a member of another kind", threshold(func(c map[string]any) { c["after"] = "5m" }), "condition"},
		{"unknown condition member", threshold(func(c map[string]any) { c["treshold"] = 3 }), "condition.treshold"},
		{"unknown kind", threshold(func(c map[string]any) { c["kind"] = "anomaly" }), "condition.kind"},
		{"no condition", map[string]any{"name": "Checked", "severity": "INFO"}, "condition.kind"},
		{"offline too soon", map[string]any{"name": "Checked", "severity": "INFO", "condition": map[string]any{"kind": "offline", "after": "10s"}}, "condition.after"},
		{"status not watched", map[string]any{"name": "Checked", "severity": "INFO", "condition": map[string]any{"kind": "status", "status": "ONLINE"}}, "condition.status"},
		{"unknown notify id", with("notify", []string{"nosuchchannel0000000000"}), "notify"},
		{"repeatEvery too short", with("repeatEvery", "1m"), "repeatEvery"},
		{"bad severity", with("severity", "LOUD"), "severity"},
		{"no severity", with("severity", nil), "severity"},
		{"no name", with("name", ""), "name"},
		{"name taken", with("name", "high_cpu"), "name"},
		{"scope of both kinds", with("scope", map[string]any{"deviceIds": []string{d.ID}, "tags": []string{"a"}}), "scope"},
		{"scope with a bad tag", with("scope", map[string]any{"tags": []string{"Hall B"}}), "scope.tags[0]"},
		{"scope with another org's device", with("scope", map[string]any{"deviceIds": []string{other.ID}}), "scope.deviceIds"},
		{"enabled not a boolean", with("enabled", "yes"), "enabled"},
		{"unknown member", with("priority", 1), "priority"},
		{"member in the wrong case", with("Name", "x"), "Name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.call(http.MethodPost, "/alert-rules", e.keyA, c.body).wantInvalid(t, c.field)
		})
	}
	// The same checks hold on PATCH, which changes nothing when refused.
	r := e.call(http.MethodPost, "/alert-rules", e.keyA, map[string]any{"name": "Boiler", "severity": "ERROR", "scope": map[string]any{"deviceIds": []string{d.ID}},
		"condition": map[string]any{"kind": "threshold", "source": "point.rs485-1.boiler_temp", "op": ">", "value": 80, "clear": 75}})
	r.want(t, http.StatusCreated, "")
	boiler := decodeRule(t, r)
	path := "/alert-rules/" + boiler.ID
	for _, c := range []struct {
		name  string
		body  any
		field string
	}{
		{"bad op", map[string]any{"condition": map[string]any{"kind": "threshold", "source": "metric.cpuPct", "op": "!=", "value": 1}}, "condition.op"},
		{"unknown point", map[string]any{"condition": map[string]any{"kind": "threshold", "source": "point.rs485-1.nope", "op": ">", "value": 1}}, "condition.source"},
		{"scope without the point", map[string]any{"scope": map[string]any{"tags": []string{"nobody"}}}, "condition.source"},
		{"unknown notify id", map[string]any{"notify": []string{"nosuchchannel0000000000"}}, "notify"},
		{"null name", map[string]any{"name": nil}, "name"},
		{"null condition", map[string]any{"condition": nil}, "condition"},
		{"enabled not a boolean", map[string]any{"enabled": 1}, "enabled"},
		{"unknown member", map[string]any{"threshold": 3}, "threshold"},
		{"unknown condition member", map[string]any{"condition": map[string]any{"kind": "offline", "after": "5m", "x": 1}}, "condition.x"},
		{"nothing to change", map[string]any{}, "body"},
		{"name taken", map[string]any{"name": "high_mem"}, "name"},
	} {
		t.Run("PATCH "+c.name, func(t *testing.T) {
			e.call(http.MethodPatch, path, e.keyA, c.body).wantInvalid(t, c.field)
		})
	}
	if g := decodeRule(t, e.get(path, e.keyA)); g.Name != "Boiler" || g.Condition.Source != "point.rs485-1.boiler_temp" || len(g.Scope.DeviceIDs) != 1 || !g.UpdatedAt.Equal(boiler.UpdatedAt.Time) {
		t.Errorf("a refused PATCH changed the rule: %+v", g)
	}
	// Transport problems come before the rule's.
	e.call(http.MethodPost, "/alert-rules", e.keyA, `{"name":`).want(t, http.StatusBadRequest, "invalid_json")
	e.req(http.MethodPost, api.Prefix+"/alert-rules", e.keyA, `{}`, "Content-Type", "text/plain").want(t, http.StatusUnsupportedMediaType, "unsupported_media_type")
	big := `{"name":"` + strings.Repeat("a", api.MaxBodyBytes) + `"}`
	e.call(http.MethodPost, "/alert-rules", e.keyA, big).want(t, http.StatusRequestEntityTooLarge, "payload_too_large")
	e.call(http.MethodPatch, path, e.keyA, big).want(t, http.StatusRequestEntityTooLarge, "payload_too_large")
	e.call(http.MethodPost, "/alert-rules?dryRun=true", e.keyA, cpuRule("q")).want(t, http.StatusBadRequest, cloud.EINVALID)
	if n := len(e.rulesOf(t, e.keyA, 100)); n != before+1 {
		t.Errorf("%d rules after the refused bodies, want %d", n, before+1)
	}
}

// TestRulePreview checks the preview's answer and its range; the numbers
// over a known history are the preview's own tests.
func TestRulePreview(t *testing.T) {
	t.Parallel()
	stores.Run(t, testRulePreview)
}

func testRulePreview(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	e.device(e.orgA.ID, "IG-500")
	read := e.key(e.orgA.ID, cloud.ScopeAlertsRead)
	preview := func(body map[string]any) resp {
		return e.call(http.MethodPost, "/alert-rules/preview", read, body)
	}
	decode := func(r resp) resource.RulePreview {
		var one resource.One[resource.RulePreview]
		r.decode(t, &one)
		return one.Data
	}
	before := len(e.rulesOf(t, read, 100))

	// Default range: the last 7 days. Name and severity are optional.
	start := time.Now()
	r := preview(map[string]any{"condition": map[string]any{"kind": "threshold", "source": "metric.cpuPct", "op": ">", "value": 85}})
	r.want(t, http.StatusOK, "")
	p := decode(r)
	if p.To.Before(start.Add(-time.Second)) || p.To.After(time.Now().Add(time.Second)) || p.To.Sub(p.From.Time) != cloud.DefaultPreviewRange {
		t.Fatalf("default range %s..%s", p.From, p.To)
	}
	if p.Devices == nil || p.Opened != 0 || len(p.Devices) != 0 {
		t.Errorf("a quiet fleet: %s", r.body)
	}
	// A given range is answered as given.
	from, to := time.Now().Add(-48*time.Hour).UTC().Truncate(time.Millisecond), time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	body := cpuRule("Hot")
	body["from"], body["to"] = resource.FormatTime(from), resource.FormatTime(to)
	r = preview(body)
	r.want(t, http.StatusOK, "")
	if p := decode(r); !p.From.Equal(from) || !p.To.Equal(to) {
		t.Fatalf("range %s..%s, want %s..%s", p.From, p.To, from, to)
	}
	// Every kind can be previewed.
	for _, c := range []map[string]any{
		{"kind": "offline", "after": "5m"},
		{"kind": "event", "type": "alert.vpn_down", "resolveOn": "vpn.up"},
		{"kind": "status", "status": "ERROR", "for": "1m"},
	} {
		preview(map[string]any{"condition": c}).want(t, http.StatusOK, "")
	}
	// Nothing was stored.
	if n := len(e.rulesOf(t, read, 100)); n != before {
		t.Errorf("%d rules after previews, want %d", n, before)
	}

	for _, c := range []struct {
		name  string
		mod   func(b map[string]any)
		field string
	}{
		{"from after to", func(b map[string]any) { b["from"], b["to"] = resource.FormatTime(to), resource.FormatTime(from) }, "from"},
		{"range over the maximum", func(b map[string]any) { b["from"] = resource.FormatTime(to.Add(-cloud.MaxPreviewRange - time.Hour)) }, "from"},
		{"from not a time", func(b map[string]any) { b["from"] = "yesterday" }, "from"},
		{"to not a time", func(b map[string]any) { b["to"] = "2026-13-01T00:00:00Z" }, "to"},
		{"to in the future", func(b map[string]any) { b["to"] = resource.FormatTime(time.Now().Add(time.Hour)) }, "to"},
		{"bad op", func(b map[string]any) { b["condition"].(map[string]any)["op"] = "=" }, "condition.op"},
		{"unknown member", func(b map[string]any) { b["window"] = "7d" }, "window"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := cpuRule("Hot")
			b["from"], b["to"] = resource.FormatTime(from), resource.FormatTime(to)
			c.mod(b)
			preview(b).wantInvalid(t, c.field)
		})
	}
}

func TestSilences(t *testing.T) {
	t.Parallel()
	stores.Run(t, testSilences)
}

func testSilences(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	write := e.key(e.orgA.ID, cloud.ScopeAlertsRead, cloud.ScopeAlertsWrite)
	read := e.key(e.orgA.ID, cloud.ScopeAlertsRead)
	keyID, _, _ := apikey.Parse(write)
	list := func(q, key string) []resource.Silence {
		t.Helper()
		r := e.get("/silences"+q, key)
		r.want(t, http.StatusOK, "")
		var l resource.List[resource.Silence]
		r.decode(t, &l)
		if l.Data == nil {
			t.Fatalf("data is not a list: %s", r.body)
		}
		return l.Data
	}
	ids := func(l []resource.Silence) []string {
		var out []string
		for _, s := range l {
			out = append(out, s.ID)
		}
		return out
	}

	// Create: from defaults to now.
	to := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Millisecond)
	start := time.Now().Add(-time.Second)
	r := e.call(http.MethodPost, "/silences", write, map[string]any{"scope": map[string]any{"deviceIds": []string{d.ID}}, "to": resource.FormatTime(to), "comment": "firmware rollout"})
	r.want(t, http.StatusCreated, "")
	var one resource.One[resource.Silence]
	r.decode(t, &one)
	s := one.Data
	if s.ID == "" || !s.To.Equal(to) || s.From.Before(start) || s.From.After(time.Now()) || s.Comment != "firmware rollout" ||
		s.CreatedBy != "key:"+keyID || len(s.Scope.DeviceIDs) != 1 || s.Scope.DeviceIDs[0] != d.ID {
		t.Fatalf("created silence: %s (key %s)", r.body, keyID)
	}
	// One over every device, from a time in the past.
	from := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	r = e.call(http.MethodPost, "/silences", write, map[string]any{"from": resource.FormatTime(from), "to": resource.FormatTime(to.Add(time.Hour))})
	r.want(t, http.StatusCreated, "")
	var second resource.One[resource.Silence]
	r.decode(t, &second)
	all := second.Data
	if !all.From.Equal(from) || all.Comment != "" || len(all.Scope.DeviceIDs)+len(all.Scope.Tags) != 0 || !strings.Contains(string(r.body), `"scope":{}`) {
		t.Fatalf("silence of every device: %s (from %s)", r.body, resource.FormatTime(from))
	}
	if got := ids(list("", read)); len(got) != 2 || !slices.Contains(got, s.ID) || !slices.Contains(got, all.ID) {
		t.Fatalf("active silences %v", got)
	}
	if got := list("", e.keyB); len(got) != 0 {
		t.Fatalf("org B lists %v", ids(got))
	}
	// Pages of one.
	r = e.get("/silences?limit=1", read)
	var page resource.List[resource.Silence]
	r.decode(t, &page)
	if len(page.Data) != 1 || !page.Pagination.HasMore || page.Pagination.NextCursor == nil {
		t.Fatalf("limit=1: %s", r.body)
	}
	r = e.get("/silences?limit=1&cursor="+*page.Pagination.NextCursor, read)
	var page2 resource.List[resource.Silence]
	r.decode(t, &page2)
	if len(page2.Data) != 1 || page2.Data[0].ID == page.Data[0].ID || page2.Pagination.HasMore {
		t.Fatalf("second page: %s", r.body)
	}
	e.get("/silences?cursor="+s.ID, e.keyB).want(t, http.StatusBadRequest, cloud.ECURSOR)
	e.get("/silences?limit=101", read).want(t, http.StatusBadRequest, cloud.EINVALID)

	// Refused: the message names the field.
	for _, c := range []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"no to", map[string]any{"comment": "x"}, "to"},
		{"to before from", map[string]any{"from": resource.FormatTime(to), "to": resource.FormatTime(from)}, "to"},
		{"to in the past", map[string]any{"from": resource.FormatTime(from.Add(-time.Hour)), "to": resource.FormatTime(from)}, "to"},
		{"longer than 90 days", map[string]any{"to": resource.FormatTime(time.Now().Add(91 * 24 * time.Hour))}, "to"},
		{"from not a time", map[string]any{"from": "now", "to": resource.FormatTime(to)}, "from"},
		{"comment too long", map[string]any{"to": resource.FormatTime(to), "comment": strings.Repeat("x", cloud.MaxCommentLength+1)}, "comment"},
		{"bad tag", map[string]any{"to": resource.FormatTime(to), "scope": map[string]any{"tags": []string{"UPPER"}}}, "scope.tags[0]"},
		{"unknown member", map[string]any{"to": resource.FormatTime(to), "until": "x"}, "until"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.call(http.MethodPost, "/silences", write, c.body).wantInvalid(t, c.field)
		})
	}
	e.call(http.MethodPost, "/silences", read, map[string]any{"to": resource.FormatTime(to)}).want(t, http.StatusForbidden, cloud.EFORBIDDEN)
	e.call(http.MethodDelete, "/silences/"+s.ID, read, nil).want(t, http.StatusForbidden, cloud.EFORBIDDEN)
	e.get("/silences", e.key(e.orgA.ID, cloud.ScopeDevicesRead)).want(t, http.StatusForbidden, cloud.EFORBIDDEN)
	e.get("/silences?all=yes", read).want(t, http.StatusBadRequest, cloud.EINVALID)
	if got := ids(list("", read)); len(got) != 2 {
		t.Fatalf("refused bodies changed the list: %v", got)
	}

	// Delete: another organization's silence is not found; the owner's
	// ends now and leaves the active list.
	e.call(http.MethodDelete, "/silences/"+s.ID, e.keyB, nil).want(t, http.StatusNotFound, cloud.ENOTFOUND)
	r = e.call(http.MethodDelete, "/silences/"+s.ID, write, nil)
	r.want(t, http.StatusNoContent, "")
	if got := ids(list("", read)); len(got) != 1 || got[0] != all.ID {
		t.Fatalf("active silences after the delete: %v", got)
	}
	e.call(http.MethodDelete, "/silences/nosuchsilence00000000000", write, nil).want(t, http.StatusNotFound, cloud.ENOTFOUND)

	// Once its end has passed, a silence is listed only with all=true.
	e.ago.Store(-int64(4 * time.Hour)) // the store's clock, 4 hours ahead
	if got := list("", read); len(got) != 0 {
		t.Fatalf("ended silences listed as active: %v", ids(got))
	}
	if got := ids(list("?all=true", read)); !slices.Contains(got, all.ID) {
		t.Fatalf("all=true: %v, want %s among them", got, all.ID)
	}
}

// TestRulePreviewNumbers: over a point history the test wrote, the preview
// answers the alerts the rule would have opened and how long they stayed
// open, per device; a device that never crossed is not listed.
func TestRulePreviewNumbers(t *testing.T) {
	t.Parallel()
	stores.Run(t, testRulePreviewNumbers)
}

func testRulePreviewNumbers(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	hot, calm := e.device(e.orgA.ID, "IG-500"), e.device(e.orgA.ID, "IG-500")
	t0 := time.Now().Add(-time.Hour).UTC().Truncate(time.Minute)
	for i, d := range []resource.DeviceDetail{hot, calm} {
		e.req(http.MethodPut, "/api/v1/public/devices/"+d.ID+"/serial/channels/rs485-1", e.keyA, rs485PointsBody()).want(t, http.StatusOK, "")
		values := []float64{40, 60, 70, 44, 55} // hot: opens at 60, resolves at 44 (< clear 45), opens again at 55
		if i == 1 {
			values = []float64{40, 41, 42, 43, 44}
		}
		var samples []protocol.PointSample
		for j, v := range values {
			samples = append(samples, protocol.PointSample{Point: "rs485-1.boiler_temp", At: resource.T(t0.Add(time.Duration(j) * time.Minute)), Value: v})
		}
		pointSamples(t, e.s.Agent, e.agent(d.ID), samples...)
	}
	from, to := t0.Add(-time.Minute), t0.Add(10*time.Minute)
	r := e.call(http.MethodPost, "/alert-rules/preview", e.keyA, map[string]any{
		"condition": map[string]any{"kind": "threshold", "source": "point.rs485-1.boiler_temp", "op": ">", "value": 50, "clear": 45},
		"from":      resource.FormatTime(from), "to": resource.FormatTime(to)})
	r.want(t, http.StatusOK, "")
	var one resource.One[resource.RulePreview]
	r.decode(t, &one)
	p := one.Data
	// Open from t0+1m to t0+3m, then from t0+4m to the end of the range.
	want := (2*time.Minute + to.Sub(t0.Add(4*time.Minute))).Milliseconds()
	if p.Opened != 2 || len(p.Devices) != 1 || p.Devices[0].DeviceID != hot.ID || p.Devices[0].Opened != 2 || p.Devices[0].OpenForMs != want {
		t.Fatalf("preview %s, want 2 openings on %s open %d ms in total", r.body, hot.ID, want)
	}
}
