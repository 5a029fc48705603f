package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/jsonstrict"
	"github.com/fleet/fleet/shared/resource"
)

// The alert rule and silence routes (DESIGN.md "Alert rules and
// notifications"), additive to the spec: /alert-rules, its preview, and
// /silences. The bodies are decoded strictly here; what a rule or a silence
// must be is checked by cloud.CompileRule, cloud.NewSilence.Check and the
// store, whose EINVALID messages name the field.

// Limits of the rule and silence lists: default and maximum page sizes.
const (
	rulesDefault, rulesMax       = 25, 100
	silencesDefault, silencesMax = 25, 100
)

// ruleBody is the body of POST /alert-rules and, with from and to, of
// POST /alert-rules/preview. Absent enabled, scope, notify and repeatEvery
// take their defaults: true, {}, [] and "0s". Scope and condition are
// decoded on their own (decodeMember), so that a problem inside one names
// it ("condition.treshold: unknown field").
type ruleBody struct {
	Name        string            `json:"name"`
	Enabled     *bool             `json:"enabled"`
	Severity    resource.Severity `json:"severity"`
	Scope       json.RawMessage   `json:"scope"`
	Condition   json.RawMessage   `json:"condition"`
	Notify      []string          `json:"notify"`
	RepeatEvery string            `json:"repeatEvery"`
}

// rule returns the body as a rule with its defaults.
func (b ruleBody) rule() (resource.AlertRule, error) {
	r := resource.AlertRule{Name: b.Name, Enabled: true, Severity: b.Severity, Notify: b.Notify, RepeatEvery: b.RepeatEvery}
	if b.Enabled != nil {
		r.Enabled = *b.Enabled
	}
	if err := decodeOptional("scope", b.Scope, &r.Scope); err != nil {
		return r, err
	}
	if err := decodeOptional("condition", b.Condition, &r.Condition); err != nil {
		return r, err
	}
	if r.Notify == nil {
		r.Notify = []string{}
	}
	if r.RepeatEvery == "" {
		r.RepeatEvery = "0s"
	}
	return r, nil
}

// previewBody is POST /alert-rules/preview: a rule body (name and severity
// optional) and the range, RFC 3339 timestamps.
type previewBody struct {
	ruleBody
	From string `json:"from"`
	To   string `json:"to"`
}

// Name and severity of a previewed rule that gives none: they change
// nothing in the answer.
const (
	previewName     = "preview"
	previewSeverity = resource.SeverityWarning
)

// rulePatchBody is PATCH /alert-rules/{id}; raw members tell "absent"
// from "null" (which no member takes).
type rulePatchBody struct {
	Name        json.RawMessage `json:"name"`
	Enabled     json.RawMessage `json:"enabled"`
	Severity    json.RawMessage `json:"severity"`
	Scope       json.RawMessage `json:"scope"`
	Condition   json.RawMessage `json:"condition"`
	Notify      json.RawMessage `json:"notify"`
	RepeatEvery json.RawMessage `json:"repeatEvery"`
}

// silenceBody is POST /silences.
type silenceBody struct {
	Scope   json.RawMessage `json:"scope"`
	From    string          `json:"from"`
	To      string          `json:"to"`
	Comment string          `json:"comment"`
}

// decodeBody refuses any query parameter, reads a JSON body (415, 413)
// and decodes it strictly into v.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if err := noQuery(r); err != nil {
		return err
	}
	body, err := readJSONBody(w, r)
	if err != nil {
		return err
	}
	if err := jsonstrict.Decode(body, v); err != nil {
		return bodyError(err)
	}
	return nil
}

// decodeMember decodes one member of a body strictly into v; its errors
// name the member (and the field inside it).
func decodeMember(name string, raw json.RawMessage, v any) error {
	if isNull(raw) {
		return cloud.Errorf(cloud.EINVALID, "%s: must not be null", name)
	}
	err := jsonstrict.Decode(raw, v)
	var fe *jsonstrict.FieldError
	if errors.As(err, &fe) {
		if fe.Field == "" {
			return cloud.Errorf(cloud.EINVALID, "%s: %s", name, fe.Msg)
		}
		return cloud.Errorf(cloud.EINVALID, "%s.%s: %s", name, fe.Field, fe.Msg)
	}
	return bodyError(err)
}

// decodeOptional is decodeMember for a member that may be absent (raw
// nil: v is left as it is).
func decodeOptional(name string, raw json.RawMessage, v any) error {
	if raw == nil {
		return nil
	}
	return decodeMember(name, raw, v)
}

// patchMember decodes a PATCH member into a new *dst; absent (raw nil)
// leaves *dst nil.
func patchMember[T any](name string, raw json.RawMessage, dst **T) error {
	if raw == nil {
		return nil
	}
	*dst = new(T)
	return decodeMember(name, raw, *dst)
}

// decodeRulePatch decodes a PATCH /alert-rules/{id} body; at least one
// member must be set.
func decodeRulePatch(w http.ResponseWriter, r *http.Request) (cloud.RulePatch, error) {
	var b rulePatchBody
	var p cloud.RulePatch
	if err := decodeBody(w, r, &b); err != nil {
		return p, err
	}
	if b.Name == nil && b.Enabled == nil && b.Severity == nil && b.Scope == nil && b.Condition == nil && b.Notify == nil && b.RepeatEvery == nil {
		return p, cloud.Errorf(cloud.EINVALID, "body must set at least one of name, enabled, severity, scope, condition, notify, repeatEvery")
	}
	for _, err := range []error{
		patchMember("name", b.Name, &p.Name),
		patchMember("enabled", b.Enabled, &p.Enabled),
		patchMember("severity", b.Severity, &p.Severity),
		patchMember("scope", b.Scope, &p.Scope),
		patchMember("condition", b.Condition, &p.Condition),
		patchMember("notify", b.Notify, &p.Notify),
		patchMember("repeatEvery", b.RepeatEvery, &p.RepeatEvery),
	} {
		if err != nil {
			return p, err
		}
	}
	if p.Notify != nil && *p.Notify == nil {
		*p.Notify = []string{}
	}
	return p, nil
}

// bodyTime parses an RFC 3339 member of a body; nil when absent.
func bodyTime(field, s string) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	t, err := resource.ParseTime(s)
	if err != nil {
		return nil, cloud.Errorf(cloud.EINVALID, "%s: must be an RFC 3339 timestamp, such as 2026-01-02T15:04:05.000Z (got %s)", field, bounded(s))
	}
	return &t, nil
}

// previewRange reads a preview's from and to: to defaults to now, from to
// cloud.DefaultPreviewRange before to; from must be before to, to not in
// the future, and the range at most cloud.MaxPreviewRange.
func previewRange(fromS, toS string, now time.Time) (from, to time.Time, err error) {
	f, err := bodyTime("from", fromS)
	if err != nil {
		return from, to, err
	}
	t, err := bodyTime("to", toS)
	if err != nil {
		return from, to, err
	}
	to = now.UTC().Truncate(time.Millisecond)
	if t != nil {
		if t.After(to) {
			return from, to, cloud.Errorf(cloud.EINVALID, "to: must not be in the future")
		}
		to = *t
	}
	from = to.Add(-cloud.DefaultPreviewRange)
	if f != nil {
		from = *f
	}
	switch {
	case !from.Before(to):
		return from, to, cloud.Errorf(cloud.EINVALID, "from: must be before to (from %s, to %s)", resource.FormatTime(from), resource.FormatTime(to))
	case to.Sub(from) > cloud.MaxPreviewRange:
		return from, to, cloud.Errorf(cloud.EINVALID, "from: the range is at most %d days", int(cloud.MaxPreviewRange/(24*time.Hour)))
	}
	return from, to, nil
}

// fixRule gives a rule's lists their empty value instead of null.
func fixRule(r *resource.AlertRule) {
	r.Notify = nonNil(r.Notify)
}

// created answers 201 {"data": v}, or returns err when there is one.
func created[T any](s *Server, w http.ResponseWriter, v T, err error) error {
	if err == nil {
		s.writeJSON(w, http.StatusCreated, resource.One[T]{Data: v})
	}
	return err
}

// noContent answers 204, or returns err when there is one.
func noContent(w http.ResponseWriter, err error) error {
	if err == nil {
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNoContent)
	}
	return err
}

func (s *Server) listRules(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	p := params{r: r}
	p.query("limit", "cursor")
	page := p.page(rulesDefault, rulesMax)
	if p.err != nil {
		return p.err
	}
	l, err := s.cfg.Rules.ListRules(r.Context(), key.OrgID, page)
	l.Data = nonNil(l.Data)
	for i := range l.Data {
		fixRule(&l.Data[i])
	}
	return replyBody(s, w, l, err)
}

// noQuery refuses any query parameter (400 validation_error naming it).
func noQuery(r *http.Request) error {
	p := params{r: r}
	p.query()
	return p.err
}

// routeID reads the {id} of a route (what names it in a 404) and no
// query parameter.
func routeID(r *http.Request, what string) (string, error) {
	p := params{r: r}
	id := p.pathID(what)
	p.query()
	return id, p.err
}

// actionID is routeID for a route that takes no body: one that is sent is
// ignored, up to MaxBodyBytes like every body (413 beyond).
func actionID(r *http.Request, what string) (string, error) {
	id, err := routeID(r, what)
	if err == nil && r.ContentLength > MaxBodyBytes {
		err = tooLarge()
	}
	return id, err
}

func (s *Server) getRule(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	id, err := routeID(r, "alert rule")
	if err != nil {
		return err
	}
	rule, err := s.cfg.Rules.Rule(r.Context(), key.OrgID, id)
	fixRule(&rule)
	return reply(s, w, rule, err)
}

func (s *Server) createRule(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	var b ruleBody
	if err := decodeBody(w, r, &b); err != nil {
		return err
	}
	in, err := b.rule()
	if err != nil {
		return err
	}
	rule, err := s.cfg.Rules.CreateRule(r.Context(), key.OrgID, in)
	fixRule(&rule)
	return created(s, w, rule, err)
}

func (s *Server) patchRule(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	id, err := routeID(r, "alert rule")
	if err != nil {
		return err
	}
	patch, err := decodeRulePatch(w, r)
	if err != nil {
		return err
	}
	rule, err := s.cfg.Rules.UpdateRule(r.Context(), key.OrgID, id, patch)
	fixRule(&rule)
	return reply(s, w, rule, err)
}

func (s *Server) deleteRule(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	id, err := routeID(r, "alert rule")
	if err != nil {
		return err
	}
	return noContent(w, s.cfg.Rules.DeleteRule(r.Context(), key.OrgID, id))
}

func (s *Server) previewRule(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	var b previewBody
	if err := decodeBody(w, r, &b); err != nil {
		return err
	}
	rule, err := b.rule()
	if err != nil {
		return err
	}
	from, to, err := previewRange(b.From, b.To, s.now())
	if err != nil {
		return err
	}
	if rule.Name == "" {
		rule.Name = previewName
	}
	if rule.Severity == "" {
		rule.Severity = previewSeverity
	}
	pv, err := s.cfg.Rules.PreviewRule(r.Context(), key.OrgID, rule, from, to)
	pv.Devices = nonNil(pv.Devices)
	return reply(s, w, pv, err)
}

func (s *Server) createSilence(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	var b silenceBody
	if err := decodeBody(w, r, &b); err != nil {
		return err
	}
	n := cloud.NewSilence{Comment: b.Comment, CreatedBy: "key:" + key.ID}
	if err := decodeOptional("scope", b.Scope, &n.Scope); err != nil {
		return err
	}
	from, err := bodyTime("from", b.From)
	if err != nil {
		return err
	}
	to, err := bodyTime("to", b.To)
	if err != nil {
		return err
	}
	if from != nil {
		n.From = *from
	}
	if to != nil {
		n.To = *to
	}
	if n, err = n.Check(s.now()); err != nil {
		return err
	}
	sil, err := s.cfg.Rules.CreateSilence(r.Context(), key.OrgID, n)
	return created(s, w, sil, err)
}

func (s *Server) listSilences(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	p := params{r: r}
	p.query("all", "limit", "cursor")
	var f cloud.SilenceFilter
	f.All = param(&p, "all", false, func(v string) (bool, error) {
		if v != "true" && v != "false" {
			return false, cloud.Errorf(cloud.EINVALID, "all: must be true or false (got %s)", bounded(v))
		}
		return v == "true", nil
	})
	f.Page = p.page(silencesDefault, silencesMax)
	if p.err != nil {
		return p.err
	}
	l, err := s.cfg.Rules.ListSilences(r.Context(), key.OrgID, f)
	l.Data = nonNil(l.Data)
	return replyBody(s, w, l, err)
}

func (s *Server) deleteSilence(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	id, err := routeID(r, "silence")
	if err != nil {
		return err
	}
	return noContent(w, s.cfg.Rules.DeleteSilence(r.Context(), key.OrgID, id))
}
