package cloud

import (
	"context"
	"time"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// Page selects one page of a keyset-paginated list. Cursor is the id of the
// last item of the previous page ("" for the first page); an id that is not
// an item of the list is an ECURSOR error.
type Page struct {
	Limit  int
	Cursor string
}

// DeviceFilter filters GET /devices.
type DeviceFilter struct {
	Page
	Status resource.DeviceStatus // "" for any
	// Tags: the devices holding every one of these tags, sorted and
	// joined by "," (GET /devices?tag=, repeatable; a string so that the
	// filter stays comparable, a page cache key); "" for any.
	Tags string
}

// DevicePatch is PATCH /devices/{id}: nil fields are left unchanged;
// ClearNotes is true when the body held "notes": null. Name and location
// are checked as `device add` checks them, notes at most
// MaxNotesLength characters, tags with CheckDeviceTags; errors are
// EINVALID naming the field, and nothing is changed on an error.
type DevicePatch struct {
	Name       *string
	Location   *string
	Notes      *string
	ClearNotes bool
	Tags       *[]string
}

// MaxNotesLength bounds a device's notes, in characters.
const MaxNotesLength = 2000

// EventFilter filters GET /devices/{id}/events.
type EventFilter struct {
	Page
	Severity resource.Severity // "" for any
	Type     string            // "" for any
}

// AlertFilter filters GET /alerts.
type AlertFilter struct {
	Page
	State    resource.AlertState // required (the API defaults it to ACTIVE)
	Severity resource.Severity   // "" for any
	DeviceID string              // "" for any
}

// MetricsQuery selects samples in [From, To]; when more than Limit fall in
// the window, the newest Limit are returned, ascending.
type MetricsQuery struct {
	From, To time.Time
	Limit    int
}

// SerialPatch is PATCH /devices/{id}/serial; nil fields are left unchanged.
// ClearWebhookURL is true when the body held "webhookUrl": null. Enabled is
// the serial I/O switch (additive to the spec's body): false makes the agent
// close every channel's port and poll and send nothing.
type SerialPatch struct {
	Mode            *string
	WebhookURL      *string
	ClearWebhookURL bool
	WebhookEnabled  *bool
	Enabled         *bool
}

// DeviceService reads devices, metrics and events of one organization. Every
// method is scoped to orgID: another organization's device is ENOTFOUND.
type DeviceService interface {
	ListDevices(ctx context.Context, orgID string, f DeviceFilter) (resource.List[resource.Device], error)
	Device(ctx context.Context, orgID, id string) (resource.DeviceDetail, error)
	Metrics(ctx context.Context, orgID, deviceID string, q MetricsQuery) (resource.MetricsResponse, error)
	Events(ctx context.Context, orgID, deviceID string, f EventFilter) (resource.List[resource.Event], error)
	// PatchDevice changes a device's name, location, notes or tags and
	// returns its detail.
	PatchDevice(ctx context.Context, orgID, id string, p DevicePatch) (resource.DeviceDetail, error)
}

// SerialService reads and changes a device's industrial I/O state. A device
// whose model lacks serial.io is ECAPABILITY on every method; an unknown
// channel is ENOTFOUND; PutChannel on a non-configurable or unavailable
// channel is ENOTCONFIG or EUNAVAILABLE.
type SerialService interface {
	Serial(ctx context.Context, orgID, deviceID string) (resource.SerialState, error)
	PatchSerial(ctx context.Context, orgID, deviceID string, p SerialPatch) (resource.SerialPatchResult, error)
	Telemetry(ctx context.Context, orgID, deviceID string) (resource.SerialTelemetry, error)
	Channel(ctx context.Context, orgID, deviceID, channelID string) (resource.Channel, error)
	PutChannel(ctx context.Context, orgID, deviceID, channelID string, cfg serialcfg.Config) (resource.ChannelPutResult, error)
	// ImportPoints stores cfg as PutChannel does, as the points a DBC
	// import (from) brought: its audit record is channel.points_imported.
	ImportPoints(ctx context.Context, orgID, deviceID, channelID string, cfg serialcfg.Config, from PointsImport) (resource.ChannelPutResult, error)
}

// AlertService lists alerts and moves them through the spec's state table.
type AlertService interface {
	ListAlerts(ctx context.Context, orgID string, f AlertFilter) (resource.List[resource.Alert], error)
	// Alert returns the organization's alert id, or ENOTFOUND.
	Alert(ctx context.Context, orgID, id string) (resource.Alert, error)
	Acknowledge(ctx context.Context, orgID, id string) (resource.Alert, error)
	Resolve(ctx context.Context, orgID, id string) (resource.Alert, error)
}

// KeyService finds API keys for authentication.
type KeyService interface {
	// KeyByID returns the key with id, in any organization, or ENOTFOUND.
	KeyByID(ctx context.Context, id string) (*APIKey, error)
}

// DeviceRef identifies a device on the ingest path.
type DeviceRef struct {
	ID    string
	OrgID string
	Model string
}

// VPNState is the tunnel state an agent reports.
type VPNState struct {
	Up            bool
	InterfaceName string
	Endpoint      string
	PeerCount     int
	LastHandshake time.Time
}

// Heartbeat is what the relay learned from one agent heartbeat.
type Heartbeat struct {
	At     time.Time
	Status resource.DeviceStatus
	VPN    *VPNState
	// Changed holds the channels whose telemetry (live, txOn, error) differs
	// from the previous report; empty when nothing changed.
	Changed []resource.SignalChannel
	// ChangedPoints holds the points whose value or quality differs from the
	// previous report (a point reported for the first time included), with
	// ids <channelId>.<name>, units and types from the desired
	// configuration; empty when none changed.
	ChangedPoints []resource.PointRef
}

// Observer is told what agents reported, after it was stored. The alert
// engine and the signal webhooks implement it. Calls come from the agent
// endpoint's goroutines and must not block for long.
type Observer interface {
	MetricsStored(ctx context.Context, dev DeviceRef, samples []resource.MetricSample)
	HeartbeatStored(ctx context.Context, dev DeviceRef, hb Heartbeat)
	EventsStored(ctx context.Context, dev DeviceRef, events []resource.Event)
	StatusChanged(ctx context.Context, dev DeviceRef, from, to resource.DeviceStatus)
}

// PointObserver is an Observer that is told of the point samples agents
// reported too, after they were stored (each sample once, not its
// resends), with the other records of their batch. The alert engine
// implements it to read points; an Observer that does not is not told.
type PointObserver interface {
	PointsStored(ctx context.Context, dev DeviceRef, samples []protocol.PointSample)
}

// AlertObserver is told when an alert changes state through any path (the
// API or the alert engine); the alert webhooks implement it. Event is
// "alert.opened", "alert.acknowledged" or "alert.resolved".
type AlertObserver interface {
	AlertChanged(ctx context.Context, event string, a resource.Alert)
}

// DesiredConfigObserver is told after a device's desired serial
// configuration changed (PATCH /serial, PUT channel), so that a connected
// agent receives it at once.
type DesiredConfigObserver interface {
	DesiredConfigChanged(deviceID string)
}
