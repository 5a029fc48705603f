package storetest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/shared/resource"
)

// The alert rules, silences and notification channels of cloud.RuleService
// (DESIGN.md "Alert rules and notifications").

func num(v float64) *float64 { return &v }

// cpuRule is a threshold rule on metric.cpuPct named name.
func cpuRule(name string) resource.AlertRule {
	return resource.AlertRule{Name: name, Enabled: true, Severity: resource.SeverityWarning,
		Condition: resource.RuleCondition{Kind: resource.ConditionThreshold, Source: "metric.cpuPct", Op: ">", Value: num(95), Clear: num(90), For: "2m"}}
}

// wantInvalid fails unless err is EINVALID with a message starting with
// field.
func wantInvalid(t testing.TB, what string, err error, field string) {
	t.Helper()
	if cloud.ErrorCode(err) != cloud.EINVALID || !strings.HasPrefix(cloud.ErrorMessage(err), field) {
		t.Errorf("%s: %v, want validation_error naming %s", what, err, field)
	}
}

// withoutStamps is a rule without its id and times, to compare shapes.
func withoutStamps(r resource.AlertRule) resource.AlertRule {
	r.ID, r.CreatedAt, r.UpdatedAt = "", resource.Time{}, resource.Time{}
	return r
}

// channel adds a notification channel to the organization.
func (e *env) channel(orgID, name string, all bool) resource.NotificationChannel {
	e.t.Helper()
	c, err := e.Store.Rules().CreateChannel(e.ctx, cloud.NewChannel{OrgID: orgID, Name: name, Kind: resource.ChannelSlack,
		Target: "https://chat.example.com/hooks/" + name, AllRules: all})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// testRuleDefaults: a new organization has the default rules as ordinary
// rules; a deleted default stays deleted and frees its name.
func testRuleDefaults(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	list, err := e.Store.Rules().ListRules(e.ctx, org.ID, cloud.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	want := cloud.DefaultAlertRules()
	if len(list.Data) != len(want) {
		t.Fatalf("%d rules, want the %d defaults: %+v", len(list.Data), len(want), list.Data)
	}
	for i, r := range list.Data {
		if !slices.ContainsFunc(want, func(w resource.AlertRule) bool { return pointsJSON(t, w) == pointsJSON(t, withoutStamps(r)) }) {
			t.Errorf("rule %d = %s, not a default", i, pointsJSON(t, r))
		}
	}
	off := e.rule(org.ID, alert.RuleDeviceOffline)
	if err := e.Store.Rules().DeleteRule(e.ctx, org.ID, off.ID); err != nil {
		t.Fatal(err)
	}
	rules, err := e.Engine.Rules(e.ctx, org.ID)
	if err != nil || len(rules) != len(want)-1 || slices.ContainsFunc(rules, func(r alert.Rule) bool { return r.Name == alert.RuleDeviceOffline }) {
		t.Errorf("rules after deleting device_offline: %v, %v", rules, err)
	}
	if _, err := e.Store.Rules().Rule(e.ctx, org.ID, off.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("deleted rule: %v", err)
	}
	r := off.Resource()
	r.Condition.After = "5m"
	if _, err := e.Store.Rules().CreateRule(e.ctx, org.ID, r); err != nil {
		t.Errorf("a rule named as the deleted one: %v", err)
	}
}

// newTwoOrgs is a store with the organizations acme and other, and a
// device in each.
func newTwoOrgs(t *testing.T, open Opener) (e *env, org, other cloud.Org, d, od device) {
	e = newEnv(t, open)
	org, other = e.org("acme"), e.org("other")
	return e, org, other, e.device(org.ID, "IG-500"), e.device(other.ID, "IG-500")
}

// testRuleCRUD: create, read, update and list rules, and the store's
// checks naming the field.
func testRuleCRUD(t *testing.T, open Opener) {
	e, org, other, d, od := newTwoOrgs(t, open)
	rs := e.Store.Rules()
	ch := e.channel(org.ID, "ops", false)
	otherCh := e.channel(other.ID, "ops", false)

	e.clock.Add(time.Second)
	in := cpuRule("cpu hot")
	in.Notify, in.Scope, in.RepeatEvery = []string{ch.ID}, resource.RuleScope{DeviceIDs: []string{d.ID}}, "30m"
	r, err := rs.CreateRule(e.ctx, org.ID, in)
	if err != nil {
		t.Fatal(err)
	}
	if r.ID == "" || !r.CreatedAt.Equal(e.clock.Now()) || !r.UpdatedAt.Equal(r.CreatedAt.Time) || r.RepeatEvery != "30m" || r.Condition.For != "2m" || *r.Condition.Clear != 90 {
		t.Errorf("created %s", pointsJSON(t, r))
	}
	if got, err := rs.Rule(e.ctx, org.ID, r.ID); err != nil || pointsJSON(t, got) != pointsJSON(t, r) {
		t.Errorf("Rule = %s, %v; want %s", pointsJSON(t, got), err, pointsJSON(t, r))
	}
	if rules, _ := e.Engine.Rules(e.ctx, org.ID); !slices.ContainsFunc(rules, func(c alert.Rule) bool {
		return c.ID == r.ID && c.Cond.Op == ">" && c.Cond.Value == 95 && c.Cond.For == 2*time.Minute && c.Repeat == 30*time.Minute && slices.Equal(c.Notify, []string{ch.ID})
	}) {
		t.Errorf("engine rules lack %s: %+v", r.ID, rules)
	}

	for _, tc := range []struct {
		what  string
		mod   func(*resource.AlertRule)
		field string
	}{
		{"a name taken", func(r *resource.AlertRule) { r.Name = "cpu hot" }, "name"},
		{"a default's name", func(r *resource.AlertRule) { r.Name = "high_cpu" }, "name"},
		{"another org's channel", func(r *resource.AlertRule) { r.Notify = []string{ch.ID, otherCh.ID} }, "notify[1]"},
		{"another org's device", func(r *resource.AlertRule) { r.Scope.DeviceIDs = []string{od.ID} }, "scope.deviceIds[0]"},
		{"a point no device has", func(r *resource.AlertRule) { r.Condition.Source = "point.rs485-1.temp" }, "condition.source"},
		{"a clear on the wrong side", func(r *resource.AlertRule) { r.Condition.Clear = num(99) }, "condition.clear"},
		{"a bad op", func(r *resource.AlertRule) { r.Condition.Op = "=" }, "condition.op"},
	} {
		bad := cpuRule("new")
		tc.mod(&bad)
		_, err := rs.CreateRule(e.ctx, org.ID, bad)
		wantInvalid(t, tc.what, err, tc.field)
	}

	// A point of a device's desired configuration.
	e.clock.Add(time.Second)
	if _, err := e.Store.Serial().PutChannel(e.ctx, org.ID, d.ID, "rs485-1", rs485Points()); err != nil {
		t.Fatal(err)
	}
	pt := cpuRule("tank hot")
	pt.Condition.Source = "point.rs485-1.temp"
	if _, err := rs.CreateRule(e.ctx, org.ID, pt); err != nil {
		t.Errorf("a point of the device: %v", err)
	}
	pt.Name, pt.Condition.Source, pt.Scope = "pump", "point.rs485-1.temp", resource.RuleScope{DeviceIDs: []string{e.device(org.ID, "IG-500").ID}}
	_, err = rs.CreateRule(e.ctx, org.ID, pt)
	wantInvalid(t, "a point of a device outside the scope", err, "condition.source")
	// By tags: the device holding every tag of the scope has the point.
	if err := e.Store.SetDeviceTags(e.ctx, d.ID, []string{"site:north", "tank"}); err != nil {
		t.Fatal(err)
	}
	pt.Name, pt.Scope = "tanks hot", resource.RuleScope{Tags: []string{"tank", "site:north"}}
	if _, err := rs.CreateRule(e.ctx, org.ID, pt); err != nil {
		t.Errorf("a point of the device holding the scope's tags: %v", err)
	}
	pt.Name, pt.Scope = "south tanks hot", resource.RuleScope{Tags: []string{"tank", "site:south"}}
	_, err = rs.CreateRule(e.ctx, org.ID, pt)
	wantInvalid(t, "a point of no device holding the scope's tags", err, "condition.source")

	e.clock.Add(time.Minute)
	name, off, sev := "cpu very hot", false, resource.SeverityCritical
	up, err := rs.UpdateRule(e.ctx, org.ID, r.ID, cloud.RulePatch{Name: &name, Enabled: &off, Severity: &sev})
	if err != nil || up.Name != name || up.Enabled || up.Severity != sev || !up.UpdatedAt.Equal(e.clock.Now()) || !up.CreatedAt.Equal(r.CreatedAt.Time) || up.Condition.Op != ">" {
		t.Errorf("UpdateRule = %s, %v", pointsJSON(t, up), err)
	}
	taken := "high_mem"
	_, err = rs.UpdateRule(e.ctx, org.ID, r.ID, cloud.RulePatch{Name: &taken})
	wantInvalid(t, "rename to a taken name", err, "name")
	badOp := up.Condition
	badOp.Op = "=="
	_, err = rs.UpdateRule(e.ctx, org.ID, r.ID, cloud.RulePatch{Condition: &badOp})
	wantInvalid(t, "a bad op", err, "condition.op")
	if got, _ := rs.Rule(e.ctx, org.ID, r.ID); pointsJSON(t, got) != pointsJSON(t, up) {
		t.Errorf("a refused update changed the rule: %s", pointsJSON(t, got))
	}

	// Pages, oldest first, after the defaults.
	for i := range 20 {
		e.clock.Add(time.Millisecond)
		if _, err := rs.CreateRule(e.ctx, org.ID, cpuRule(strings.Repeat("x", i+1))); err != nil {
			t.Fatal(err)
		}
	}
	var all []resource.AlertRule
	cursor := ""
	for page := 0; ; page++ {
		l, err := rs.ListRules(e.ctx, org.ID, cloud.Page{Limit: 7, Cursor: cursor})
		if err != nil || page > 10 {
			t.Fatalf("page %d: %v", page, err)
		}
		all = append(all, l.Data...)
		if !l.Pagination.HasMore {
			break
		}
		cursor = *l.Pagination.NextCursor
	}
	if len(all) != 7+3+20 || all[7].ID != r.ID || all[29].Name != strings.Repeat("x", 20) {
		t.Errorf("%d rules listed", len(all))
	}
	if _, err := rs.ListRules(e.ctx, org.ID, cloud.Page{Cursor: "nosuchrule"}); cloud.ErrorCode(err) != cloud.ECURSOR {
		t.Errorf("unknown cursor: %v", err)
	}

	// Another organization's rule is not found.
	if _, err := rs.Rule(e.ctx, other.ID, r.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("other org's Rule: %v", err)
	}
	if _, err := rs.UpdateRule(e.ctx, other.ID, r.ID, cloud.RulePatch{Name: &name}); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("other org's UpdateRule: %v", err)
	}
	if err := rs.DeleteRule(e.ctx, other.ID, r.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("other org's DeleteRule: %v", err)
	}
	if l, _ := rs.ListRules(e.ctx, other.ID, cloud.Page{Limit: 100}); len(l.Data) != 7 {
		t.Errorf("other org lists %d rules", len(l.Data))
	}
}

// testRuleDeleteResolves: deleting a rule, disabling it or changing its
// condition resolves its open alerts, each with its alert.resolved event.
func testRuleDeleteResolves(t *testing.T, open Opener) {
	e := newEnv(t, open)
	log := &alertLog{}
	e.Store.Observe(nil, log)
	org := e.org("acme")
	d1, d2 := e.device(org.ID, "IG-500"), e.device(org.ID, "IG-500")
	rs := e.Store.Rules()
	r, err := rs.CreateRule(e.ctx, org.ID, cpuRule("cpu hot"))
	if err != nil {
		t.Fatal(err)
	}
	openAll := func() []resource.Alert {
		t.Helper()
		rule := e.rule(org.ID, "cpu hot")
		var out []resource.Alert
		for _, d := range []device{d1, d2} {
			a, ok, err := e.Engine.OpenAlert(e.ctx, alert.Opening{OrgID: org.ID, DeviceID: d.ID, Rule: rule, Message: "hot", At: e.clock.Now(), WithEvent: true})
			if err != nil || !ok {
				t.Fatalf("open: %v %v", ok, err)
			}
			out = append(out, a)
		}
		return out
	}
	check := func(what string, alerts []resource.Alert) {
		t.Helper()
		if got := log.list(); len(got) != 2 || got[0] != "alert.resolved RESOLVED" || got[1] != got[0] {
			t.Errorf("%s: the alert observer heard %v, want the two resolutions", what, got)
		}
		log.events = nil
		for _, a := range alerts {
			got, err := e.alertByID(org.ID, a, resource.AlertResolved)
			if err != nil || got.State != resource.AlertResolved || got.ResolvedAt == nil || !got.ResolvedAt.Equal(e.clock.Now()) {
				t.Errorf("%s: alert %+v, %v", what, got, err)
			}
			evs, err := e.Store.Devices().Events(e.ctx, org.ID, a.DeviceID, cloud.EventFilter{Type: alert.EventResolved})
			if err != nil || !slices.ContainsFunc(evs.Data, func(ev resource.Event) bool {
				return strings.Contains(string(ev.Data), a.ID) && strings.Contains(ev.Message, what)
			}) {
				t.Errorf("%s: no alert.resolved event of %s: %+v, %v", what, a.ID, evs.Data, err)
			}
		}
	}

	e.clock.Add(time.Minute)
	alerts := openAll()
	e.clock.Add(time.Minute)
	sev := resource.SeverityError
	if _, err := rs.UpdateRule(e.ctx, org.ID, r.ID, cloud.RulePatch{Severity: &sev}); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.alertByID(org.ID, alerts[0], resource.AlertActive); got.State != resource.AlertActive {
		t.Errorf("a severity change resolved the alert: %+v", got)
	}
	off := false
	if _, err := rs.UpdateRule(e.ctx, org.ID, r.ID, cloud.RulePatch{Enabled: &off}); err != nil {
		t.Fatal(err)
	}
	check("rule disabled", alerts)

	on := true
	if _, err := rs.UpdateRule(e.ctx, org.ID, r.ID, cloud.RulePatch{Enabled: &on}); err != nil {
		t.Fatal(err)
	}
	e.clock.Add(time.Minute)
	alerts = openAll()
	e.clock.Add(time.Minute)
	cond := r.Condition
	cond.Value = num(97)
	if _, err := rs.UpdateRule(e.ctx, org.ID, r.ID, cloud.RulePatch{Condition: &cond}); err != nil {
		t.Fatal(err)
	}
	check("rule changed", alerts)

	e.clock.Add(time.Minute)
	alerts = openAll()
	e.clock.Add(time.Minute)
	if err := rs.DeleteRule(e.ctx, org.ID, r.ID); err != nil {
		t.Fatal(err)
	}
	check("rule deleted", alerts)
	if err := rs.DeleteRule(e.ctx, org.ID, r.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("deleting twice: %v", err)
	}
	if _, err := rs.CreateRule(e.ctx, org.ID, cpuRule("cpu hot")); err != nil {
		t.Errorf("the deleted rule's name: %v", err)
	}
}

// alertByID finds alert a of the organization among those in state.
func (e *env) alertByID(orgID string, a resource.Alert, state resource.AlertState) (resource.Alert, error) {
	l, err := e.Store.Alerts().ListAlerts(e.ctx, orgID, cloud.AlertFilter{State: state, DeviceID: a.DeviceID, Page: cloud.Page{Limit: 100}})
	if err != nil {
		return resource.Alert{}, err
	}
	for _, x := range l.Data {
		if x.ID == a.ID {
			return x, nil
		}
	}
	return resource.Alert{}, cloud.Errorf(cloud.ENOTFOUND, "alert %s is not %s", a.ID, state)
}

// testNotificationChannels: create, list, find by id, join every rule,
// and leave every rule's notify list when deleted.
func testNotificationChannels(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org, other := e.org("acme"), e.org("other")
	rs := e.Store.Rules()
	for _, tc := range []struct {
		c     cloud.NewChannel
		field string
	}{
		{cloud.NewChannel{OrgID: org.ID, Name: "x", Kind: "sms", Target: "+100"}, "kind"},
		{cloud.NewChannel{OrgID: org.ID, Name: "x", Kind: resource.ChannelEmail, Target: "not an address"}, "target"},
		{cloud.NewChannel{OrgID: org.ID, Name: "x", Kind: resource.ChannelSlack, Target: "https://chat.example.com/h", MinSeverity: "LOUD"}, "minSeverity"},
		{cloud.NewChannel{OrgID: org.ID, Name: "", Kind: resource.ChannelSlack, Target: "https://chat.example.com/h"}, "name"},
	} {
		_, err := rs.CreateChannel(e.ctx, tc.c)
		wantInvalid(t, tc.field, err, tc.field)
	}
	if _, err := rs.CreateChannel(e.ctx, cloud.NewChannel{OrgID: "nosuchorg", Name: "x", Kind: resource.ChannelSlack, Target: "https://chat.example.com/h"}); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("unknown org: %v", err)
	}
	mail, err := rs.CreateChannel(e.ctx, cloud.NewChannel{OrgID: org.ID, Name: "on call", Kind: resource.ChannelEmail, Target: "a@example.com, b@example.com", MinSeverity: resource.SeverityError})
	if err != nil || mail.Target != "a@example.com, b@example.com" || mail.MinSeverity != resource.SeverityError || mail.Kind != resource.ChannelEmail {
		t.Fatalf("email channel %+v, %v", mail, err)
	}
	r, err := rs.CreateRule(e.ctx, org.ID, cpuRule("cpu hot"))
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Add(time.Second)
	chat := e.channel(org.ID, "chat", true)
	rules, _ := rs.ListRules(e.ctx, org.ID, cloud.Page{Limit: 100})
	for _, r := range rules.Data {
		if !slices.Equal(r.Notify, []string{chat.ID}) {
			t.Errorf("rule %s notifies %v, want the new channel", r.Name, r.Notify)
		}
	}
	e.channel(other.ID, "theirs", true)
	if l, err := rs.ListChannels(e.ctx, org.ID); err != nil || len(l) != 2 || l[0].ID != mail.ID || l[1].ID != chat.ID {
		t.Errorf("ListChannels = %+v, %v", l, err)
	}
	if o, c, err := rs.Channel(e.ctx, chat.ID); err != nil || o != org.ID || c != chat {
		t.Errorf("Channel = %s %+v, %v", o, c, err)
	}
	if _, _, err := rs.Channel(e.ctx, "nosuchchannel"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("unknown channel: %v", err)
	}
	if err := rs.DeleteChannel(e.ctx, other.ID, chat.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("another org's channel: %v", err)
	}
	both := []string{mail.ID, chat.ID}
	if _, err := rs.UpdateRule(e.ctx, org.ID, r.ID, cloud.RulePatch{Notify: &both}); err != nil {
		t.Fatal(err)
	}
	if err := rs.DeleteChannel(e.ctx, org.ID, chat.ID); err != nil {
		t.Fatal(err)
	}
	rules, _ = rs.ListRules(e.ctx, org.ID, cloud.Page{Limit: 100})
	for _, x := range rules.Data {
		want := []string{}
		if x.ID == r.ID {
			want = []string{mail.ID}
		}
		if !slices.Equal(x.Notify, want) {
			t.Errorf("after the delete rule %s notifies %v, want %v", x.Name, x.Notify, want)
		}
	}
	if l, _ := rs.ListChannels(e.ctx, org.ID); len(l) != 1 {
		t.Errorf("channels after the delete: %+v", l)
	}
	if err := rs.DeleteChannel(e.ctx, org.ID, chat.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("deleting twice: %v", err)
	}
	for i := 1; i < cloud.MaxChannelsPerOrg; i++ {
		e.channel(org.ID, fmt.Sprint("c", i), false)
	}
	if _, err := rs.CreateChannel(e.ctx, cloud.NewChannel{OrgID: org.ID, Name: "one too many", Kind: resource.ChannelSlack, Target: "https://chat.example.com/h"}); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Errorf("channel %d: %v", cloud.MaxChannelsPerOrg+1, err)
	}
}

// testSilences: create (checked), list the active ones or all, end one.
func testSilences(t *testing.T, open Opener) {
	e, org, other, d, od := newTwoOrgs(t, open)
	rs := e.Store.Rules()
	now := e.clock.Now()
	_, err := rs.CreateSilence(e.ctx, org.ID, cloud.NewSilence{From: now, Comment: "x"})
	wantInvalid(t, "no to", err, "to")
	_, err = rs.CreateSilence(e.ctx, org.ID, cloud.NewSilence{To: now.Add(time.Hour), Scope: resource.RuleScope{DeviceIDs: []string{od.ID}}})
	wantInvalid(t, "another org's device", err, "scope.deviceIds[0]")

	var made []resource.Silence
	for i := range 5 {
		e.clock.Add(time.Second)
		s, err := rs.CreateSilence(e.ctx, org.ID, cloud.NewSilence{Scope: resource.RuleScope{DeviceIDs: []string{d.ID}}, To: e.clock.Now().Add(time.Duration(i+1) * time.Hour),
			Comment: "maintenance", CreatedBy: "cli"})
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, s)
	}
	if s := made[0]; !s.From.Equal(now.Add(time.Second)) || s.CreatedBy != "cli" || s.Comment != "maintenance" || !slices.Equal(s.Scope.DeviceIDs, []string{d.ID}) {
		t.Errorf("silence %+v", s)
	}
	list := func(f cloud.SilenceFilter) []string {
		t.Helper()
		var out []string
		for page := 0; ; page++ {
			l, err := rs.ListSilences(e.ctx, org.ID, f)
			if err != nil || page > 10 {
				t.Fatalf("ListSilences: %v", err)
			}
			for _, s := range l.Data {
				out = append(out, s.ID)
			}
			if !l.Pagination.HasMore {
				return out
			}
			f.Cursor = *l.Pagination.NextCursor
		}
	}
	ids := func(ss ...resource.Silence) []string {
		var out []string
		for _, s := range ss {
			out = append(out, s.ID)
		}
		return out
	}
	if got := list(cloud.SilenceFilter{Page: cloud.Page{Limit: 2}}); !slices.Equal(got, ids(made[4], made[3], made[2], made[1], made[0])) {
		t.Errorf("active silences, newest first: %v", got)
	}
	if err := rs.DeleteSilence(e.ctx, org.ID, made[3].ID); err != nil {
		t.Fatal(err)
	}
	if err := rs.DeleteSilence(e.ctx, org.ID, made[3].ID); err != nil {
		t.Errorf("ending an ended silence: %v", err)
	}
	if err := rs.DeleteSilence(e.ctx, other.ID, made[2].ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("another org's silence: %v", err)
	}
	e.clock.Add(90 * time.Minute) // made[0] is over
	if got := list(cloud.SilenceFilter{}); !slices.Equal(got, ids(made[4], made[2], made[1])) {
		t.Errorf("active silences after one ended and one was deleted: %v", got)
	}
	if got := list(cloud.SilenceFilter{All: true, Page: cloud.Page{Limit: 3}}); !slices.Equal(got, ids(made[4], made[3], made[2], made[1], made[0])) {
		t.Errorf("all silences: %v", got)
	}
	if l, _ := rs.ListSilences(e.ctx, other.ID, cloud.SilenceFilter{All: true}); len(l.Data) != 0 {
		t.Errorf("another org lists %+v", l.Data)
	}
}

// rulesHeard records the organizations a RulesObserver heard of.
type rulesHeard struct {
	mu      sync.Mutex
	orgs    []string
	devices []string // "<org> <device>" of DeviceTagsChanged
}

func (h *rulesHeard) RulesChanged(orgID string) {
	h.mu.Lock()
	h.orgs = append(h.orgs, orgID)
	h.mu.Unlock()
}

func (h *rulesHeard) DeviceTagsChanged(orgID, deviceID string) {
	h.mu.Lock()
	h.devices = append(h.devices, orgID+" "+deviceID)
	h.mu.Unlock()
}

func (h *rulesHeard) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.orgs
	h.orgs = nil
	return out
}

// testRulesObserved: every committed change of rules, silences or channels
// is heard by the store's RulesObserver, and on a store several relays
// share by another handle's cluster listener; a refused one is not.
func testRulesObserved(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e2 := e.reopen()
	heard := &rulesHeard{}
	e.Store.ObserveRules(heard)
	org := e.org("acme")
	cluster := make(chan string, 100)
	if e2.Cluster != nil {
		ctx, cancel := context.WithCancel(e.ctx)
		listening := make(chan struct{}, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = e2.Cluster.Listen(ctx, cloud.ClusterHandlers{
				Rules:      func(orgID string) { cluster <- orgID },
				DeviceTags: func(orgID, deviceID string) { cluster <- orgID + " " + deviceID },
				Resync: func(context.Context) error {
					select {
					case listening <- struct{}{}:
					default:
					}
					return nil
				},
			}, slog.New(slog.DiscardHandler))
		}()
		t.Cleanup(func() { cancel(); <-done })
		select {
		case <-listening:
		case <-time.After(10 * time.Second):
			t.Fatal("the cluster listener did not start")
		}
	}
	rs := e.Store.Rules()
	r, err := rs.CreateRule(e.ctx, org.ID, cpuRule("cpu hot"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.CreateRule(e.ctx, org.ID, cpuRule("cpu hot")); err == nil {
		t.Fatal("a taken name was accepted")
	}
	ch := e.channel(org.ID, "chat", false)
	s, err := rs.CreateSilence(e.ctx, org.ID, cloud.NewSilence{To: e.clock.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{rs.DeleteSilence(e.ctx, org.ID, s.ID), rs.DeleteChannel(e.ctx, org.ID, ch.ID), rs.DeleteRule(e.ctx, org.ID, r.ID)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	want := slices.Repeat([]string{org.ID}, 6)
	if got := heard.take(); !slices.Equal(got, want) {
		t.Errorf("observer heard %v, want %v", got, want)
	}
	// A device's tags changed through PATCH /devices/{id} are heard as
	// the device's; by the admin CLI (SetDeviceTags) on the cluster only.
	d := e.device(org.ID, "IG-500")
	tags := []string{"line-3"}
	if _, err := e.Store.Devices().PatchDevice(e.ctx, org.ID, d.ID, cloud.DevicePatch{Tags: &tags}); err != nil {
		t.Fatal(err)
	}
	name := "renamed"
	if _, err := e.Store.Devices().PatchDevice(e.ctx, org.ID, d.ID, cloud.DevicePatch{Name: &name}); err != nil {
		t.Fatal(err)
	}
	if err := e.Store.SetDeviceTags(e.ctx, d.ID, []string{"line-4"}); err != nil {
		t.Fatal(err)
	}
	heard.mu.Lock()
	devs := slices.Clone(heard.devices)
	heard.mu.Unlock()
	if want := []string{org.ID + " " + d.ID}; !slices.Equal(devs, want) {
		t.Errorf("observer heard tag changes of %v, want %v", devs, want)
	}
	if e2.Cluster == nil {
		return
	}
	want = append(want, org.ID+" "+d.ID, org.ID+" "+d.ID)
	var got []string
	for len(got) < len(want) {
		select {
		case id := <-cluster:
			got = append(got, id)
		case <-time.After(10 * time.Second):
			t.Fatalf("the other handle's listener heard %v, want %v", got, want)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("the other handle's listener heard %v, want %v", got, want)
	}
}

// testDeviceAlerts: the engine's read of a device: its tags and status,
// and per rule its open alert and when its last alert resolved.
func testDeviceAlerts(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org, other := e.org("acme"), e.org("other")
	d := e.device(org.ID, "IG-500")
	st, err := e.Engine.DeviceAlerts(e.ctx, org.ID, d.ID)
	if err != nil || st.Status != resource.StatusProvisioning || len(st.Tags) != 0 || len(st.Rules) != 0 {
		t.Fatalf("DeviceAlerts of a new device = %+v, %v", st, err)
	}
	if _, err := e.Engine.DeviceAlerts(e.ctx, other.ID, d.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("another org's device: %v", err)
	}
	if err := e.Store.SetDeviceTags(e.ctx, d.ID, []string{"tank", "north"}); err != nil {
		t.Fatal(err)
	}
	e.online(d, 10*time.Second)
	resolved := e.alert(d, alert.RuleHighCPU, resource.AlertResolved)
	e.clock.Add(time.Second)
	active := e.alert(d, alert.RuleHighMem, resource.AlertActive)
	st, err = e.Engine.DeviceAlerts(e.ctx, org.ID, d.ID)
	cpu, mem := e.rule(org.ID, alert.RuleHighCPU), e.rule(org.ID, alert.RuleHighMem)
	if err != nil || st.Status != resource.StatusOnline || !slices.Equal(st.Tags, []string{"north", "tank"}) || st.Rules[cpu.ID].OpenID != "" || !st.Rules[cpu.ID].LastResolved.Equal(resolved.ResolvedAt.Time) ||
		st.Rules[mem.ID].OpenID != active.ID || !st.Rules[mem.ID].LastResolved.IsZero() {
		t.Errorf("DeviceAlerts = %+v, %v", st, err)
	}
}

// testRulesBounded: an organization has at most cloud.MaxRulesPerOrg live
// rules; deleting one makes room.
func testRulesBounded(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	rs := e.Store.Rules()
	var last resource.AlertRule
	for i := len(cloud.DefaultAlertRules()); i < cloud.MaxRulesPerOrg; i++ {
		var err error
		if last, err = rs.CreateRule(e.ctx, org.ID, cpuRule(fmt.Sprint("r", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rs.CreateRule(e.ctx, org.ID, cpuRule("one too many")); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Errorf("rule %d: %v", cloud.MaxRulesPerOrg+1, err)
	}
	if err := rs.DeleteRule(e.ctx, org.ID, last.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.CreateRule(e.ctx, org.ID, cpuRule("one too many")); err != nil {
		t.Errorf("after a delete: %v", err)
	}
	if rules, err := e.Engine.Rules(e.ctx, org.ID); err != nil || len(rules) != cloud.MaxRulesPerOrg {
		t.Errorf("engine reads %d rules, %v", len(rules), err)
	}
}
