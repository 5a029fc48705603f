package cloud

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// Bounds of rules, silences and notification channels.
const (
	MaxRulesPerOrg      = 1000
	MaxScopeDevices     = 1000
	MaxScopeTags        = 16
	MaxRuleNotify       = 16
	MaxChannelsPerOrg   = 100
	MaxSilencesPerOrg   = 1000
	MaxCommentLength    = 2000
	MaxChannelTarget    = 2000
	MaxEmailRecipients  = 20
	MaxRuleFor          = 24 * time.Hour
	MinRuleAfter        = 30 * time.Second
	MinRuleRepeat       = 5 * time.Minute
	MaxSilenceLength    = 90 * 24 * time.Hour
	PlannedWorkHold     = 15 * time.Minute // REBOOTING or UPDATING holds offline alerts this long
	DefaultPreviewRange = 7 * 24 * time.Hour
	MaxPreviewRange     = 31 * 24 * time.Hour
)

// Metric sources of threshold rules ("metric." + the sample's JSON field).
var RuleMetrics = []string{"cpuPct", "memPct", "diskUsedPct", "tempCpu", "loadAvg1"}

// RuleOps are the comparison operators of threshold rules.
var RuleOps = []string{">", ">=", "<", "<="}

// RuleStatuses are the statuses a status rule can watch.
var RuleStatuses = []resource.DeviceStatus{resource.StatusError, resource.StatusUpdating, resource.StatusRebooting}

// TagPattern is what a device tag looks like (DESIGN.md "Fleet operations").
var TagPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.:-]{0,31}$`)

// eventTypePattern is what an event type a rule watches looks like.
var eventTypePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.:-]{0,63}$`)

// AlertRule is a rule as the alert engine and the stores use it: the
// resource's fields parsed (CompileRule).
type AlertRule struct {
	ID       string
	OrgID    string
	Name     string
	Severity resource.Severity
	Enabled  bool
	Scope    resource.RuleScope
	Cond     RuleCondition
	Notify   []string
	Repeat   time.Duration
	// CreatedAt and UpdatedAt are the rule's times (zero before stored).
	CreatedAt, UpdatedAt time.Time
}

// RuleCondition is a parsed resource.RuleCondition.
type RuleCondition struct {
	Kind string // resource.Condition*
	// threshold
	Source  string // "metric.cpuPct" or "point.<pointId>"
	Metric  string // "cpuPct"... when Source is a metric, else ""
	PointID string // when Source is a point, else ""
	Op      string
	Value   float64
	Clear   float64
	// For: threshold and status rules.
	For time.Duration
	// offline
	After time.Duration
	// event
	EventType, ResolveOn string
	// status
	Status resource.DeviceStatus
}

// Breaches reports whether v is on the alerting side of a threshold
// condition.
func (c RuleCondition) Breaches(v float64) bool {
	switch c.Op {
	case ">":
		return v > c.Value
	case ">=":
		return v >= c.Value
	case "<":
		return v < c.Value
	case "<=":
		return v <= c.Value
	}
	return false
}

// Clears reports whether v has passed a threshold condition's clear value
// (strictly on the safe side of it): an open alert resolves.
func (c RuleCondition) Clears(v float64) bool {
	switch c.Op {
	case ">", ">=":
		return v < c.Clear
	case "<", "<=":
		return v > c.Clear
	}
	return false
}

// EventType is the type of the device event stored when an alert of the
// rule opens: "alert." and the rule's name made a slug (the defaults keep
// alert.high_cpu, alert.device_offline ...).
func (r AlertRule) EventType() string {
	var b strings.Builder
	b.WriteString("alert.")
	under := false
	for _, c := range strings.ToLower(r.Name) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			if under && b.Len() > len("alert.") {
				b.WriteByte('_')
			}
			under = false
			b.WriteRune(c)
		case c == '_':
			under = true
		default:
			under = true
		}
		if b.Len() >= 64 {
			break
		}
	}
	if b.Len() == len("alert.") {
		return "alert.rule"
	}
	return b.String()
}

// InScope reports whether a device (its id and tags) is in the rule's
// scope.
func InScope(s resource.RuleScope, deviceID string, tags []string) bool {
	switch {
	case len(s.DeviceIDs) > 0:
		return slices.Contains(s.DeviceIDs, deviceID)
	case len(s.Tags) > 0:
		for _, t := range s.Tags {
			if !slices.Contains(tags, t) {
				return false
			}
		}
		return true
	}
	return true
}

// Resource returns the rule as the API shows it.
func (r AlertRule) Resource() resource.AlertRule {
	c := resource.RuleCondition{Kind: r.Cond.Kind}
	switch r.Cond.Kind {
	case resource.ConditionThreshold:
		v, cl := r.Cond.Value, r.Cond.Clear
		c.Source, c.Op, c.Value, c.Clear, c.For = r.Cond.Source, r.Cond.Op, &v, &cl, FormatRuleDuration(r.Cond.For)
	case resource.ConditionOffline:
		c.After = FormatRuleDuration(r.Cond.After)
	case resource.ConditionEvent:
		c.Type, c.ResolveOn = r.Cond.EventType, r.Cond.ResolveOn
	case resource.ConditionStatus:
		c.Status, c.For = r.Cond.Status, FormatRuleDuration(r.Cond.For)
	}
	notify := r.Notify
	if notify == nil {
		notify = []string{}
	}
	return resource.AlertRule{ID: r.ID, Name: r.Name, Enabled: r.Enabled, Severity: r.Severity, Scope: r.Scope,
		Condition: c, Notify: notify, RepeatEvery: FormatRuleDuration(r.Repeat),
		CreatedAt: resource.T(r.CreatedAt), UpdatedAt: resource.T(r.UpdatedAt)}
}

// FormatRuleDuration writes d as rules show it: "0s", "90s", "5m", "1h30m".
func FormatRuleDuration(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	h, m, sec := int64(d/time.Hour), int64(d%time.Hour/time.Minute), d%time.Minute
	var b strings.Builder
	if h > 0 {
		fmt.Fprintf(&b, "%dh", h)
	}
	if m > 0 {
		fmt.Fprintf(&b, "%dm", m)
	}
	if sec > 0 {
		if sec%time.Second == 0 {
			fmt.Fprintf(&b, "%ds", int64(sec/time.Second))
		} else {
			b.WriteString(sec.String())
		}
	}
	return b.String()
}

// parseRuleDuration parses a rule's duration field within [lo, hi]; "" is
// def.
func parseRuleDuration(field, s string, def, lo, hi time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, Errorf(EINVALID, "%s: %q is not a duration (for example \"90s\", \"5m\", \"1h\")", field, s)
	}
	if d < lo || d > hi {
		return 0, Errorf(EINVALID, "%s: %s is outside %s..%s", field, s, FormatRuleDuration(lo), FormatRuleDuration(hi))
	}
	if d%time.Second != 0 {
		return 0, Errorf(EINVALID, "%s: %s is not a whole number of seconds", field, s)
	}
	return d, nil
}

// ValidRuleName checks a rule's name: printable text of 1..200 bytes.
func ValidRuleName(field, name string) (string, error) { return ValidName(field, name) }

// CompileRule checks a rule body and parses it. Errors are EINVALID naming
// the field ("condition.op", "condition.clear", "scope.tags[1]" ...).
// What needs the store (a point no device of the scope has, an unknown
// notification channel or device) is checked by the store.
func CompileRule(orgID string, in resource.AlertRule) (AlertRule, error) {
	name, err := ValidRuleName("name", in.Name)
	if err != nil {
		return AlertRule{}, err
	}
	r := AlertRule{ID: in.ID, OrgID: orgID, Name: name, Enabled: in.Enabled, Severity: in.Severity,
		CreatedAt: in.CreatedAt.Time, UpdatedAt: in.UpdatedAt.Time}
	if !in.Severity.Valid() {
		return AlertRule{}, Errorf(EINVALID, "severity: must be one of INFO, WARNING, ERROR, CRITICAL")
	}
	if r.Scope, err = CheckScope("scope", in.Scope); err != nil {
		return AlertRule{}, err
	}
	if r.Cond, err = compileCondition(in.Condition); err != nil {
		return AlertRule{}, err
	}
	if len(in.Notify) > MaxRuleNotify {
		return AlertRule{}, Errorf(EINVALID, "notify: at most %d channels", MaxRuleNotify)
	}
	for i, id := range in.Notify {
		if id == "" || len(id) > 64 || slices.Contains(in.Notify[:i], id) {
			return AlertRule{}, Errorf(EINVALID, "notify[%d]: not a channel id, or named twice", i)
		}
	}
	r.Notify = slices.Clone(in.Notify)
	if in.RepeatEvery != "" && in.RepeatEvery != "0s" {
		if r.Repeat, err = parseRuleDuration("repeatEvery", in.RepeatEvery, 0, MinRuleRepeat, MaxRuleFor); err != nil {
			return AlertRule{}, err
		}
	}
	return r, nil
}

// CheckScope checks a scope (of a rule or a silence) and returns it with
// its lists sorted.
func CheckScope(field string, s resource.RuleScope) (resource.RuleScope, error) {
	if len(s.DeviceIDs) > 0 && len(s.Tags) > 0 {
		return s, Errorf(EINVALID, "%s: give deviceIds or tags, not both", field)
	}
	if len(s.DeviceIDs) > MaxScopeDevices {
		return s, Errorf(EINVALID, "%s.deviceIds: at most %d devices", field, MaxScopeDevices)
	}
	if len(s.Tags) > MaxScopeTags {
		return s, Errorf(EINVALID, "%s.tags: at most %d tags", field, MaxScopeTags)
	}
	for i, id := range s.DeviceIDs {
		if id == "" || len(id) > 64 || !utf8.ValidString(id) || strings.IndexFunc(id, unicode.IsControl) >= 0 {
			return s, Errorf(EINVALID, "%s.deviceIds[%d]: not a device id", field, i)
		}
	}
	for i, t := range s.Tags {
		if !TagPattern.MatchString(t) {
			return s, Errorf(EINVALID, "%s.tags[%d]: %q is not a tag (lowercase letters, digits and _.:- , at most 32)", field, i, clip(t))
		}
	}
	out := resource.RuleScope{DeviceIDs: slices.Compact(slices.Sorted(slices.Values(s.DeviceIDs))),
		Tags: slices.Compact(slices.Sorted(slices.Values(s.Tags)))}
	if len(out.DeviceIDs) == 0 {
		out.DeviceIDs = nil
	}
	if len(out.Tags) == 0 {
		out.Tags = nil
	}
	return out, nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

func compileCondition(in resource.RuleCondition) (RuleCondition, error) {
	c := RuleCondition{Kind: in.Kind}
	var err error
	switch in.Kind {
	case resource.ConditionThreshold:
		c.Source = in.Source
		switch {
		case strings.HasPrefix(in.Source, "metric."):
			c.Metric = strings.TrimPrefix(in.Source, "metric.")
			if !slices.Contains(RuleMetrics, c.Metric) {
				return c, Errorf(EINVALID, "condition.source: unknown metric %q (metric.cpuPct, metric.memPct, metric.diskUsedPct, metric.tempCpu, metric.loadAvg1)", clip(c.Metric))
			}
		case strings.HasPrefix(in.Source, "point."):
			c.PointID = strings.TrimPrefix(in.Source, "point.")
			ch, name, ok := serialcfg.SplitPointID(c.PointID)
			if !ok || !serialcfg.ValidPointName(name) || ch == "" || len(c.PointID) > 128 {
				return c, Errorf(EINVALID, "condition.source: %q is not a point id (point.<channelId>.<name>)", clip(in.Source))
			}
		case in.Source == "":
			return c, Errorf(EINVALID, "condition.source is required (metric.<name> or point.<pointId>)")
		default:
			return c, Errorf(EINVALID, "condition.source: unknown source %q (metric.<name> or point.<pointId>)", clip(in.Source))
		}
		if !slices.Contains(RuleOps, in.Op) {
			return c, Errorf(EINVALID, "condition.op: must be one of >, >=, <, <=")
		}
		c.Op = in.Op
		if in.Value == nil || math.IsNaN(*in.Value) || math.IsInf(*in.Value, 0) {
			return c, Errorf(EINVALID, "condition.value: a number is required")
		}
		c.Value, c.Clear = *in.Value, *in.Value
		if in.Clear != nil {
			if math.IsNaN(*in.Clear) || math.IsInf(*in.Clear, 0) {
				return c, Errorf(EINVALID, "condition.clear: not a number")
			}
			c.Clear = *in.Clear
			if (strings.HasPrefix(c.Op, ">") && c.Clear > c.Value) || (strings.HasPrefix(c.Op, "<") && c.Clear < c.Value) {
				side := "at or below"
				if strings.HasPrefix(c.Op, "<") {
					side = "at or above"
				}
				return c, Errorf(EINVALID, "condition.clear: %v is on the wrong side: with op %s it must be %s value %v", c.Clear, c.Op, side, c.Value)
			}
		}
		if c.For, err = parseRuleDuration("condition.for", in.For, 0, 0, MaxRuleFor); err != nil {
			return c, err
		}
		if in.After != "" || in.Type != "" || in.ResolveOn != "" || in.Status != "" {
			return c, Errorf(EINVALID, "condition: a threshold condition takes source, op, value, clear and for only")
		}
	case resource.ConditionOffline:
		if in.After == "" {
			return c, Errorf(EINVALID, "condition.after is required (30s..24h)")
		}
		if c.After, err = parseRuleDuration("condition.after", in.After, 0, MinRuleAfter, MaxRuleFor); err != nil {
			return c, err
		}
		if in.Source != "" || in.Op != "" || in.Value != nil || in.Clear != nil || in.For != "" || in.Type != "" || in.ResolveOn != "" || in.Status != "" {
			return c, Errorf(EINVALID, "condition: an offline condition takes after only")
		}
	case resource.ConditionEvent:
		if !eventTypePattern.MatchString(in.Type) {
			return c, Errorf(EINVALID, "condition.type: an event type is required (for example alert.vpn_down)")
		}
		if in.ResolveOn != "" && (!eventTypePattern.MatchString(in.ResolveOn) || in.ResolveOn == in.Type) {
			return c, Errorf(EINVALID, "condition.resolveOn: not an event type, or the same as type")
		}
		c.EventType, c.ResolveOn = in.Type, in.ResolveOn
		if in.Source != "" || in.Op != "" || in.Value != nil || in.Clear != nil || in.For != "" || in.After != "" || in.Status != "" {
			return c, Errorf(EINVALID, "condition: an event condition takes type and resolveOn only")
		}
	case resource.ConditionStatus:
		if !slices.Contains(RuleStatuses, in.Status) {
			return c, Errorf(EINVALID, "condition.status: must be one of ERROR, UPDATING, REBOOTING")
		}
		c.Status = in.Status
		if c.For, err = parseRuleDuration("condition.for", in.For, 0, 0, MaxRuleFor); err != nil {
			return c, err
		}
		if in.Source != "" || in.Op != "" || in.Value != nil || in.Clear != nil || in.After != "" || in.Type != "" || in.ResolveOn != "" {
			return c, Errorf(EINVALID, "condition: a status condition takes status and for only")
		}
	case "":
		return c, Errorf(EINVALID, "condition.kind is required (threshold, offline, event or status)")
	default:
		return c, Errorf(EINVALID, "condition.kind: unknown kind %q (threshold, offline, event or status)", clip(in.Kind))
	}
	return c, nil
}

// SeverityRank orders severities: INFO 0 .. CRITICAL 3; -1 for unknown.
func SeverityRank(s resource.Severity) int { return slices.Index(resource.Severities, s) }

// RulePatch is PATCH /alert-rules/{id}: nil fields are left unchanged.
type RulePatch struct {
	Name        *string
	Enabled     *bool
	Severity    *resource.Severity
	Scope       *resource.RuleScope
	Condition   *resource.RuleCondition
	Notify      *[]string
	RepeatEvery *string
}

// Apply returns r with p's fields set.
func (p RulePatch) Apply(r resource.AlertRule) resource.AlertRule {
	if p.Name != nil {
		r.Name = *p.Name
	}
	if p.Enabled != nil {
		r.Enabled = *p.Enabled
	}
	if p.Severity != nil {
		r.Severity = *p.Severity
	}
	if p.Scope != nil {
		r.Scope = *p.Scope
	}
	if p.Condition != nil {
		r.Condition = *p.Condition
	}
	if p.Notify != nil {
		r.Notify = *p.Notify
	}
	if p.RepeatEvery != nil {
		r.RepeatEvery = *p.RepeatEvery
	}
	return r
}

// SilenceFilter filters GET /silences: active (To in the future) unless
// All.
type SilenceFilter struct {
	Page
	All bool
}

// NewSilence is POST /silences.
type NewSilence struct {
	Scope     resource.RuleScope
	From, To  time.Time
	Comment   string
	CreatedBy string // who: "key:<id>", "user:<email>", "cli"
}

// Check validates a silence at now: To after From and after now, at most
// MaxSilenceLength long, a valid scope, a comment of at most
// MaxCommentLength bytes. Errors name the field.
func (s NewSilence) Check(now time.Time) (NewSilence, error) {
	var err error
	if s.Scope, err = CheckScope("scope", s.Scope); err != nil {
		return s, err
	}
	if s.From.IsZero() {
		s.From = now
	}
	if s.To.IsZero() {
		return s, Errorf(EINVALID, "to is required")
	}
	if !s.To.After(s.From) {
		return s, Errorf(EINVALID, "to: must be after from")
	}
	if !s.To.After(now) {
		return s, Errorf(EINVALID, "to: must be in the future")
	}
	if s.To.Sub(s.From) > MaxSilenceLength {
		return s, Errorf(EINVALID, "to: a silence lasts at most %d days", int(MaxSilenceLength/(24*time.Hour)))
	}
	if len(s.Comment) > MaxCommentLength || !utf8.ValidString(s.Comment) {
		return s, Errorf(EINVALID, "comment: at most %d bytes of UTF-8 text", MaxCommentLength)
	}
	return s, nil
}

// NewChannel is `notify add`: a notification channel to create.
type NewChannel struct {
	OrgID       string
	Name        string
	Kind        string
	Target      string
	MinSeverity resource.Severity // "" is INFO
	// AllRules adds the channel to the notify list of every rule of the
	// organization.
	AllRules bool
}

// RuleService is what the API, the panel and the CLI do with an
// organization's rules, silences and notification channels (DESIGN.md
// "Alert rules and notifications"). Every method is scoped to orgID: another
// organization's rule, silence or channel is ENOTFOUND.
type RuleService interface {
	// ListRules lists the organization's rules (deleted ones not),
	// oldest first (created_at, then id), keyset-paginated.
	ListRules(ctx context.Context, orgID string, p Page) (resource.List[resource.AlertRule], error)
	Rule(ctx context.Context, orgID, id string) (resource.AlertRule, error)
	// CreateRule stores a new rule (CompileRule; the store checks that
	// every notify id is a channel of the organization, every scope device
	// one of its devices, and that a point source is a point of at least
	// one device of the scope: EINVALID naming the field otherwise). A name
	// another live rule has is EINVALID naming "name".
	CreateRule(ctx context.Context, orgID string, r resource.AlertRule) (resource.AlertRule, error)
	// UpdateRule applies p (checked as CreateRule, nothing changed on an
	// error); a rule that is disabled or whose condition or scope changed
	// resolves its open alerts that no longer hold (at least: disabling
	// resolves them all).
	UpdateRule(ctx context.Context, orgID, id string, p RulePatch) (resource.AlertRule, error)
	// DeleteRule deletes the rule and resolves its open alerts (each with
	// its alert.resolved event and notifications), in one transaction.
	DeleteRule(ctx context.Context, orgID, id string) error
	// PreviewRule answers what the rule would have done over [from, to] on
	// the stored history (checked as CreateRule).
	PreviewRule(ctx context.Context, orgID string, r resource.AlertRule, from, to time.Time) (resource.RulePreview, error)

	CreateSilence(ctx context.Context, orgID string, s NewSilence) (resource.Silence, error)
	ListSilences(ctx context.Context, orgID string, f SilenceFilter) (resource.List[resource.Silence], error)
	// DeleteSilence ends a silence now (it is removed from the list).
	DeleteSilence(ctx context.Context, orgID, id string) error

	// CreateChannel checks and stores a notification channel (EINVALID
	// naming the field: kind, target, minSeverity, name).
	CreateChannel(ctx context.Context, c NewChannel) (resource.NotificationChannel, error)
	ListChannels(ctx context.Context, orgID string) ([]resource.NotificationChannel, error)
	// Channel returns a channel by id in any organization (the CLI's
	// remove and test take an id alone) with its organization.
	Channel(ctx context.Context, id string) (orgID string, c resource.NotificationChannel, err error)
	// DeleteChannel deletes the channel and removes it from every rule's
	// notify list.
	DeleteChannel(ctx context.Context, orgID, id string) error
	// TestChannel queues a test message to the channel through the outbox
	// and returns the delivery's id.
	TestChannel(ctx context.Context, orgID, id string) (deliveryID string, err error)
}

// RulesObserver hears that an organization's rules changed (created,
// updated, deleted), after the commit: the alert engine forgets its cached
// rules of the organization.
type RulesObserver interface {
	RulesChanged(orgID string)
	// DeviceTagsChanged: the device's tags changed (PATCH /devices/{id},
	// device set --tags): rules scoped by tags see them at its next
	// report.
	DeviceTagsChanged(orgID, deviceID string)
}

// CheckChannel validates a channel to create; errors name the field.
func CheckChannel(c NewChannel) (NewChannel, error) {
	var err error
	if c.Name, err = ValidName("name", c.Name); err != nil {
		return c, err
	}
	if c.MinSeverity == "" {
		c.MinSeverity = resource.SeverityInfo
	}
	if !c.MinSeverity.Valid() {
		return c, Errorf(EINVALID, "minSeverity: must be one of INFO, WARNING, ERROR, CRITICAL")
	}
	c.Target = strings.TrimSpace(c.Target)
	if c.Target == "" || len(c.Target) > MaxChannelTarget {
		return c, Errorf(EINVALID, "target is required (at most %d bytes)", MaxChannelTarget)
	}
	switch c.Kind {
	case resource.ChannelEmail:
		addrs, err := ParseRecipients(c.Target)
		if err != nil {
			return c, err
		}
		c.Target = strings.Join(addrs, ", ")
	case resource.ChannelSlack, resource.ChannelWebhook:
		if err := ValidateWebhookURL("target", c.Target); err != nil {
			return c, err
		}
	default:
		return c, Errorf(EINVALID, "kind: must be one of email, slack, webhook")
	}
	return c, nil
}

// ParseRecipients parses an email channel's target: 1..MaxEmailRecipients
// plain addresses separated by commas.
func ParseRecipients(target string) ([]string, error) {
	var out []string
	for part := range strings.SplitSeq(target, ",") {
		a := strings.TrimSpace(part)
		if a == "" {
			continue
		}
		at := strings.LastIndexByte(a, '@')
		if at <= 0 || at == len(a)-1 || len(a) > 254 || strings.ContainsAny(a, " <>\"\r\n\t;") || strings.Count(a, "@") != 1 {
			return nil, Errorf(EINVALID, "target: %q is not an e-mail address", clip(a))
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, Errorf(EINVALID, "target: an e-mail address is required")
	}
	if len(out) > MaxEmailRecipients {
		return nil, Errorf(EINVALID, "target: at most %d addresses", MaxEmailRecipients)
	}
	return out, nil
}

// String names a rule in logs.
func (r AlertRule) String() string { return fmt.Sprintf("%s (%s)", r.Name, r.ID) }
