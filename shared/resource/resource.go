// Package resource holds the public API's resource shapes (spec section 2) as
// Go types with their JSON names, the enumerations they use, and the
// envelopes. The relay renders them; tests, benchmarks and clients decode them.
// It does no I/O.
package resource

import (
	"encoding/json"
	"slices"

	"github.com/fleet/fleet/shared/serialcfg"
)

// DeviceStatus is a device's connection state.
type DeviceStatus string

// Device statuses, as the spec lists them.
const (
	StatusOnline       DeviceStatus = "ONLINE"
	StatusOffline      DeviceStatus = "OFFLINE"
	StatusConnecting   DeviceStatus = "CONNECTING"
	StatusError        DeviceStatus = "ERROR"
	StatusProvisioning DeviceStatus = "PROVISIONING"
	StatusRebooting    DeviceStatus = "REBOOTING"
	StatusUpdating     DeviceStatus = "UPDATING"
)

// DeviceStatuses lists every DeviceStatus.
var DeviceStatuses = []DeviceStatus{StatusOnline, StatusOffline, StatusConnecting, StatusError, StatusProvisioning, StatusRebooting, StatusUpdating}

// Valid reports whether s is a known status.
func (s DeviceStatus) Valid() bool {
	return slices.Contains(DeviceStatuses, s)
}

// Severity is the severity of an event or alert.
type Severity string

// Severities, lowest first.
const (
	SeverityInfo     Severity = "INFO"
	SeverityWarning  Severity = "WARNING"
	SeverityError    Severity = "ERROR"
	SeverityCritical Severity = "CRITICAL"
)

// Severities lists every Severity, lowest first.
var Severities = []Severity{SeverityInfo, SeverityWarning, SeverityError, SeverityCritical}

// Valid reports whether s is a known severity.
func (s Severity) Valid() bool {
	return slices.Contains(Severities, s)
}

// AlertState is the state of an alert.
type AlertState string

// Alert states.
const (
	AlertActive       AlertState = "ACTIVE"
	AlertAcknowledged AlertState = "ACKNOWLEDGED"
	AlertResolved     AlertState = "RESOLVED"
)

// Valid reports whether s is a known alert state.
func (s AlertState) Valid() bool {
	return s == AlertActive || s == AlertAcknowledged || s == AlertResolved
}

// Serial usage modes.
const (
	ModeManaged     = "managed"
	ModePassthrough = "passthrough"
	ModeBoth        = "both"
)

// ValidMode reports whether m is a serial usage mode.
func ValidMode(m string) bool { return m == ModeManaged || m == ModePassthrough || m == ModeBoth }

// Capability names.
const CapabilitySerialIO = "serial.io"

// Device is the list item of GET /devices.
type Device struct {
	ID              string       `json:"id"`
	Name            string       `json:"name"`
	SerialNumber    string       `json:"serialNumber"`
	Status          DeviceStatus `json:"status"`
	Model           string       `json:"model"`
	FirmwareVersion string       `json:"firmwareVersion"`
	LastSeen        *Time        `json:"lastSeen"`
	IPAddress       string       `json:"ipAddress"`
	Location        string       `json:"location"`
	CreatedAt       Time         `json:"createdAt"`
	// Tags are the device's tags, sorted (DESIGN.md "Fleet operations";
	// additive to the spec's item).
	Tags []string `json:"tags"`
}

// DeviceDetail is GET /devices/{id}: the list item plus the agent's own view.
type DeviceDetail struct {
	Device
	Notes               *string `json:"notes"`
	AgentDeviceName     string  `json:"agentDeviceName"`
	AgentDeviceLocation string  `json:"agentDeviceLocation"`
	AgentTimezone       string  `json:"agentTimezone"`
	// AgentVersion is the version the device's agent announced at its
	// last hello ("" before any), additive (issue 28).
	AgentVersion string `json:"agentVersion"`
}

// MetricSample is one sample of system metrics. (The cbor keys are its
// encoding on the agent link's CBOR codec, docs/protocol.md.)
type MetricSample struct {
	CapturedAt  Time    `json:"capturedAt" cbor:"1,keyasint,omitempty"`
	CPUPct      float64 `json:"cpuPct" cbor:"2,keyasint,omitempty"`
	MemPct      float64 `json:"memPct" cbor:"3,keyasint,omitempty"`
	DiskUsedPct float64 `json:"diskUsedPct" cbor:"4,keyasint,omitempty"`
	TempCPU     float64 `json:"tempCpu" cbor:"5,keyasint,omitempty"`
	LoadAvg1    float64 `json:"loadAvg1" cbor:"6,keyasint,omitempty"`
	// Missing names the metrics the host has no sensor for (additive to
	// the spec, docs/protocol.md "Metrics a host lacks"): their values
	// stay numbers, 0, and mean nothing. Today only "tempCpu", on a host
	// without a thermal zone. Absent from the samples of older agents,
	// which sent 0 for "no sensor".
	Missing []string `json:"missing,omitempty" cbor:"7,keyasint,omitempty"`
}

// MetricNames are the metrics of a sample, in the order of its fields.
var MetricNames = [...]string{"cpuPct", "memPct", "diskUsedPct", "tempCpu", "loadAvg1"}

// Lacks reports whether the sample's host has no sensor for metric name.
func (m *MetricSample) Lacks(name string) bool {
	for _, n := range m.Missing {
		if n == name {
			return true
		}
	}
	return false
}

// MissingMask packs names (of MetricNames; others are ignored) into one
// bit per metric, bit i for MetricNames[i], as the stores keep them.
func MissingMask(names []string) int64 {
	var mask int64
	for _, n := range names {
		for i, m := range MetricNames {
			if n == m {
				mask |= 1 << i
			}
		}
	}
	return mask
}

// MissingNames unpacks a MissingMask, nil for 0.
func MissingNames(mask int64) []string {
	var out []string
	for i, m := range MetricNames {
		if mask&(1<<i) != 0 {
			out = append(out, m)
		}
	}
	return out
}

// Window is the effective time range of a metrics response.
type Window struct {
	From Time `json:"from"`
	To   Time `json:"to"`
}

// MetricsResponse is the body of GET /devices/{id}/metrics.
type MetricsResponse struct {
	Data   []MetricSample `json:"data"`
	Window Window         `json:"window"`
}

// Event is a device event.
type Event struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Severity  Severity        `json:"severity"`
	Message   string          `json:"message"`
	Data      json.RawMessage `json:"data"`
	CreatedAt Time            `json:"createdAt"`
}

// Forwarding is a device's signal-forwarding settings.
type Forwarding struct {
	WebhookURL     *string `json:"webhookUrl"`
	WebhookEnabled bool    `json:"webhookEnabled"`
}

// Channel is one channel of a device's industrial I/O port.
type Channel struct {
	ID           string              `json:"id"`
	Group        string              `json:"group"`
	Label        string              `json:"label"`
	Terminals    []string            `json:"terminals"`
	Configurable bool                `json:"configurable"`
	Available    bool                `json:"available"`
	Config       serialcfg.Config    `json:"config"`
	Telemetry    serialcfg.Telemetry `json:"telemetry"`
	// PassthroughAddress is "host:port" of the channel's raw TCP port when the
	// device runs in passthrough or both mode and the agent opened one.
	PassthroughAddress *string `json:"passthroughAddress,omitempty"`
	// Points is the latest state of each of the channel's points.
	Points []PointRef `json:"points"`
}

// SerialState is GET /devices/{id}/serial.
type SerialState struct {
	DeviceID    string     `json:"deviceId"`
	Enabled     bool       `json:"enabled"`
	Mode        string     `json:"mode"`
	Forwarding  Forwarding `json:"forwarding"`
	Channels    []Channel  `json:"channels"`
	TelemetryAt *Time      `json:"telemetryAt"`
}

// SerialPatchResult is the response of PATCH /devices/{id}/serial.
type SerialPatchResult struct {
	DeviceID string `json:"deviceId"`
	// Enabled is the serial I/O switch (additive to the spec's answer).
	Enabled    bool       `json:"enabled"`
	Mode       string     `json:"mode"`
	Forwarding Forwarding `json:"forwarding"`
}

// ChannelTelemetry is one channel's entry in serial telemetry and webhooks.
type ChannelTelemetry struct {
	ID    string `json:"id"`
	Live  string `json:"live"`
	TxOn  bool   `json:"txOn"`
	Error string `json:"error"`
	// Points is the latest state of each of the channel's points.
	Points []PointRef `json:"points"`
}

// SerialTelemetry is GET /devices/{id}/serial/telemetry.
type SerialTelemetry struct {
	DeviceID string             `json:"deviceId"`
	At       *Time              `json:"at"`
	Channels []ChannelTelemetry `json:"channels"`
}

// ChannelPutResult is the response of PUT /devices/{id}/serial/channels/{channelId}.
type ChannelPutResult struct {
	DeviceID  string           `json:"deviceId"`
	ChannelID string           `json:"channelId"`
	Config    serialcfg.Config `json:"config"`
}

// Alert is an alert as listed by GET /alerts.
type Alert struct {
	ID             string          `json:"id"`
	State          AlertState      `json:"state"`
	Severity       Severity        `json:"severity"`
	Message        string          `json:"message"`
	Payload        json.RawMessage `json:"payload"`
	DeviceID       string          `json:"deviceId"`
	RuleID         string          `json:"ruleId"`
	AcknowledgedAt *Time           `json:"acknowledgedAt"`
	ResolvedAt     *Time           `json:"resolvedAt"`
	CreatedAt      Time            `json:"createdAt"`
}

// Pagination is the pagination block of list responses.
type Pagination struct {
	NextCursor *string `json:"nextCursor"`
	HasMore    bool    `json:"hasMore"`
}

// List is a list response.
type List[T any] struct {
	Data       []T        `json:"data"`
	Pagination Pagination `json:"pagination"`
}

// One is a single-object response.
type One[T any] struct {
	Data T `json:"data"`
}

// ErrorBody is the error envelope.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of the error envelope.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// SignalWebhook is the body of a serial.signal webhook.
type SignalWebhook struct {
	Event    string          `json:"event"`
	DeviceID string          `json:"deviceId"`
	At       Time            `json:"at"`
	Channels []SignalChannel `json:"channels"`
	// Points are the points whose value or quality changed (omitted when
	// none did).
	Points []PointRef `json:"points,omitempty"`
}

// SignalChannel is a changed channel in a serial.signal webhook, in the
// spec's shape.
type SignalChannel struct {
	ID    string `json:"id"`
	Live  string `json:"live"`
	TxOn  bool   `json:"txOn"`
	Error string `json:"error"`
}

// AlertWebhook is the body of an alert webhook.
type AlertWebhook struct {
	Event    string `json:"event"`
	DeviceID string `json:"deviceId"`
	At       Time   `json:"at"`
	Alert    Alert  `json:"alert"`
}
