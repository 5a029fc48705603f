package panel

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// Alerts → Rules: the organization's alert rules, a form per rule with a
// preview of what it would have done over the last week (before saving),
// enable, disable and delete (DESIGN.md "Alert rules and notifications").

// rulesPageSize is the number of rules per page of the list.
const rulesPageSize = 100

// maxPreviewRows bounds the devices a preview lists (the busiest first).
const maxPreviewRows = 100

// ruleForm is a rule as its form holds it: text as typed, so that a
// preview or an error gives back what the person wrote.
type ruleForm struct {
	Name, Severity string
	// ScopeKind is "all", "devices" or "tags"; DeviceIDs and Tags are
	// lists separated by commas or spaces.
	ScopeKind, DeviceIDs, Tags string
	Kind                       string
	// Source is "metric.<name>" or "point" (then PointID).
	Source, PointID, Op, Value, Clear, For string
	After                                  string
	Type, ResolveOn                        string
	Status, StatusFor                      string
	Notify                                 []string
	RepeatEvery                            string
	Enabled                                bool
}

// newRuleForm is the form of a rule not yet written.
func newRuleForm() ruleForm {
	return ruleForm{Severity: string(resource.SeverityWarning), ScopeKind: "all", Kind: resource.ConditionThreshold,
		Source: "metric.cpuPct", Op: ">", For: "5m", After: "5m", StatusFor: "1m", Status: string(resource.StatusError),
		RepeatEvery: "0s", Enabled: true}
}

// ruleFormOf is the form of a stored rule.
func ruleFormOf(r resource.AlertRule) ruleForm {
	f := newRuleForm()
	f.Name, f.Severity, f.Enabled, f.RepeatEvery = r.Name, string(r.Severity), r.Enabled, r.RepeatEvery
	f.Notify = slices.Clone(r.Notify)
	switch {
	case len(r.Scope.DeviceIDs) > 0:
		f.ScopeKind, f.DeviceIDs = "devices", strings.Join(r.Scope.DeviceIDs, ", ")
	case len(r.Scope.Tags) > 0:
		f.ScopeKind, f.Tags = "tags", strings.Join(r.Scope.Tags, ", ")
	}
	c := r.Condition
	f.Kind = c.Kind
	switch c.Kind {
	case resource.ConditionThreshold:
		f.Source, f.Op, f.For = c.Source, c.Op, c.For
		if id, ok := strings.CutPrefix(c.Source, "point."); ok {
			f.Source, f.PointID = "point", id
		}
		f.Value, f.Clear = number(c.Value), number(c.Clear)
	case resource.ConditionOffline:
		f.After = c.After
	case resource.ConditionEvent:
		f.Type, f.ResolveOn = c.Type, c.ResolveOn
	case resource.ConditionStatus:
		f.Status, f.StatusFor = string(c.Status), c.For
	}
	return f
}

func number(v *float64) string {
	if v == nil {
		return ""
	}
	return strconv.FormatFloat(*v, 'g', -1, 64)
}

// ruleFormFrom reads the posted form.
func ruleFormFrom(r *http.Request) ruleForm {
	v := func(k string) string { return strings.TrimSpace(r.PostFormValue(k)) }
	return ruleForm{Name: v("name"), Severity: v("severity"), ScopeKind: v("scope"), DeviceIDs: v("deviceIds"), Tags: v("tags"),
		Kind: v("kind"), Source: v("source"), PointID: v("pointId"), Op: v("op"), Value: v("value"), Clear: v("clear"), For: v("for"),
		After: v("after"), Type: v("type"), ResolveOn: v("resolveOn"), Status: v("status"), StatusFor: v("statusFor"),
		Notify: r.PostForm["notify"], RepeatEvery: v("repeatEvery"), Enabled: r.PostFormValue("enabled") != ""}
}

// firstOnBadCursor lists the page *p, or the first page when its cursor is
// not one the store gave (a stale or edited link); *p's cursor is then
// cleared.
func firstOnBadCursor[T any](p *cloud.Page, list func(cloud.Page) (T, error)) (T, error) {
	v, err := list(*p)
	if cloud.ErrorCode(err) == cloud.ECURSOR {
		p.Cursor = ""
		v, err = list(*p)
	}
	return v, err
}

// formScope reads a form's scope fields (template "scopefields"): kind
// "all" (or empty), "devices" with the device ids typed, or "tags" with the
// tags typed; a kind without any, or an unknown kind, is an error by field
// in errs.
func formScope(kind, deviceIDs, tags string, errs map[string]string) resource.RuleScope {
	var sc resource.RuleScope
	switch kind {
	case "devices":
		if sc.DeviceIDs = splitList(deviceIDs); len(sc.DeviceIDs) == 0 {
			errs["deviceIds"] = "scope.deviceIds: give at least one device id, or choose all devices"
		}
	case "tags":
		if sc.Tags = splitList(tags); len(sc.Tags) == 0 {
			errs["tags"] = "scope.tags: give at least one tag, or choose all devices"
		}
	case "all", "":
	default:
		errs["scope"] = "scope: choose all devices, device ids or tags"
	}
	return sc
}

// splitList splits a list typed in one field: commas or white space.
func splitList(s string) []string {
	return strings.FieldsFunc(s, func(c rune) bool { return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r' })
}

// rule is the form as the rule service takes it; errors of fields the
// panel parses itself (numbers) are returned by form field.
func (f ruleForm) rule() (resource.AlertRule, map[string]string) {
	errs := map[string]string{}
	r := resource.AlertRule{Name: f.Name, Severity: resource.Severity(f.Severity), Enabled: f.Enabled,
		Notify: slices.Clone(f.Notify), RepeatEvery: f.RepeatEvery}
	if r.Notify == nil {
		r.Notify = []string{}
	}
	r.Scope = formScope(f.ScopeKind, f.DeviceIDs, f.Tags, errs)
	c := resource.RuleCondition{Kind: f.Kind}
	switch f.Kind {
	case resource.ConditionThreshold:
		c.Source, c.Op, c.For = f.Source, f.Op, f.For
		if f.Source == "point" {
			c.Source = "point." + f.PointID
			if f.PointID == "" {
				errs["pointId"] = "condition.source: give the point's id (<channelId>.<name>, for example rs485-1.boiler_temp)"
			}
		}
		c.Value = parseNumber(f.Value, "condition.value", "value", true, errs)
		c.Clear = parseNumber(f.Clear, "condition.clear", "clear", false, errs)
	case resource.ConditionOffline:
		c.After = f.After
	case resource.ConditionEvent:
		c.Type, c.ResolveOn = f.Type, f.ResolveOn
	case resource.ConditionStatus:
		c.Status, c.For = resource.DeviceStatus(f.Status), f.StatusFor
	}
	r.Condition = c
	return r, errs
}

func parseNumber(s, name, key string, required bool, errs map[string]string) *float64 {
	if s == "" {
		if required {
			errs[key] = name + ": a number is required"
		}
		return nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		errs[key] = fmt.Sprintf("%s: %q is not a number", name, clip(s))
		return nil
	}
	return &v
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// ruleErrorField is the form field a rule error names ("condition.clear:
// ..." is beside Clear); "" when it names none of them.
func ruleErrorField(msg, kind string) string {
	name := errorField(msg)
	switch name {
	case "name", "severity", "scope", "notify":
		return name
	case "scope.deviceIds":
		return "deviceIds"
	case "scope.tags":
		return "tags"
	case "repeatEvery":
		return "repeatEvery"
	case "condition.kind":
		return "kind"
	case "condition.source":
		if strings.Contains(msg, "point") && !strings.Contains(msg, "metric.<name>") {
			return "pointId"
		}
		return "source"
	case "condition.op", "condition.value", "condition.clear", "condition.after", "condition.type",
		"condition.resolveOn", "condition.status":
		return strings.TrimPrefix(name, "condition.")
	case "condition.for":
		if kind == resource.ConditionStatus {
			return "statusFor"
		}
		return "for"
	case "condition":
		return "kind"
	}
	return ""
}

// errorField is the field an EINVALID message starts with ("scope.tags[1]:
// ..." is scope.tags), or "".
func errorField(msg string) string {
	end := strings.IndexAny(msg, ": ")
	if end < 0 {
		return ""
	}
	name := msg[:end]
	if i := strings.IndexByte(name, '['); i >= 0 {
		name = name[:i]
	}
	return name
}

type previewRow struct {
	DeviceID, Name string
	Opened         int
	OpenFor        string
}

// previewView is a rule's preview as the form shows it.
type previewView struct {
	From, To time.Time
	Opened   int
	Devices  int
	Rows     []previewRow
	More     int // devices not listed
}

type kindOption struct {
	Value, Label string
}

var conditionKinds = []kindOption{
	{resource.ConditionThreshold, "threshold: metric or point"},
	{resource.ConditionOffline, "offline: stops reporting"},
	{resource.ConditionEvent, "event: an event arrives"},
	{resource.ConditionStatus, "status: stays in a status"},
}

// metricLabels names the metric sources of threshold rules.
var metricLabels = map[string]string{
	"cpuPct": "CPU (%)", "memPct": "memory (%)", "diskUsedPct": "disk used (%)", "tempCpu": "CPU temperature (°C)", "loadAvg1": "load average (1 min)",
}

type ruleData struct {
	ID       string // "" for a new rule
	Rule     *resource.AlertRule
	Form     ruleForm
	Errors   map[string]string
	Editable bool
	Action   string
	Channels []resource.NotificationChannel
	Preview  *previewView

	Severities []resource.Severity
	Kinds      []kindOption
	Sources    []option
	Ops        []string
	Statuses   []resource.DeviceStatus
}

func (s *Server) ruleData(ctx context.Context, rq *request, id string, f ruleForm) (*ruleData, error) {
	chans, err := s.cfg.Rules.ListChannels(ctx, rq.User.OrgID)
	if err != nil {
		return nil, err
	}
	d := &ruleData{ID: id, Form: f, Errors: map[string]string{}, Editable: rq.User.Role.Can(cloud.PermRules),
		Action: "/panel/alerts/rules", Channels: chans, Severities: resource.Severities, Kinds: conditionKinds,
		Ops: cloud.RuleOps, Statuses: cloud.RuleStatuses}
	if id != "" {
		d.Action = "/panel/alerts/rules/" + url.PathEscape(id) + "/save"
	}
	for _, m := range cloud.RuleMetrics {
		d.Sources = append(d.Sources, option{Value: "metric." + m, Label: "metric." + m + " — " + metricLabels[m]})
	}
	d.Sources = append(d.Sources, option{Value: "point", Label: "a point (give its id below)"})
	return d, nil
}

type ruleRow struct {
	resource.AlertRule
	Condition, Scope, Notify string
}

type rulesData struct {
	Rules     []ruleRow
	NextURL   string
	FirstURL  string
	CanEdit   bool
	NoChannel bool
}

// rulesPage lists the organization's rules: name, condition in words,
// scope, severity, channels and whether it is enabled.
func (s *Server) rulesPage(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	org := rq.User.OrgID
	p := cloud.Page{Limit: rulesPageSize, Cursor: r.URL.Query().Get("after")}
	list, err := firstOnBadCursor(&p, func(p cloud.Page) (resource.List[resource.AlertRule], error) {
		return s.cfg.Rules.ListRules(ctx, org, p)
	})
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	chans, err := s.cfg.Rules.ListChannels(ctx, org)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	names := map[string]string{}
	for _, c := range chans {
		names[c.ID] = c.Name
	}
	d := rulesData{CanEdit: rq.User.Role.Can(cloud.PermRules), NoChannel: len(chans) == 0}
	words := s.scopeWords(ctx, org)
	for _, rule := range list.Data {
		row := ruleRow{AlertRule: rule, Condition: describeCondition(rule.Condition), Scope: words.say(rule.Scope)}
		var to []string
		for _, id := range rule.Notify {
			to = append(to, cmp.Or(names[id], id))
		}
		row.Notify = strings.Join(to, ", ")
		d.Rules = append(d.Rules, row)
	}
	if list.Pagination.HasMore && list.Pagination.NextCursor != nil {
		d.NextURL = "/panel/alerts/rules?after=" + url.QueryEscape(*list.Pagination.NextCursor)
	}
	if p.Cursor != "" {
		d.FirstURL = "/panel/alerts/rules"
	}
	s.render(w, r, rq, http.StatusOK, "rules", "Alert rules", d)
}

// describeCondition says a condition in words: "metric.cpuPct > 90 for
// 5m, clears below 80".
func describeCondition(c resource.RuleCondition) string {
	switch c.Kind {
	case resource.ConditionThreshold:
		out := c.Source + " " + c.Op + " " + number(c.Value)
		if c.For != "" && c.For != "0s" {
			out += " for " + c.For
		}
		if c.Clear != nil && c.Value != nil && *c.Clear != *c.Value {
			side := "below"
			if strings.HasPrefix(c.Op, "<") {
				side = "above"
			}
			out += ", clears " + side + " " + number(c.Clear)
		}
		return out
	case resource.ConditionOffline:
		return "offline for " + c.After
	case resource.ConditionEvent:
		out := "event " + c.Type
		if c.ResolveOn != "" {
			out += ", resolved by event " + c.ResolveOn
		}
		return out
	case resource.ConditionStatus:
		out := "status " + string(c.Status)
		if c.For != "" && c.For != "0s" {
			out += " for " + c.For
		}
		return out
	}
	return c.Kind
}

// scopeWords says scopes in words, naming up to three devices of a list
// (their ids when they are not the organization's), each looked up once.
type scopeWords struct {
	s     *Server
	ctx   context.Context
	org   string
	names map[string]string
}

func (s *Server) scopeWords(ctx context.Context, org string) *scopeWords {
	return &scopeWords{s: s, ctx: ctx, org: org, names: map[string]string{}}
}

func (w *scopeWords) say(sc resource.RuleScope) string {
	if len(sc.DeviceIDs) == 0 {
		return describeScope(sc)
	}
	shown := make([]string, 0, 3)
	for _, id := range sc.DeviceIDs[:min(3, len(sc.DeviceIDs))] {
		name, seen := w.names[id]
		if !seen {
			name = id
			if dev, err := w.s.cfg.Devices.Device(w.ctx, w.org, id); err == nil {
				name = dev.Name
			}
			w.names[id] = name
		}
		shown = append(shown, name)
	}
	out := fmt.Sprintf("%d device%s: %s", len(sc.DeviceIDs), plural(len(sc.DeviceIDs)), strings.Join(shown, ", "))
	if more := len(sc.DeviceIDs) - len(shown); more > 0 {
		out += fmt.Sprintf(" and %d more", more)
	}
	return out
}

// describeScope says a scope in words, devices by id.
func describeScope(sc resource.RuleScope) string {
	switch {
	case len(sc.DeviceIDs) > 0:
		return fmt.Sprintf("%d device%s: %s", len(sc.DeviceIDs), plural(len(sc.DeviceIDs)), shortList(sc.DeviceIDs, 3))
	case len(sc.Tags) > 0:
		return "devices tagged " + strings.Join(sc.Tags, " and ")
	}
	return "all devices"
}

func shortList(l []string, n int) string {
	if len(l) <= n {
		return strings.Join(l, ", ")
	}
	return strings.Join(l[:n], ", ") + fmt.Sprintf(" and %d more", len(l)-n)
}

// newRulePage is the form of a new rule.
func (s *Server) newRulePage(w http.ResponseWriter, r *http.Request, rq *request) {
	d, err := s.ruleData(r.Context(), rq, "", newRuleForm())
	s.show(w, r, rq, "rule", "New alert rule", d, err)
}

// rulePage is a rule's form (read-only for roles that may not edit rules).
func (s *Server) rulePage(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	rule, err := s.cfg.Rules.Rule(ctx, rq.User.OrgID, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	d, err := s.ruleData(ctx, rq, rule.ID, ruleFormOf(rule))
	if d != nil {
		d.Rule = &rule
	}
	s.show(w, r, rq, "rule", "Alert rule "+rule.Name, d, err)
}

// createRule previews (action=preview) or creates a rule.
func (s *Server) createRule(w http.ResponseWriter, r *http.Request, rq *request) {
	s.submitRule(w, r, rq, nil)
}

// saveRule previews (action=preview) or saves a rule's form.
func (s *Server) saveRule(w http.ResponseWriter, r *http.Request, rq *request) {
	rule, err := s.cfg.Rules.Rule(r.Context(), rq.User.OrgID, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	s.submitRule(w, r, rq, &rule)
}

// submitRule handles the rule form: "Preview" shows what the rule would
// have done over the last 7 days and keeps the form as typed; "Save rule"
// creates the rule (old nil) or updates old. A field's error is shown
// beside it and nothing is saved.
func (s *Server) submitRule(w http.ResponseWriter, r *http.Request, rq *request, old *resource.AlertRule) {
	ctx := r.Context()
	org := rq.User.OrgID
	f := ruleFormFrom(r)
	id, title := "", "New alert rule"
	if old != nil {
		id, title = old.ID, "Alert rule "+old.Name
	}
	d, err := s.ruleData(ctx, rq, id, f)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	d.Rule = old
	in, errs := f.rule()
	if len(errs) > 0 {
		d.Errors = errs
		s.renderRuleForm(w, r, rq, title, d)
		return
	}
	if r.PostFormValue("action") == "preview" {
		to := s.now().UTC().Truncate(time.Second)
		p, err := s.cfg.Rules.PreviewRule(ctx, org, in, to.Add(-cloud.DefaultPreviewRange), to)
		if s.ruleError(w, r, rq, d, err) {
			return
		}
		d.Preview = s.previewView(ctx, org, p)
		s.render(w, r, rq, http.StatusOK, "rule", title, d)
		return
	}
	var saved resource.AlertRule
	if old == nil {
		saved, err = s.cfg.Rules.CreateRule(ctx, org, in)
	} else {
		saved, err = s.cfg.Rules.UpdateRule(ctx, org, old.ID, cloud.RulePatch{Name: &in.Name, Enabled: &in.Enabled, Severity: &in.Severity,
			Scope: &in.Scope, Condition: &in.Condition, Notify: &in.Notify, RepeatEvery: &in.RepeatEvery})
	}
	if s.ruleError(w, r, rq, d, err) {
		return
	}
	verb := "created"
	if old != nil {
		verb = "saved"
	}
	s.log.Info("panel: alert rule "+verb, "rule_id", saved.ID, "user_id", rq.User.ID, "org_id", org)
	s.flash(r, "Rule “"+saved.Name+"” "+verb+".")
	http.Redirect(w, r, "/panel/alerts/rules", http.StatusSeeOther)
}

// ruleError answers a refused rule (its field's error beside the field, or
// above the form) or a failure; false when err is nil.
func (s *Server) ruleError(w http.ResponseWriter, r *http.Request, rq *request, d *ruleData, err error) bool {
	switch cloud.ErrorCode(err) {
	case cloud.EINTERNAL:
		if err == nil {
			return false
		}
		s.fail(w, r, rq, err)
	case cloud.EINVALID, cloud.ECONFLICT:
		msg := cloud.ErrorMessage(err)
		d.Errors[ruleErrorField(msg, d.Form.Kind)] = msg
		s.renderRuleForm(w, r, rq, "", d)
	default:
		s.fail(w, r, rq, err)
	}
	return true
}

// renderRuleForm renders the form with its errors: 400, which htmx swaps
// in too (the form carries data-swap-errors).
func (s *Server) renderRuleForm(w http.ResponseWriter, r *http.Request, rq *request, title string, d *ruleData) {
	if title == "" {
		title = "New alert rule"
		if d.Rule != nil {
			title = "Alert rule " + d.Rule.Name
		}
	}
	s.render(w, r, rq, http.StatusBadRequest, "rule", title, d)
}

// previewView orders a preview's devices (most alerts first) and names
// them.
func (s *Server) previewView(ctx context.Context, org string, p resource.RulePreview) *previewView {
	v := &previewView{From: p.From.Time, To: p.To.Time, Opened: p.Opened}
	devs := slices.Clone(p.Devices)
	slices.SortFunc(devs, func(a, b resource.RulePreviewDevice) int {
		return cmp.Or(cmp.Compare(b.Opened, a.Opened), cmp.Compare(b.OpenForMs, a.OpenForMs), cmp.Compare(a.DeviceID, b.DeviceID))
	})
	for _, dv := range devs {
		if dv.Opened == 0 && dv.OpenForMs == 0 {
			continue
		}
		v.Devices++
		if len(v.Rows) == maxPreviewRows {
			v.More++
			continue
		}
		row := previewRow{DeviceID: dv.DeviceID, Opened: dv.Opened, OpenFor: span(time.Duration(dv.OpenForMs) * time.Millisecond)}
		if dev, err := s.cfg.Devices.Device(ctx, org, dv.DeviceID); err == nil {
			row.Name = dev.Name
		}
		v.Rows = append(v.Rows, row)
	}
	return v
}

// span says a duration in words a person reads: "2 h 5 min", "40 s".
func span(d time.Duration) string {
	switch {
	case d <= 0:
		return "0 s"
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d/time.Minute))
	case d < 48*time.Hour:
		h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
		if m == 0 {
			return fmt.Sprintf("%d h", h)
		}
		return fmt.Sprintf("%d h %d min", h, m)
	}
	return fmt.Sprintf("%d d %d h", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// enableRule and disableRule switch a rule on or off (disabling resolves
// its open alerts).
func (s *Server) enableRule(w http.ResponseWriter, r *http.Request, rq *request) {
	s.switchRule(w, r, rq, true)
}

func (s *Server) disableRule(w http.ResponseWriter, r *http.Request, rq *request) {
	s.switchRule(w, r, rq, false)
}

func (s *Server) switchRule(w http.ResponseWriter, r *http.Request, rq *request, on bool) {
	rule, err := s.cfg.Rules.UpdateRule(r.Context(), rq.User.OrgID, r.PathValue("id"), cloud.RulePatch{Enabled: &on})
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	state := map[bool]string{true: "enabled", false: "disabled: its open alerts are resolved"}[on]
	s.log.Info("panel: alert rule switched", "rule_id", rule.ID, "enabled", on, "user_id", rq.User.ID, "org_id", rq.User.OrgID)
	s.flash(r, "Rule “"+rule.Name+"” "+state+".")
	http.Redirect(w, r, "/panel/alerts/rules", http.StatusSeeOther)
}

// deleteRule asks for confirmation, then (confirm=yes) deletes the rule;
// its open alerts are resolved.
func (s *Server) deleteRule(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	rule, err := s.cfg.Rules.Rule(ctx, rq.User.OrgID, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	if s.askFirst(w, r, rq, "Delete alert rule", confirmData{
		Heading: "Delete the rule “" + rule.Name + "”?",
		Message: "Its open alerts are resolved now and it opens no more. This cannot be undone.",
		Action:  "/panel/alerts/rules/" + url.PathEscape(rule.ID) + "/delete", Button: "Delete rule",
		Cancel: "/panel/alerts/rules",
	}) {
		return
	}
	if err := s.cfg.Rules.DeleteRule(ctx, rq.User.OrgID, rule.ID); err != nil {
		s.fail(w, r, rq, err)
		return
	}
	s.log.Info("panel: alert rule deleted", "rule_id", rule.ID, "user_id", rq.User.ID, "org_id", rq.User.OrgID)
	s.flash(r, "Rule “"+rule.Name+"” deleted.")
	http.Redirect(w, r, "/panel/alerts/rules", http.StatusSeeOther)
}
