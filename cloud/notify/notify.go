// Package notify renders and sends the alert notifications of the
// notification channels (DESIGN.md "Alert rules and notifications"): an
// e-mail through SMTP, a chat message to a Slack-compatible incoming
// webhook. The store writes a Message into the outbox in the transaction
// that opens, resolves or reminds of an alert; the webhook dispatcher sends
// it with the Sender of its kind, so deliveries are durable, retried and
// logged as webhooks are.
package notify

import (
	"encoding/json"
	"time"

	"github.com/fleet/fleet/shared/resource"
)

// Message events.
const (
	EventOpened   = "alert.opened"
	EventResolved = "alert.resolved"
	EventReminder = "alert.reminder" // repeatEvery: still ACTIVE, nobody acknowledged
	EventTest     = "notify.test"    // notify test
)

// Message is what a notification says, stored as an outbox delivery's
// body (JSON) and rendered for its channel's kind when sent.
type Message struct {
	Event      string            `json:"event"`
	OrgID      string            `json:"orgId"`
	AlertID    string            `json:"alertId,omitempty"`
	DeviceID   string            `json:"deviceId,omitempty"`
	DeviceName string            `json:"deviceName,omitempty"`
	RuleID     string            `json:"ruleId,omitempty"`
	RuleName   string            `json:"ruleName,omitempty"`
	Severity   resource.Severity `json:"severity,omitempty"`
	State      string            `json:"state,omitempty"`
	// Text is the alert's message ("CPU usage 95.0% at or above 90.0% for 10m").
	Text string `json:"text"`
	// Source, Value, Threshold and Unit name what crossed what (threshold
	// rules); nil when the rule has no value.
	Source    string    `json:"source,omitempty"`
	Value     *float64  `json:"value,omitempty"`
	Threshold *float64  `json:"threshold,omitempty"`
	Unit      string    `json:"unit,omitempty"`
	At        time.Time `json:"at"`
	ChannelID string    `json:"channelId,omitempty"`
}

// Encode returns m as an outbox body.
func (m Message) Encode() ([]byte, error) { return json.Marshal(m) }

// Decode reads an outbox body.
func Decode(body []byte) (Message, error) {
	var m Message
	err := json.Unmarshal(body, &m)
	return m, err
}
