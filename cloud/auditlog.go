package cloud

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
)

// Reading the audit log (issue 30): the names a reader filters by and the
// JSON shape the CLI prints (docs/audit.md).

// AuditActions lists every Action* name of audit.go in its order: the
// panel's action filter, the CLI's check of --action and docs/audit.md's
// table follow it (audit_test.go keeps it complete).
var AuditActions = []string{
	ActionSignedIn, ActionSignedOut, ActionSignInFailed,
	ActionOrgCreated, ActionAlertWebhook, ActionSecretRotated, ActionOrg2FA, ActionOrgOIDC,
	ActionKeyCreated, ActionKeyRevoked,
	ActionMemberAdded, ActionMemberRoleChanged, ActionMemberDisabled, ActionMemberPassword, ActionMember2FAEnrolled, ActionMember2FAReset,
	ActionDeviceAdded, ActionDeviceUpdated, ActionDeviceRevoked, ActionDeviceClaimed, ActionDeviceReboot,
	ActionSerialUpdated, ActionChannelConfigured, ActionPointsImported,
	ActionAlertAcknowledged, ActionAlertResolved,
	ActionRuleCreated, ActionRuleUpdated, ActionRuleDeleted,
	ActionSilenceCreated, ActionSilenceDeleted,
	ActionNotifyCreated, ActionNotifyRemoved,
	ActionClaimCreated, ActionClaimRevoked, ActionReleaseAdded, ActionRolloutCreated, ActionRolloutChanged, ActionWebhookRedeliver,
}

// AuditActionKinds returns the kinds of AuditActions, each as the filter
// that selects all of its actions ("key."), in order, each once.
func AuditActionKinds() []string {
	var out []string
	for _, a := range AuditActions {
		kind, _, _ := strings.Cut(a, ".")
		if k := kind + "."; !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// ValidAuditAction reports whether a is an action filter of AuditFilter:
// "" (any), one of AuditActions, or a kind of AuditActionKinds.
func ValidAuditAction(a string) bool {
	return a == "" || slices.Contains(AuditActions, a) || slices.Contains(AuditActionKinds(), a)
}

// ValidActorKind reports whether k is an actor kind ("" is none).
func ValidActorKind(k ActorKind) bool {
	return k == "" || k == ActorUser || k == ActorAPIKey || k == ActorCLI
}

// AuditTimeFormat is how a record's time is written (JSON, CSV): RFC 3339
// in UTC with milliseconds.
const AuditTimeFormat = "2006-01-02T15:04:05.000Z"

// MarshalJSON writes r in DESIGN.md's shape: "at" in UTC with
// milliseconds, "details" an object ({} when empty).
func (r AuditRecord) MarshalJSON() ([]byte, error) {
	details := r.Details
	if len(details) == 0 {
		details = json.RawMessage("{}")
	}
	return json.Marshal(struct {
		ID      string          `json:"id"`
		At      string          `json:"at"`
		Actor   Actor           `json:"actor"`
		Action  string          `json:"action"`
		Target  AuditTarget     `json:"target"`
		IP      string          `json:"ip"`
		Details json.RawMessage `json:"details"`
	}{r.ID, r.AuditTime(), r.Actor, r.Action, r.Target, r.IP, details})
}

// AuditTime returns r's time in AuditTimeFormat.
func (r AuditRecord) AuditTime() string { return r.At.UTC().Format(AuditTimeFormat) }

// DetailsText returns r's details as compact JSON for people (the panel,
// the CSV, the CLI's table): characters such as < and & as themselves, not
// \u escapes; the page or file that shows it escapes what it must.
func (r AuditRecord) DetailsText() string {
	if len(r.Details) == 0 {
		return "{}"
	}
	if !bytes.Contains(r.Details, []byte(`\u00`)) {
		return string(r.Details) // as the store writes it: nothing escaped for HTML
	}
	dec := json.NewDecoder(bytes.NewReader(r.Details))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return string(r.Details)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return string(r.Details)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
