package cloud

import (
	"context"
	"time"
)

// DeliveryState is a delivery's state in the outbox.
type DeliveryState string

// Delivery states. Pending deliveries are (re)tried; the others are final.
const (
	DeliveryPending   DeliveryState = "pending"
	DeliveryDelivered DeliveryState = "delivered" // a 2xx was received
	DeliveryFailed    DeliveryState = "failed"    // a status that is not retried (3xx, 4xx but 408/425/429), or a refused address
	DeliveryExhausted DeliveryState = "exhausted" // every attempt failed transiently
)

// OutboxDelivery is one webhook message in the outbox. Its ID is the
// X-Service-Delivery-Id and webhook-id of every attempt.
type OutboxDelivery struct {
	Seq           int64 // outbox order, set by the store on insert
	ID            string
	OrgID         string
	DeviceID      string
	Event         string
	URL           string
	Body          []byte
	State         DeliveryState
	Attempts      int // attempts made so far
	NextAttemptAt time.Time
	CreatedAt     time.Time
	// Kind is how the delivery is sent: "" or "webhook" a signed HTTPS
	// POST of Body (the alert and signal webhooks), "slack" an unsigned
	// POST of {"text": ...}, "email" a message through SMTP; for slack and
	// email Body is a notify.Message (JSON) that the sender renders, and
	// URL is the incoming webhook or "mailto:" and the addresses.
	Kind string
	// ChannelID is the notification channel the delivery is for ("" for
	// the organization's alert webhook and signal forwarding).
	ChannelID string
	// Claimed is set by a shared outbox's WriteOutbox on an inserted
	// delivery that this relay holds (its ordering queue is this relay's);
	// an unclaimed one is sent by the relay holding its queue.
	Claimed bool
}

// OutboxAttempt is the record of one attempt and of the delivery's state after it.
type OutboxAttempt struct {
	DeliveryID string
	Number     int // 1-based
	At         time.Time
	StatusCode int    // 0 when no response was received
	Error      string // "" when a response was received
	Duration   time.Duration
	// DeliveryState and NextAttemptAt are the delivery's state after the attempt.
	State         DeliveryState
	NextAttemptAt time.Time
}

// WebhookSecrets are the secrets an organization's deliveries are signed with.
type WebhookSecrets struct {
	Current  string
	Previous string // also signs webhook-signature during a rotation's grace period
}

// Outbox is the durable outbox. cloud/sqlite implements it.
type Outbox interface {
	// WriteOutbox inserts new deliveries, setting their Seq, and records
	// attempts together with the new state of their delivery, all in one
	// transaction.
	WriteOutbox(ctx context.Context, inserts []*OutboxDelivery, attempts []OutboxAttempt) error
	// Pending returns up to limit pending deliveries with Seq > after, in
	// Seq order, and the highest Seq of the outbox, both read from one
	// snapshot.
	Pending(ctx context.Context, after int64, limit int) (ds []*OutboxDelivery, maxSeq int64, err error)
	// OrgSecrets returns the organization's signing secret and, during the
	// grace period after a rotation, the previous one ("" otherwise).
	OrgSecrets(ctx context.Context, orgID string) (WebhookSecrets, error)
	// Forwarding returns the device's organization and signal-forwarding
	// URL; url is "" when forwarding is disabled or no URL is set.
	Forwarding(ctx context.Context, deviceID string) (orgID, url string, err error)
	// Prune deletes deliveries that ended before t, with their attempts.
	Prune(ctx context.Context, before time.Time) (int64, error)
}

// SharedOutbox is implemented by an outbox that several relays share
// (cloud/postgres). Deliveries are leased to one relay at a time, a whole
// ordering queue (device and kind) together, so that each delivery is
// attempted by one relay and a device's deliveries keep their order; a
// relay renews its leases while it lives, and when it dies another relay
// takes its queues once the leases ran out, under the same delivery ids.
// A webhook.Dispatcher on it sends only what it holds: the deliveries WriteOutbox
// marks Claimed, and those Claim hands it.
type SharedOutbox interface {
	Outbox
	// Claim leases to this relay, for lease, up to limit pending
	// deliveries of the ordering queues that no other relay holds (rows
	// other relays are writing are skipped), in Seq order, and returns
	// them.
	Claim(ctx context.Context, limit int, lease time.Duration) ([]*OutboxDelivery, error)
	// Renew extends every lease this relay holds by lease from now and
	// returns the ids of the pending deliveries it still holds.
	Renew(ctx context.Context, lease time.Duration) (held []string, err error)
	// SetLease sets the lease of the deliveries WriteOutbox claims
	// (webhook.MaxLease until set); the Dispatcher sets its Config.Lease.
	SetLease(lease time.Duration)
}
