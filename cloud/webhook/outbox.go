package webhook

import (
	"time"

	"github.com/fleet/fleet/cloud"
)

// The outbox's store and the types of its calls are declared in cloud
// (cloud.Outbox), with the other parts of the store bundle; they keep their
// names here.
type (
	State    = cloud.DeliveryState
	Delivery = cloud.OutboxDelivery
	Attempt  = cloud.OutboxAttempt
	Secrets  = cloud.WebhookSecrets
	Store    = cloud.Outbox
	Shared   = cloud.SharedOutbox
)

// Delivery states. Pending deliveries are (re)tried; the others are final.
const (
	StatePending   = cloud.DeliveryPending
	StateDelivered = cloud.DeliveryDelivered
	StateFailed    = cloud.DeliveryFailed
	StateExhausted = cloud.DeliveryExhausted
)

// Event names.
const (
	EventSignal            = "serial.signal"
	EventAlertOpened       = "alert.opened"
	EventAlertAcknowledged = "alert.acknowledged"
	EventAlertResolved     = "alert.resolved"
)

// MaxLease bounds the lease of a shared outbox's delivery: a relay that
// died mid-attempt leaves its deliveries to another within this time.
const MaxLease = 30 * time.Second
