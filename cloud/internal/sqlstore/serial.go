package sqlstore

import (
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
