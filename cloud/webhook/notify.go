package webhook

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// Notifier turns what the relay learns into deliveries: it is the
// cloud.Observer of signal forwarding (a heartbeat with changed channels or
// points becomes one serial.signal delivery to the device's forwarding URL) and the
// cloud.AlertObserver that wakes the dispatcher when an alert changed (the
// store queued its notifications in the same transaction).
//
// A device's forwarding (its organization and URL) is read from the store
// at its first changed heartbeat and kept: heartbeats with changes come
// from every connected agent, and on a shared store each read is a round
// trip to the database. What changes forwarding (PATCH /serial) also
// changes the device's desired configuration, so DesiredConfigChanged
// forgets the device's entry; a relay of a cluster calls it for changes
// made through any relay, and ForgetForwarding when it may have missed
// some.
type Notifier struct {
	d     *Dispatcher
	store Store
	log   *slog.Logger
	now   func() time.Time

	fmu sync.Mutex
	fwd map[string]forwarding // by device
	gen uint64                // raised by every forgetting: a read begun before is not kept
}

// forwarding is a device's signal forwarding as the store last said.
type forwarding struct{ orgID, url string }

var (
	_ cloud.Observer              = (*Notifier)(nil)
	_ cloud.AlertObserver         = (*Notifier)(nil)
	_ cloud.DesiredConfigObserver = (*Notifier)(nil)
)

// NewNotifier returns a Notifier that enqueues on d.
func NewNotifier(d *Dispatcher) *Notifier {
	return &Notifier{d: d, store: d.cfg.Store, log: d.log, now: d.cfg.Now, fwd: map[string]forwarding{}}
}

// DesiredConfigChanged implements cloud.DesiredConfigObserver: the
// device's forwarding may have changed with it, so its next signal reads
// it again.
func (n *Notifier) DesiredConfigChanged(deviceID string) {
	n.fmu.Lock()
	delete(n.fwd, deviceID)
	n.gen++
	n.fmu.Unlock()
}

// ForgetForwarding forgets every device's forwarding: after a relay missed
// other relays' changes (its listener was disconnected).
func (n *Notifier) ForgetForwarding() {
	n.fmu.Lock()
	clear(n.fwd)
	n.gen++
	n.fmu.Unlock()
}

// forwardingOf returns the device's organization and forwarding URL ("" when
// it does not forward), from what was kept or from the store.
func (n *Notifier) forwardingOf(ctx context.Context, deviceID string) (string, string, error) {
	n.fmu.Lock()
	f, ok := n.fwd[deviceID]
	gen := n.gen
	n.fmu.Unlock()
	if ok {
		return f.orgID, f.url, nil
	}
	orgID, url, err := n.store.Forwarding(ctx, deviceID)
	if err != nil {
		return "", "", err
	}
	n.fmu.Lock()
	if n.gen == gen {
		n.fwd[deviceID] = forwarding{orgID, url}
	}
	n.fmu.Unlock()
	return orgID, url, nil
}

// HeartbeatStored enqueues one serial.signal delivery carrying hb.Changed
// and hb.ChangedPoints when the device forwards signals; nothing when no
// channel and no point changed.
func (n *Notifier) HeartbeatStored(ctx context.Context, dev cloud.DeviceRef, hb cloud.Heartbeat) {
	if len(hb.Changed) == 0 && len(hb.ChangedPoints) == 0 {
		return
	}
	orgID, url, err := n.forwardingOf(ctx, dev.ID)
	if err != nil {
		n.log.Error("signal webhook: forwarding lookup", "device", dev.ID, "err", err)
		return
	}
	if url == "" {
		return
	}
	at := hb.At
	if at.IsZero() {
		at = n.now()
	}
	chans := hb.Changed
	if chans == nil {
		chans = []resource.SignalChannel{} // only points changed: "channels" stays an array
	}
	body, err := json.Marshal(resource.SignalWebhook{Event: EventSignal, DeviceID: dev.ID, At: resource.T(at), Channels: chans, Points: hb.ChangedPoints})
	if err != nil {
		n.log.Error("signal webhook: encode", "device", dev.ID, "err", err)
		return
	}
	n.enqueue(ctx, &Delivery{OrgID: orgID, DeviceID: dev.ID, Event: EventSignal, URL: url, Body: body})
}

// AlertChanged wakes the dispatcher: the store wrote the alert's
// deliveries (the organization's alert webhook, the rule's notification
// channels) to the outbox in the transaction that changed the alert
// (sqlstore.QueueAlertNotifications), and the dispatcher sends them as it
// reads them from there, once, whether or not this relay lives to say so.
func (n *Notifier) AlertChanged(context.Context, string, resource.Alert) { n.d.Poke() }

func (n *Notifier) enqueue(ctx context.Context, dl *Delivery) {
	if err := ValidateURL("url", dl.URL); err != nil {
		n.log.Warn("webhook not sent: invalid URL", "org", dl.OrgID, "device", dl.DeviceID, "event", dl.Event, "err", err)
		return
	}
	// Submit does not wait for the outbox write: the caller (an agent's
	// connection, an API request) has already stored what caused the
	// webhook, so waiting would add latency without adding durability. The
	// first attempt still follows the write.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := n.d.Submit(ctx, dl); err != nil {
		n.log.Error("webhook not queued", "org", dl.OrgID, "device", dl.DeviceID, "event", dl.Event, "err", err)
	}
}

// MetricsStored does nothing: metrics do not cause webhooks.
func (n *Notifier) MetricsStored(context.Context, cloud.DeviceRef, []resource.MetricSample) {}

// EventsStored does nothing: device events do not cause webhooks.
func (n *Notifier) EventsStored(context.Context, cloud.DeviceRef, []resource.Event) {}

// StatusChanged does nothing: status changes reach webhooks as alerts.
func (n *Notifier) StatusChanged(context.Context, cloud.DeviceRef, resource.DeviceStatus, resource.DeviceStatus) {
}
