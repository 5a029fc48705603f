package cloud

import (
	"fmt"
	"strings"

	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// Validate checks a device to add and returns it with its names trimmed:
// EINVALID for a bad name, serial number or location, or a model the
// catalog does not know (naming the models it knows).
func (nd NewDevice) Validate() (NewDevice, error) {
	var err error
	if nd.Name, err = ValidName("name", nd.Name); err != nil {
		return nd, err
	}
	if nd.SerialNumber, err = ValidName("serial", nd.SerialNumber); err != nil {
		return nd, err
	}
	if nd.Location != "" {
		if nd.Location, err = ValidName("location", nd.Location); err != nil {
			return nd, err
		}
	}
	if _, ok := catalog.Lookup(nd.Model); !ok {
		return nd, Errorf(EINVALID, "unknown model %q (known models: %s)", nd.Model, strings.Join(catalog.Names(), ", "))
	}
	return nd, nil
}

// SerialModel returns the catalog model of a device of model name, or
// ECAPABILITY when it has no serial I/O.
func SerialModel(name string) (catalog.Model, error) {
	m, ok := catalog.Lookup(name)
	if !ok || !m.Has(resource.CapabilitySerialIO) {
		return catalog.Model{}, Errorf(ECAPABILITY, "device model %s does not have the capability %s", name, resource.CapabilitySerialIO)
	}
	return m, nil
}

// Validate checks PATCH /serial's body.
func (p SerialPatch) Validate() error {
	if p.Mode == nil && p.WebhookURL == nil && !p.ClearWebhookURL && p.WebhookEnabled == nil && p.Enabled == nil {
		return Errorf(EINVALID, "at least one of mode, webhookUrl, webhookEnabled, enabled is required")
	}
	if p.Mode != nil && !resource.ValidMode(*p.Mode) {
		return Errorf(EINVALID, "mode must be one of managed, passthrough, both")
	}
	if p.WebhookURL != nil && !p.ClearWebhookURL {
		return ValidateWebhookURL("webhookUrl", *p.WebhookURL)
	}
	return nil
}

// CheckChannelPut checks PUT /serial/channels/{id} against the model:
// ENOTFOUND for a channel the model lacks, ENOTCONFIG, EKIND for a config of
// another group, EINVALID for a value out of range. Whether the device
// reported the channel available is the store's to check.
func CheckChannelPut(m catalog.Model, channelID string, cfg serialcfg.Config) error {
	c, ok := m.Channel(channelID)
	if !ok {
		return ErrChannelNotFound(channelID)
	}
	if !c.Configurable {
		return Errorf(ENOTCONFIG, "channel %s is not configurable", channelID)
	}
	if cfg.Kind != c.Group {
		return Errorf(EKIND, "kind %q does not match the channel's group %q", cfg.Kind, c.Group)
	}
	if err := cfg.Validate(); err != nil {
		return Errorf(EINVALID, "%v", err)
	}
	return nil
}

// ErrChannelNotFound is the ENOTFOUND error of an unknown channel.
func ErrChannelNotFound(id string) error {
	return Errorf(ENOTFOUND, "channel %q not found", id)
}

// StoredChannel is what a store keeps of one channel: the desired config
// (JSON; nil: the catalog default) and the last report (Available nil:
// never reported), with the reported point states as EncodePointStates
// wrote them ("" when none were reported).
type StoredChannel struct {
	Config      *string
	Available   *bool
	Live        string
	TxOn        bool
	Error       string
	Passthrough *string
	Points      string
}

// DesiredConfig returns the channel's desired configuration: the stored one,
// else catalog channel c's default.
func (row *StoredChannel) DesiredConfig(c catalog.Channel) (serialcfg.Config, error) {
	if row == nil || row.Config == nil {
		return c.DefaultConfig(), nil
	}
	cfg, err := serialcfg.Decode([]byte(*row.Config))
	if err != nil {
		return cfg, fmt.Errorf("stored config of %s: %w", c.ID, err)
	}
	return cfg, nil
}

// ChannelView builds the API's view of catalog channel c from what is
// stored of it (nil: nothing yet); online is whether the device is ONLINE
// (its points are stale otherwise).
func ChannelView(c catalog.Channel, row *StoredChannel, online bool) (resource.Channel, error) {
	ch := resource.Channel{
		ID: c.ID, Group: c.Group, Label: c.Label, Terminals: append([]string{}, c.Terminals...),
		Configurable: c.Configurable, Available: true, Config: c.DefaultConfig(),
	}
	cfg, err := row.DesiredConfig(c)
	if err != nil {
		return ch, err
	}
	ch.Config = cfg
	pts, err := ChannelPoints(c.ID, cfg, row, nil, online)
	if err != nil {
		return ch, err
	}
	ch.Points = PointRefs(pts)
	if row == nil {
		return ch, nil
	}
	if row.Available != nil {
		ch.Available = *row.Available
	}
	ch.Telemetry = serialcfg.Telemetry{Live: row.Live, TxOn: row.TxOn, Error: row.Error}
	if row.Passthrough != nil && *row.Passthrough != "" {
		p := *row.Passthrough
		ch.PassthroughAddress = &p
	}
	return ch, nil
}

// SerialView builds GET /serial's answer from the stored state: every
// channel of model m, in the catalog's order.
func SerialView(deviceID string, m catalog.Model, state resource.SerialState, rows map[string]*StoredChannel, online bool) (resource.SerialState, error) {
	state.DeviceID = deviceID
	state.Channels = make([]resource.Channel, 0, len(m.Channels))
	for _, c := range m.Channels {
		ch, err := ChannelView(c, rows[c.ID], online)
		if err != nil {
			return resource.SerialState{}, err
		}
		state.Channels = append(state.Channels, ch)
	}
	return state, nil
}

// TelemetryView builds GET /serial/telemetry's answer: one entry per
// channel of model m, with the points of its desired configuration (stale
// unless online).
func TelemetryView(deviceID string, m catalog.Model, at *resource.Time, rows map[string]*StoredChannel, online bool) (resource.SerialTelemetry, error) {
	out := resource.SerialTelemetry{DeviceID: deviceID, At: at, Channels: make([]resource.ChannelTelemetry, 0, len(m.Channels))}
	for _, c := range m.Channels {
		row := rows[c.ID]
		t := resource.ChannelTelemetry{ID: c.ID}
		if row != nil {
			t.Live, t.TxOn, t.Error = row.Live, row.TxOn, row.Error
		}
		cfg, err := row.DesiredConfig(c)
		if err != nil {
			return out, err
		}
		pts, err := ChannelPoints(c.ID, cfg, row, nil, online)
		if err != nil {
			return out, err
		}
		t.Points = PointRefs(pts)
		out.Channels = append(out.Channels, t)
	}
	return out, nil
}

// ChannelUsable is the rule of a channel's availability: a channel that
// the agent reported unusable (reported true, available false) takes no
// desired configuration, EUNAVAILABLE; one never reported takes it.
func ChannelUsable(channelID string, reported, available bool) error {
	if reported && !available {
		return Errorf(EUNAVAILABLE, "channel %s is not available on the device", channelID)
	}
	return nil
}
