package agentlink

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// ErrUnauthorized is returned by Store.AuthDevice for an unknown or revoked
// device token.
var ErrUnauthorized = errors.New("agentlink: unknown or revoked device token")

// ErrSessionGone is returned by the Store when the session named in a write
// no longer owns its device: a newer connection took over, or the sweeper
// marked the device OFFLINE. The connection must close.
var ErrSessionGone = errors.New("agentlink: session no longer owns the device")

// ErrSuperseded is returned by Store.Connect when the device's session was
// opened after the connection asking: that attempt's write came late (a
// slow store, an agent that gave up on it and dialled again), and the
// newer connection keeps the device.
var ErrSuperseded = errors.New("agentlink: a newer connection holds the device")

// The agent endpoint's store and the types of its calls are declared in
// cloud (cloud.AgentStore), with the other parts of the store bundle; they
// keep their names here.
type (
	Store            = cloud.AgentStore
	Device           = cloud.AgentDevice
	StatusChange     = cloud.StatusChange
	HelloIn          = cloud.HelloIn
	HelloOut         = cloud.HelloOut
	HeartbeatIn      = cloud.HeartbeatIn
	HeartbeatOut     = cloud.HeartbeatOut
	RecordsIn        = cloud.RecordsIn
	RecordsOut       = cloud.RecordsOut
	ConfigAppliedIn  = cloud.ConfigAppliedIn
	ConfigAppliedOut = cloud.ConfigAppliedOut
)

// The functions below are the parts of the contract's behaviour that every
// Store implementation shares.

// RemapEventID is the id under which a store keeps an agent event whose own
// id already belongs to another device's event: derived from both, so that
// a resend is still recognised, and never the other device's row.
func RemapEventID(deviceID, id string) string {
	sum := sha256.Sum256([]byte(deviceID + "\x00" + id))
	return "r" + hex.EncodeToString(sum[:])[:ids.Length-1]
}

// MergeChannels returns have with the channel states of later applied over
// it (a channel already there takes the later state, a new one is
// appended), without changing have's array: a device's channels after a
// report of some of them (the store takes every channel's state;
// storetest reports through it as the agent endpoint does).
func MergeChannels(have, later []protocol.ChannelState) []protocol.ChannelState {
	if have == nil {
		return later
	}
	have = slices.Clone(have)
next:
	for _, c := range later {
		for k := range have {
			if have[k].ID == c.ID {
				have[k] = c
				continue next
			}
		}
		have = append(have, c)
	}
	return have
}

// NewEvent is an event the relay records itself (device.online,
// device.offline), with a fresh id and data encoded as JSON ({} for nil).
func NewEvent(typ string, sev resource.Severity, msg string, data any, at time.Time) *resource.Event {
	b, err := json.Marshal(data)
	if err != nil || data == nil {
		b = []byte("{}")
	}
	return &resource.Event{ID: ids.New(), Type: typ, Severity: sev, Message: msg, Data: b, CreatedAt: resource.T(at)}
}

// BuildConfig is a device's desired configuration as Store.DesiredConfig
// returns it: every channel of model with its stored configuration (JSON by
// channel id) or the catalog's default; a stored one that does not decode
// is replaced by the default and reported to bad.
func BuildConfig(model catalog.Model, cfg protocol.Config, stored map[string]string, bad func(channel string, err error)) protocol.Config {
	for _, ch := range model.Channels {
		c := ch.DefaultConfig()
		if raw, ok := stored[ch.ID]; ok {
			if v, err := serialcfg.Decode([]byte(raw)); err != nil {
				bad(ch.ID, err)
			} else {
				c = v
			}
		}
		cfg.Channels = append(cfg.Channels, protocol.ChannelConfig{ID: ch.ID, Config: c})
	}
	return cfg
}
