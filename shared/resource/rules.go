package resource

// AlertRule is an organization's alert rule (DESIGN.md "Alert rules and
// notifications"): GET /alert-rules and /alert-rules/{id}, and the body of
// POST /alert-rules. Notify holds notification channel ids; RepeatEvery is
// "0s" or "5m".."24h" (an ACTIVE alert nobody acknowledged notifies again
// at that pace).
type AlertRule struct {
	ID          string        `json:"id"`
	Name        string        `json:"name"`
	Enabled     bool          `json:"enabled"`
	Severity    Severity      `json:"severity"`
	Scope       RuleScope     `json:"scope"`
	Condition   RuleCondition `json:"condition"`
	Notify      []string      `json:"notify"`
	RepeatEvery string        `json:"repeatEvery"`
	CreatedAt   Time          `json:"createdAt"`
	UpdatedAt   Time          `json:"updatedAt"`
}

// RuleScope selects devices: every device of the organization (both
// empty), the devices listed, or the devices holding every tag listed.
// At most one of the two is set.
type RuleScope struct {
	DeviceIDs []string `json:"deviceIds,omitempty"`
	Tags      []string `json:"tags,omitempty"`
}

// Rule condition kinds.
const (
	ConditionThreshold = "threshold"
	ConditionOffline   = "offline"
	ConditionEvent     = "event"
	ConditionStatus    = "status"
)

// RuleCondition is a rule's condition; which fields apply depends on Kind:
//   - threshold: Source ("metric.cpuPct", "metric.memPct",
//     "metric.diskUsedPct", "metric.tempCpu", "metric.loadAvg1" or
//     "point.<pointId>"), Op (">", ">=", "<", "<="), Value, Clear (on the
//     safe side of Value; Value when absent) and For ("0s".."24h");
//   - offline: After ("30s".."24h");
//   - event: Type and, optionally, ResolveOn;
//   - status: Status (ERROR, UPDATING or REBOOTING) and For.
type RuleCondition struct {
	Kind      string       `json:"kind"`
	Source    string       `json:"source,omitempty"`
	Op        string       `json:"op,omitempty"`
	Value     *float64     `json:"value,omitempty"`
	Clear     *float64     `json:"clear,omitempty"`
	For       string       `json:"for,omitempty"`
	After     string       `json:"after,omitempty"`
	Type      string       `json:"type,omitempty"`
	ResolveOn string       `json:"resolveOn,omitempty"`
	Status    DeviceStatus `json:"status,omitempty"`
}

// RulePreview is the answer of POST /alert-rules/preview: what the rule
// would have done over [From, To] on the stored history.
type RulePreview struct {
	From    Time                `json:"from"`
	To      Time                `json:"to"`
	Opened  int                 `json:"opened"`
	Devices []RulePreviewDevice `json:"devices"`
}

// RulePreviewDevice is one device of a RulePreview: how many alerts the
// rule would have opened on it and for how long they would have been open
// in total (up to To for one still open).
type RulePreviewDevice struct {
	DeviceID  string `json:"deviceId"`
	Opened    int    `json:"opened"`
	OpenForMs int64  `json:"openForMs"`
}

// Silence is a maintenance window: alerts of the devices in Scope that
// open or change in [From, To) notify nobody (they still open and are
// listed).
type Silence struct {
	ID        string    `json:"id"`
	Scope     RuleScope `json:"scope"`
	From      Time      `json:"from"`
	To        Time      `json:"to"`
	Comment   string    `json:"comment"`
	CreatedBy string    `json:"createdBy"`
	CreatedAt Time      `json:"createdAt"`
}

// Notification channel kinds.
const (
	ChannelEmail   = "email"
	ChannelSlack   = "slack"
	ChannelWebhook = "webhook"
)

// NotificationChannel is where alerts of the rules naming it go: Target
// is e-mail addresses (comma separated) for email, an https incoming
// webhook URL for slack, an https URL for webhook (the signed alert
// webhook body). Alerts below MinSeverity are not sent.
type NotificationChannel struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Kind        string   `json:"kind"`
	Target      string   `json:"target"`
	MinSeverity Severity `json:"minSeverity"`
	CreatedAt   Time     `json:"createdAt"`
}
