package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// SerialStateColumns are the columns ScanSerialState reads, in order, from
// serial_state (unaliased); telemetry_at is the device row's (migration
// 0025).
const SerialStateColumns = `enabled, mode, webhook_url, webhook_enabled, desired_version, applied_version,
	(SELECT d.telemetry_at FROM devices d WHERE d.id = serial_state.device_id)`

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

// channelRows reads deviceID's channels: the desired configurations of
// serial_channels and the reported states of the device row
// (devices.channel_reports, cloud.DecodeChannelReports), by channel id.
// Only is the one channel to read ("" for all).
func channelRows(ctx context.Context, q Querier, deviceID, only string) (map[string]*cloud.StoredChannel, error) {
	out := map[string]*cloud.StoredChannel{}
	row := func(id string) *cloud.StoredChannel {
		r := out[id]
		if r == nil {
			r = &cloud.StoredChannel{}
			out[id] = r
		}
		return r
	}
	query, args := `SELECT channel_id, config FROM serial_channels WHERE device_id = ?`, []any{deviceID}
	if only != "" {
		query, args = query+` AND channel_id = ?`, append(args, only)
	}
	err := Each(ctx, q, query, args, func(r Row) error {
		var id string
		var config *string
		if err := r.Scan(&id, &config); err != nil {
			return err
		}
		row(id).Config = config
		return nil
	})
	if err != nil {
		return nil, err
	}
	reports, err := readChannelReports(ctx, q, deviceID)
	if err != nil {
		return nil, err
	}
	for i := range reports {
		if only == "" || reports[i].ID == only {
			reports[i].Stored(row(reports[i].ID))
		}
	}
	return out, nil
}

// readChannelReports reads the channels deviceID reported, in id order.
func readChannelReports(ctx context.Context, q Querier, deviceID string) ([]cloud.ChannelReport, error) {
	var stored *string
	err := q.QueryRow(ctx, `SELECT channel_reports FROM devices WHERE id = ?`, deviceID).Scan(&stored)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && stored == nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return cloud.DecodeChannelReports(*stored)
}

// SerialPatchSQL is the UPDATE that applies p to deviceID's serial_state
// row and bumps its desired version, with its arguments.
func SerialPatchSQL(p cloud.SerialPatch, deviceID string) (string, []any) {
	q := `UPDATE serial_state SET desired_version = desired_version + 1`
	var args []any
	set := func(col string, v any) {
		args = append(args, v)
		q += `, ` + col + ` = ?`
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
	if p.Enabled != nil {
		set("enabled", *p.Enabled)
	}
	args = append(args, deviceID)
	return q + ` WHERE device_id = ?`, args
}

// SerialTables is what SerialService reads and writes of a store's
// serial_state and serial_channels tables, in the store's dialect.
type SerialTables interface {
	// DeviceModel is the model of the organization's device, or ENOTFOUND.
	DeviceModel(ctx context.Context, orgID, deviceID string) (string, error)
	// DeviceModelStatus is the model and the status of the organization's
	// device, or ENOTFOUND.
	DeviceModelStatus(ctx context.Context, orgID, deviceID string) (string, resource.DeviceStatus, error)
	// SerialRows reads the device's state (DefaultSerialState when it has
	// no row) and its channels by id.
	SerialRows(ctx context.Context, deviceID string) (SerialState, map[string]*cloud.StoredChannel, error)
	// StoredChannel reads one channel's row; nil when it has none.
	StoredChannel(ctx context.Context, deviceID, channelID string) (*cloud.StoredChannel, error)
	// ChannelConfig reads one channel's desired configuration only (not
	// what the device reported); nil when none is stored.
	ChannelConfig(ctx context.Context, deviceID, channelID string) (*string, error)
	// PatchSerial applies p to the organization's device and bumps the
	// desired version in one transaction, with its audit record, and
	// returns the state it left.
	PatchSerial(ctx context.Context, orgID, deviceID string, p cloud.SerialPatch) (SerialState, error)
	// PutChannel stores put's configuration as the channel's desired one
	// and bumps the desired version in one transaction, with its audit
	// record; EUNAVAILABLE when the agent reported the channel unusable.
	PutChannel(ctx context.Context, put ChannelPut) error
}

// ChannelPut is a channel's new desired configuration, as
// SerialTables.PutChannel stores it.
type ChannelPut struct {
	OrgID, DeviceID, ChannelID string
	// Config is the configuration's JSON.
	Config string
	// Default returns the JSON of the catalog default, what a channel
	// without a stored configuration has (for the audit record's changed
	// members).
	Default func() string
	// Kind is the configuration's kind.
	Kind string
	// Import, when set, is the DBC import that made Config.
	Import *cloud.PointsImport
}

// audit is the action and details of put's audit record, old the stored
// configuration it replaced (NULL: the default).
func (put ChannelPut) audit(old sql.NullString) (string, channelDetails) {
	before := old.String
	if !old.Valid {
		before = put.Default()
	}
	d := channelDetails{Kind: put.Kind, Changed: changedSections(before, put.Config)}
	if put.Import == nil {
		return cloud.ActionChannelConfigured, d
	}
	d.File, d.Points = clipText(put.Import.File, cloud.MaxAuditFileName), &put.Import.Points
	return cloud.ActionPointsImported, d
}

// channelDetails are the details of channel.configured and
// channel.points_imported.
type channelDetails struct {
	Kind    string   `json:"kind"`
	Changed []string `json:"changed"`
	File    string   `json:"file,omitempty"`
	Points  *int     `json:"points,omitempty"`
}

// SerialService implements cloud.SerialService on a store's tables: the
// desired configuration lives in serial_state and serial_channels, the
// channel layout and defaults come from the hardware catalog.
type SerialService struct {
	Tables SerialTables
	// Observer, when set before use, is told after a change of the desired
	// configuration has been committed.
	Observer cloud.DesiredConfigObserver
}

var _ cloud.SerialService = (*SerialService)(nil)

// Serial returns the device's full industrial I/O state.
func (s *SerialService) Serial(ctx context.Context, orgID, deviceID string) (resource.SerialState, error) {
	r, err := s.read(ctx, orgID, deviceID)
	if err != nil {
		return resource.SerialState{}, err
	}
	return cloud.SerialView(deviceID, r.model, r.state.View(), r.chans, r.online)
}

// serialRead is what the reads of the service read of a device.
type serialRead struct {
	model  catalog.Model
	online bool // the device is ONLINE (else its points are stale)
	state  SerialState
	chans  map[string]*cloud.StoredChannel
}

// read reads the device's model, status, state and channels.
func (s *SerialService) read(ctx context.Context, orgID, deviceID string) (serialRead, error) {
	var r serialRead
	var err error
	if r.model, r.online, err = s.modelStatus(ctx, orgID, deviceID); err != nil {
		return r, err
	}
	r.state, r.chans, err = s.Tables.SerialRows(ctx, deviceID)
	return r, err
}

// PatchSerial changes the usage mode and the forwarding, bumping the desired
// version, and tells the Observer after the commit.
func (s *SerialService) PatchSerial(ctx context.Context, orgID, deviceID string, p cloud.SerialPatch) (resource.SerialPatchResult, error) {
	if err := p.Validate(); err != nil {
		return resource.SerialPatchResult{}, err
	}
	if _, err := s.model(ctx, orgID, deviceID); err != nil {
		return resource.SerialPatchResult{}, err
	}
	st, err := s.Tables.PatchSerial(ctx, orgID, deviceID, p)
	if err != nil {
		return resource.SerialPatchResult{}, err
	}
	s.changed(deviceID)
	return resource.SerialPatchResult{DeviceID: deviceID, Enabled: st.Enabled, Mode: st.Mode, Forwarding: st.Forwarding()}, nil
}

// Telemetry returns the last values the device reported, one entry per
// channel of its model.
func (s *SerialService) Telemetry(ctx context.Context, orgID, deviceID string) (resource.SerialTelemetry, error) {
	r, err := s.read(ctx, orgID, deviceID)
	if err != nil {
		return resource.SerialTelemetry{}, err
	}
	return cloud.TelemetryView(deviceID, r.model, resource.TP(MsTime(r.state.TelemetryAt)), r.chans, r.online)
}

// Channel returns one channel; ENOTFOUND when the model has no such channel.
func (s *SerialService) Channel(ctx context.Context, orgID, deviceID, channelID string) (resource.Channel, error) {
	m, online, err := s.modelStatus(ctx, orgID, deviceID)
	if err != nil {
		return resource.Channel{}, err
	}
	c, ok := m.Channel(channelID)
	if !ok {
		return resource.Channel{}, cloud.ErrChannelNotFound(channelID)
	}
	row, err := s.Tables.StoredChannel(ctx, deviceID, channelID)
	if err != nil {
		return resource.Channel{}, err
	}
	return cloud.ChannelView(c, row, online)
}

// PutChannel stores the channel's desired configuration, bumping the
// desired version, and tells the Observer after the commit.
func (s *SerialService) PutChannel(ctx context.Context, orgID, deviceID, channelID string, cfg serialcfg.Config) (resource.ChannelPutResult, error) {
	return s.putChannel(ctx, orgID, deviceID, channelID, cfg, nil)
}

// ImportPoints implements cloud.SerialService: PutChannel of what a DBC
// import made.
func (s *SerialService) ImportPoints(ctx context.Context, orgID, deviceID, channelID string, cfg serialcfg.Config, from cloud.PointsImport) (resource.ChannelPutResult, error) {
	return s.putChannel(ctx, orgID, deviceID, channelID, cfg, &from)
}

func (s *SerialService) putChannel(ctx context.Context, orgID, deviceID, channelID string, cfg serialcfg.Config, from *cloud.PointsImport) (resource.ChannelPutResult, error) {
	m, err := s.model(ctx, orgID, deviceID)
	if err != nil {
		return resource.ChannelPutResult{}, err
	}
	if err := cloud.CheckChannelPut(m, channelID, cfg); err != nil {
		return resource.ChannelPutResult{}, err
	}
	body, err := json.Marshal(cfg)
	if err != nil {
		return resource.ChannelPutResult{}, fmt.Errorf("put channel: %w", err)
	}
	put := ChannelPut{OrgID: orgID, DeviceID: deviceID, ChannelID: channelID, Config: string(body), Kind: cfg.Kind, Import: from,
		Default: func() string {
			c, _ := m.Channel(channelID) // CheckChannelPut found it
			def, _ := json.Marshal(c.DefaultConfig())
			return string(def)
		}}
	if err := s.Tables.PutChannel(ctx, put); err != nil {
		return resource.ChannelPutResult{}, err
	}
	s.changed(deviceID)
	return resource.ChannelPutResult{DeviceID: deviceID, ChannelID: channelID, Config: cfg}, nil
}

// model is the catalog model of the organization's device: ENOTFOUND, or
// ECAPABILITY when it has no serial I/O.
func (s *SerialService) model(ctx context.Context, orgID, deviceID string) (catalog.Model, error) {
	name, err := s.Tables.DeviceModel(ctx, orgID, deviceID)
	if err != nil {
		return catalog.Model{}, err
	}
	return cloud.SerialModel(name)
}

// modelStatus is model's answer, and whether the device is ONLINE.
func (s *SerialService) modelStatus(ctx context.Context, orgID, deviceID string) (catalog.Model, bool, error) {
	return serialModelStatus(ctx, s.Tables, orgID, deviceID)
}

// serialModelStatus is the catalog model of the organization's device
// (ENOTFOUND, or ECAPABILITY when it has no serial I/O), and whether the
// device is ONLINE.
func serialModelStatus(ctx context.Context, t SerialTables, orgID, deviceID string) (catalog.Model, bool, error) {
	name, status, err := t.DeviceModelStatus(ctx, orgID, deviceID)
	if err != nil {
		return catalog.Model{}, false, err
	}
	m, err := cloud.SerialModel(name)
	return m, status == resource.StatusOnline, err
}

func (s *SerialService) changed(deviceID string) {
	if s.Observer != nil {
		s.Observer.DesiredConfigChanged(deviceID)
	}
}
