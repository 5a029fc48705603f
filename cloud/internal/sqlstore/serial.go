package sqlstore

import (
	"strconv"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// SerialStateColumns are the columns ScanSerialState reads, in order.
const SerialStateColumns = `enabled, mode, webhook_url, webhook_enabled, desired_version, applied_version, telemetry_at`

// SerialState is a device's serial_state row.
type SerialState struct {
	Enabled        bool
	Mode           string
	WebhookURL     *string
	WebhookEnabled bool
	DesiredVersion int64
	AppliedVersion int64
	TelemetryAt    *int64
}

// DefaultSerialState is the state of a device that has no serial_state row
// yet.
func DefaultSerialState() SerialState { return SerialState{Enabled: true, Mode: resource.ModeManaged} }

// ScanSerialState reads a row of SerialStateColumns.
func ScanSerialState(row Row) (SerialState, error) {
	var s SerialState
	err := row.Scan(&s.Enabled, &s.Mode, &s.WebhookURL, &s.WebhookEnabled, &s.DesiredVersion, &s.AppliedVersion, &s.TelemetryAt)
	return s, err
}

// Forwarding is the state's webhook forwarding.
func (s SerialState) Forwarding() resource.Forwarding {
	f := resource.Forwarding{WebhookEnabled: s.WebhookEnabled}
	if s.WebhookURL != nil {
		u := *s.WebhookURL
		f.WebhookURL = &u
	}
	return f
}

// View is the state as the API shows it, before cloud.SerialView adds the
// channels.
func (s SerialState) View() resource.SerialState {
	return resource.SerialState{Enabled: s.Enabled, Mode: s.Mode, Forwarding: s.Forwarding(), TelemetryAt: resource.TP(MsTime(s.TelemetryAt))}
}

// ChannelColumns are the columns ScanChannel reads, in order.
const ChannelColumns = `channel_id, config, available, live, tx_on, error, passthrough_address`

// Channel is a serial_channels row: the channel's id and what is stored of it.
type Channel struct {
	ID string
	cloud.StoredChannel
}

// ScanChannel reads a row of ChannelColumns.
func ScanChannel(row Row) (Channel, error) {
	var c Channel
	err := row.Scan(&c.ID, &c.Config, &c.Available, &c.Live, &c.TxOn, &c.Error, &c.Passthrough)
	return c, err
}

// ChannelsByID maps the channels by id.
func ChannelsByID(chans []Channel) map[string]*cloud.StoredChannel {
	out := make(map[string]*cloud.StoredChannel, len(chans))
	for i := range chans {
		out[chans[i].ID] = &chans[i].StoredChannel
	}
	return out
}

// Placeholder is a dialect's n-th (from 1) statement parameter.
type Placeholder func(n int) string

// The stores' placeholders: SQLite's ?, PostgreSQL's $n.
var (
	Question Placeholder = func(int) string { return "?" }
	Dollar   Placeholder = func(n int) string { return "$" + strconv.Itoa(n) }
)

// SerialPatchSQL is the UPDATE that applies p to deviceID's serial_state
// row and bumps its desired version, with its arguments, in the dialect of
// ph.
func SerialPatchSQL(p cloud.SerialPatch, deviceID string, ph Placeholder) (string, []any) {
	q := `UPDATE serial_state SET desired_version = desired_version + 1`
	var args []any
	set := func(col string, v any) {
		args = append(args, v)
		q += `, ` + col + ` = ` + ph(len(args))
	}
	if p.Mode != nil {
		set("mode", *p.Mode)
	}
	if p.ClearWebhookURL {
		q += `, webhook_url = NULL`
	} else if p.WebhookURL != nil {
		set("webhook_url", *p.WebhookURL)
	}
	if p.WebhookEnabled != nil {
		set("webhook_enabled", *p.WebhookEnabled)
	}
	args = append(args, deviceID)
	return q + ` WHERE device_id = ` + ph(len(args)), args
}
