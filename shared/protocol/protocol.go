// Package protocol is the wire protocol between fleet-agent and fleet-relay:
// one websocket per agent at Path, one Message per frame. The hello and the
// welcome are JSON text frames; the welcome names the Codec of every later
// message, CBOR in binary frames when the agent offered it, else JSON (see
// codec.go). The agent authenticates the upgrade with its device token as
// a bearer token. Records (metric samples and events) carry the agent's spool
// sequence number; the relay stores them idempotently and answers with an
// Ack naming the highest sequence stored, after which the agent drops them
// from its spool. The full description, with limits and close codes, is
// docs/protocol.md. This package does no I/O.
package protocol

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// Version is the protocol version; it is part of Path and of Subprotocol.
const Version = 1

// Path is the websocket path on the relay.
const Path = "/agent/v1/ws"

// Subprotocol is negotiated on the upgrade.
const Subprotocol = "fleet.agent.v1"

// Limits.
const (
	// MaxCommandSignature bounds an UpdateOrder's signature text.
	MaxCommandSignature = 4 << 10
	// MaxMessageBytes bounds one message in either direction.
	MaxMessageBytes = 256 << 10
	// MaxBatch bounds the records of one Records message.
	MaxBatch = 500
	// MaxChannels bounds the channels of one heartbeat or hello.
	MaxChannels = 64
	// MaxEventDataBytes bounds an event's data object.
	MaxEventDataBytes = 8 << 10
	// MaxPointSamples bounds the samples of one Records item.
	MaxPointSamples = 512
	// MaxSeq bounds record sequence numbers (2^63-1: the relay's stores
	// keep them as signed 64-bit integers); a record above it is a
	// protocol error, and an agent's spool never numbers one above it.
	MaxSeq = 1<<63 - 1
	// MaxSeqStep bounds how far a record's seq may be above the one
	// before it: the previous record of its message, or for the first
	// the relay's last stored sequence of the device (Welcome.LastSeq,
	// Ack.Seq). A spool numbers its records one after another, and only
	// the records it drops (to its size and age bounds) between two
	// acknowledgements leave a gap: 2^32 is 13 years of an outage at 10
	// records a second. Without the bound one record numbered near MaxSeq
	// (sent with a device's token by something else than its agent) left
	// the agent no number to give its records above it; with it, reaching
	// there takes 2^31 stored records.
	MaxSeqStep = 1 << 32
)

// Message types. Agent to relay: Hello (first, exactly once), Heartbeat,
// Records, ConfigApplied, CommandStatus. Relay to agent: Welcome (answer
// to Hello), Ack, Config, Command. SentByAgent and SentByRelay say which.
const (
	TypeHello         = "hello"
	TypeHeartbeat     = "heartbeat"
	TypeRecords       = "records"
	TypeConfigApplied = "config_applied"
	TypeWelcome       = "welcome"
	TypeAck           = "ack"
	TypeConfig        = "config"
	// TypeCommand (relay to agent) asks the agent to reboot or update
	// (issue 28); TypeCommandStatus (agent to relay) reports a command's
	// progress.
	TypeCommand       = "command"
	TypeCommandStatus = "command_status"
)

// Close codes (websocket application range) with their meaning.
const (
	CloseProtocolError = 4000 // malformed, unknown or out-of-order message
	CloseTooLarge      = 4001 // message over MaxMessageBytes or a batch over MaxBatch
	CloseUnauthorized  = 4003 // token unknown or revoked (also sent as HTTP 401 before the upgrade)
	CloseReplaced      = 4009 // a newer connection of the same device took over
	CloseShutdown      = 4010 // relay shutting down (relays before 1012 was used); reconnect with backoff
	// CloseServiceRestart (websocket's 1012, "service restart") is sent by
	// a draining relay (SIGTERM): reconnect at once, to the next relay URL
	// when the agent has several.
	CloseServiceRestart = 1012
)

// Message is the envelope of every frame; Type selects which of the other
// fields is set.
type Message struct {
	Type          string         `json:"type" cbor:"1,keyasint,omitempty"`
	Hello         *Hello         `json:"hello,omitempty" cbor:"2,keyasint,omitempty"`
	Heartbeat     *Heartbeat     `json:"heartbeat,omitempty" cbor:"3,keyasint,omitempty"`
	Records       *Records       `json:"records,omitempty" cbor:"4,keyasint,omitempty"`
	ConfigApplied *ConfigApplied `json:"configApplied,omitempty" cbor:"5,keyasint,omitempty"`
	Welcome       *Welcome       `json:"welcome,omitempty" cbor:"6,keyasint,omitempty"`
	Ack           *Ack           `json:"ack,omitempty" cbor:"7,keyasint,omitempty"`
	Config        *Config        `json:"config,omitempty" cbor:"8,keyasint,omitempty"`
	Command       *Command       `json:"command,omitempty" cbor:"9,keyasint,omitempty"`
	CommandStatus *CommandStatus `json:"commandStatus,omitempty" cbor:"10,keyasint,omitempty"`
}

// Hello opens a session.
type Hello struct {
	AgentVersion    string `json:"agentVersion" cbor:"1,keyasint,omitempty"`
	FirmwareVersion string `json:"firmwareVersion" cbor:"2,keyasint,omitempty"`
	Model           string `json:"model" cbor:"3,keyasint,omitempty"`
	DeviceName      string `json:"deviceName" cbor:"4,keyasint,omitempty"`
	DeviceLocation  string `json:"deviceLocation" cbor:"5,keyasint,omitempty"`
	Timezone        string `json:"timezone" cbor:"6,keyasint,omitempty"`
	// AppliedVersion is the desired-config version the agent runs now (0:
	// none yet); the relay sends a Config when it holds a newer one.
	AppliedVersion int64 `json:"appliedVersion" cbor:"7,keyasint,omitempty"`
	// HeartbeatInterval is the agent's heartbeat period; the relay marks the
	// device OFFLINE after three of them pass in silence.
	HeartbeatInterval Duration `json:"heartbeatInterval" cbor:"8,keyasint,omitempty"`
	// MetricsInterval is the agent's metrics period (optional; the relay
	// assumes 5m when it is absent). The relay records at most one
	// "heartbeat" event per MetricsInterval so the event stream stays
	// readable.
	MetricsInterval Duration `json:"metricsInterval,omitzero" cbor:"9,keyasint,omitzero"`
	// Codecs are the codecs the agent offers for the messages after the
	// welcome, in its order of preference (CBOR); JSON goes without saying.
	// Agents from before CBOR send none.
	Codecs []Codec `json:"codecs,omitempty" cbor:"10,keyasint,omitempty"`
	// Arch is the agent binary's architecture, "amd64", "arm64" or
	// "armv7" (ArchOf); the relay picks the release of a rollout's version
	// built for it. Agents from before updates send none.
	Arch string `json:"arch,omitempty" cbor:"11,keyasint,omitempty"`
}

// Welcome answers Hello.
type Welcome struct {
	DeviceID   string        `json:"deviceId" cbor:"1,keyasint,omitempty"`
	ServerTime resource.Time `json:"serverTime" cbor:"2,keyasint,omitempty"`
	// LastSeq is the highest record sequence the relay has stored for this
	// device, so an agent that lost its acks can drop what was stored.
	LastSeq uint64 `json:"lastSeq" cbor:"3,keyasint,omitempty"`
	// Codec is the codec of every later message of the connection, both
	// ways: one of the hello's Codecs, or empty for JSON (what a relay from
	// before CBOR answers).
	Codec Codec `json:"codec,omitempty" cbor:"4,keyasint,omitempty"`
}

// Heartbeat reports liveness and current state.
type Heartbeat struct {
	At             resource.Time         `json:"at" cbor:"1,keyasint,omitempty"`
	Status         resource.DeviceStatus `json:"status" cbor:"2,keyasint,omitempty"` // ONLINE, REBOOTING, UPDATING or ERROR
	IPAddress      string                `json:"ipAddress" cbor:"3,keyasint,omitempty"`
	AppliedVersion int64                 `json:"appliedVersion" cbor:"4,keyasint,omitempty"`
	VPN            *VPN                  `json:"vpn,omitempty" cbor:"5,keyasint,omitempty"`
	Channels       []ChannelState        `json:"channels" cbor:"6,keyasint"`
}

// VPN is the tunnel state.
type VPN struct {
	Up            bool           `json:"up" cbor:"1,keyasint,omitempty"`
	InterfaceName string         `json:"interfaceName" cbor:"2,keyasint,omitempty"`
	Endpoint      string         `json:"endpoint" cbor:"3,keyasint,omitempty"`
	PeerCount     int            `json:"peerCount" cbor:"4,keyasint,omitempty"`
	LastHandshake *resource.Time `json:"lastHandshake,omitempty" cbor:"5,keyasint,omitempty"`
}

// ChannelState is one channel's reported state.
type ChannelState struct {
	ID                 string `json:"id" cbor:"1,keyasint,omitempty"`
	Available          bool   `json:"available" cbor:"2,keyasint,omitempty"`
	Live               string `json:"live" cbor:"3,keyasint,omitempty"`
	TxOn               bool   `json:"txOn" cbor:"4,keyasint,omitempty"`
	Error              string `json:"error" cbor:"5,keyasint,omitempty"`
	PassthroughAddress string `json:"passthroughAddress,omitempty" cbor:"6,keyasint,omitempty"`
	// Points is the latest reading of each of the channel's points (agents
	// from before points send none).
	Points []PointState `json:"points,omitempty" cbor:"7,keyasint,omitempty"`
}

// PointState is a point's latest reading at the agent. Quality is "good"
// (Value holds it), "bad" (the read failed; Error says why) or "stale" (not
// read for 3 × its interval). Name is the point's name within the channel.
type PointState struct {
	Name    string        `json:"name" cbor:"1,keyasint,omitempty"`
	Value   float64       `json:"value" cbor:"2,keyasint,omitempty"`
	Quality string        `json:"quality" cbor:"3,keyasint,omitempty"`
	Error   string        `json:"error,omitempty" cbor:"4,keyasint,omitempty"`
	At      resource.Time `json:"at" cbor:"5,keyasint,omitempty"`
}

// Telemetry returns the channel's telemetry part.
func (c ChannelState) Telemetry() serialcfg.Telemetry {
	return serialcfg.Telemetry{Live: c.Live, TxOn: c.TxOn, Error: c.Error}
}

// Records carries spooled records, in increasing Seq.
type Records struct {
	Items []Record `json:"items" cbor:"1,keyasint"`
}

// Record is one spooled metric sample, event or batch of point samples;
// exactly one is set.
type Record struct {
	Seq    uint64                 `json:"seq" cbor:"1,keyasint,omitempty"`
	Metric *resource.MetricSample `json:"metric,omitempty" cbor:"2,keyasint,omitempty"`
	Event  *Event                 `json:"event,omitempty" cbor:"3,keyasint,omitempty"`
	Points *PointBatch            `json:"points,omitempty" cbor:"4,keyasint,omitempty"`
}

// PointBatch is the point samples the agent recorded in one sampling
// round (at most MaxPointSamples), spooled and acknowledged as one record.
type PointBatch struct {
	Samples []PointSample `json:"samples" cbor:"1,keyasint"`
}

// PointSample is one recorded reading of a point: Point is its id
// ("rs485-1.boiler_temp"), At the agent's time of the read. Error is "" for
// a good reading (Value holds it; a bool is 0 or 1) and the cause of a bad
// one (quality "bad"; Value is then 0).
type PointSample struct {
	Point string        `json:"point" cbor:"1,keyasint,omitempty"`
	At    resource.Time `json:"at" cbor:"2,keyasint,omitempty"`
	Value float64       `json:"value" cbor:"3,keyasint,omitempty"`
	Error string        `json:"error,omitempty" cbor:"4,keyasint,omitempty"`
}

// Event is an agent event. ID is a cuid the agent made when the event
// happened, so a resend is recognised.
type Event struct {
	ID        string            `json:"id" cbor:"1,keyasint,omitempty"`
	Type      string            `json:"type" cbor:"2,keyasint,omitempty"`
	Severity  resource.Severity `json:"severity" cbor:"3,keyasint,omitempty"`
	Message   string            `json:"message" cbor:"4,keyasint,omitempty"`
	Data      json.RawMessage   `json:"data,omitempty" cbor:"5,keyasint,omitempty"`
	CreatedAt resource.Time     `json:"createdAt" cbor:"6,keyasint,omitempty"`
}

// Ack confirms that every record up to and including Seq is stored.
type Ack struct {
	Seq uint64 `json:"seq" cbor:"1,keyasint,omitempty"`
}

// Config is the device's full desired serial state at Version.
type Config struct {
	Version  int64           `json:"version" cbor:"1,keyasint,omitempty"`
	Enabled  bool            `json:"enabled" cbor:"2,keyasint,omitempty"`
	Mode     string          `json:"mode" cbor:"3,keyasint,omitempty"`
	Channels []ChannelConfig `json:"channels" cbor:"4,keyasint"`
}

// ChannelConfig is one channel's desired configuration.
type ChannelConfig struct {
	ID     string           `json:"id" cbor:"1,keyasint,omitempty"`
	Config serialcfg.Config `json:"config" cbor:"2,keyasint,omitempty"`
}

// ConfigApplied reports the outcome of applying a Config. Error is "" when
// every channel applied; otherwise it names the failures (each also sent as a
// serial.error event), and Version is still acknowledged so the relay does
// not resend a configuration that cannot apply.
type ConfigApplied struct {
	Version int64  `json:"version" cbor:"1,keyasint,omitempty"`
	Error   string `json:"error,omitempty" cbor:"2,keyasint,omitempty"`
}

// Duration is a time.Duration that marshals as a Go duration string ("30s").
type Duration struct{ time.Duration }

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error { return d.unmarshal(json.Unmarshal, b) }

// unmarshal decodes b, a duration string in some codec.
func (d *Duration) unmarshal(decode func([]byte, any) error, b []byte) error {
	var s string
	if err := decode(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// Event types the agent sends, and the ones the relay adds.
const (
	EventHeartbeat     = "heartbeat"
	EventAgentStarted  = "agent.started"
	EventAgentStopped  = "agent.stopped"
	EventDeviceOnline  = "device.online"
	EventDeviceOffline = "device.offline"
	// EventDeviceStatusChanged is every change of a device's status, data
	// {"from", "to"} (the relay's; issue 27).
	EventDeviceStatusChanged = "device.status_changed"
	EventConfigApplied       = "serial.config_applied"
	EventSerialError         = "serial.error"
	EventUSBAttached         = "usb.attached"
	EventUSBDetached         = "usb.detached"
	EventVPNDown             = "alert.vpn_down"
	EventVPNUp               = "vpn.up"
	EventAlertResolved       = "alert.resolved"
	EventChannelAvailable    = "serial.channel_available"
	EventChannelUnavailable  = "serial.channel_unavailable"
	// EventDeviceClaimed is the relay's record of a device registered (or
	// given a new token) through a claim; data {"claimId",
	// "serialNumber"} (issue 28).
	EventDeviceClaimed = "device.claimed"
	// EventIngestThrottled is the relay's record of a device sending
	// records faster than its ingest quota (at most one a minute); data
	// {"itemsPerSecond", "bytesPerMinute", "waitMs"} (issue 30).
	EventIngestThrottled = "ingest.throttled"
	// EventSpoolDropped reports records the agent dropped from its spool
	// (size or age bound) before the relay stored them; data {"count": n}.
	EventSpoolDropped = "spool.dropped"
	// EventSpoolQuarantined reports a spool segment the agent repaired at
	// start because it held corrupt bytes or records out of sequence; the
	// original is kept aside. Data: {"segment", "quarantine",
	// "disordered", "corruptBytes"}.
	EventSpoolQuarantined = "spool.quarantined"
)

// ArchOf is the release architecture of a binary built for goarch (and,
// for "arm", goarm): "amd64", "arm64", "armv7" ("armv6" and the like for
// other ARM levels, which no release is built for), else goarch.
func ArchOf(goarch, goarm string) string {
	if goarch == "arm" {
		if goarm == "" {
			goarm = "7"
		}
		return "armv" + strings.TrimSuffix(strings.TrimSuffix(goarm, ",softfloat"), ",hardfloat")
	}
	return goarch
}

// Commands (issue 28). The relay sends every command of the device that is
// not finished after the welcome and whenever one is added; the agent
// executes a command id at most once (it keeps the ids it took in its
// state directory, so a command sent again after a reconnect, a restart or
// a reboot is only answered with its current state) and reports progress
// with CommandStatus. One command per message.
const (
	CommandReboot = "reboot"
	CommandUpdate = "update"
)

// Command is one thing the relay asks of the agent.
type Command struct {
	// ID is the command's id (shared/ids), unique across the relay.
	ID   string `json:"id" cbor:"1,keyasint,omitempty"`
	Kind string `json:"kind" cbor:"2,keyasint,omitempty"`
	// Update is set for CommandUpdate.
	Update *UpdateOrder `json:"update,omitempty" cbor:"3,keyasint,omitempty"`
}

// UpdateOrder is what the agent needs to update itself: where to download
// the release (Path on the relay it is connected to, authorised by its
// device token; HTTP Range is honoured), its size and SHA-256 (hex), its
// minisign signature (the .minisig file's text, verified against the
// agent's --update-key before anything runs), and how long the new binary
// must stay healthy before the update is kept.
type UpdateOrder struct {
	RolloutID string   `json:"rolloutId" cbor:"1,keyasint,omitempty"`
	ReleaseID string   `json:"releaseId" cbor:"2,keyasint,omitempty"`
	Version   string   `json:"version" cbor:"3,keyasint,omitempty"`
	Path      string   `json:"path" cbor:"4,keyasint,omitempty"`
	Size      int64    `json:"size" cbor:"5,keyasint,omitempty"`
	SHA256    string   `json:"sha256" cbor:"6,keyasint,omitempty"`
	Signature string   `json:"signature" cbor:"7,keyasint,omitempty"`
	HealthFor Duration `json:"healthFor" cbor:"8,keyasint,omitempty"`
}

// Command states the agent reports (CommandStatus.State). An update goes
// downloading → installing → (the new binary runs) → healthy, or ends
// failed (nothing was swapped: a download, checksum or signature failure)
// or rolled_back (the new binary was swapped in and the old one restored;
// Error says why). A reboot reports rebooting just before it asks for the
// reboot, or failed.
const (
	CommandAccepted    = "accepted"
	CommandDownloading = "downloading"
	CommandInstalling  = "installing"
	CommandHealthy     = "healthy"
	CommandFailed      = "failed"
	CommandRolledBack  = "rolled_back"
	CommandRebooting   = "rebooting"
)

// CommandStatus reports a command's state from the agent. Version is the
// agent version running when it is sent.
type CommandStatus struct {
	ID      string `json:"id" cbor:"1,keyasint,omitempty"`
	State   string `json:"state" cbor:"2,keyasint,omitempty"`
	Error   string `json:"error,omitempty" cbor:"3,keyasint,omitempty"`
	Version string `json:"version,omitempty" cbor:"4,keyasint,omitempty"`
}

// ReleasePath is the agent endpoint's download path of release id
// (GET, device token as bearer, Range honoured).
func ReleasePath(id string) string { return "/agent/v1/releases/" + id }

// HTTPBase is a relay's base URL (http, https, ws or wss, as --relay takes
// it) for the agent endpoint's HTTP routes (ClaimPath, ReleasePath): ws
// becomes http and wss https, a trailing slash is dropped.
func HTTPBase(relay string) string {
	relay = strings.TrimRight(relay, "/")
	switch {
	case strings.HasPrefix(relay, "ws://"):
		return "http://" + strings.TrimPrefix(relay, "ws://")
	case strings.HasPrefix(relay, "wss://"):
		return "https://" + strings.TrimPrefix(relay, "wss://")
	}
	return relay
}

// ClaimPath is the agent endpoint that redeems a claim token (POST, see
// ClaimRequest); it answers ClaimResponse.
const ClaimPath = "/agent/v1/claim"

// ClaimRequest is the body of POST ClaimPath: the claim token is the
// bearer token of the request, never in the body or URL.
type ClaimRequest struct {
	SerialNumber string `json:"serialNumber"`
	Model        string `json:"model"`
	Name         string `json:"name,omitempty"`
	Location     string `json:"location,omitempty"`
}

// ClaimResponse answers a redeemed claim: the device and its device
// token, which the agent keeps (StateDir/device-token, mode 0600) and uses
// from then on.
type ClaimResponse struct {
	DeviceID string `json:"deviceId"`
	Token    string `json:"token"`
}
