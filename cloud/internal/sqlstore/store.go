package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
)

// Dialect is what differs between the databases the shared code runs on,
// in the manner of dex's storage/sql flavor. The statements themselves are
// written once, with ? placeholders, INSERT OR IGNORE and ON CONFLICT …
// DO UPDATE (upsert); a store whose database spells them otherwise
// rewrites them in its Querier (PostgreSQL: $1, $2, … and ON CONFLICT DO
// NOTHING), once per statement text.
type Dialect struct {
	// Name prefixes the store's errors: "sqlite", "postgres".
	Name string
	// IsUnique reports a unique-constraint violation.
	IsUnique func(error) bool
	// Classify turns an error of the database into the store's: one of a
	// database that cannot be reached becomes cloud.ESERVICEUNAVAILABLE;
	// nil keeps every error as it is.
	Classify func(error) error
	// Changed, when set, runs in the transaction of a change that other
	// relays sharing the database must hear of, and tells them at commit
	// (PostgreSQL: NOTIFY); nil on a store no other relay shares.
	Changed func(ctx context.Context, tx Querier, c Change, id string) error
	// EventsAt, when set, makes sure that events created at atMs (Unix
	// milliseconds) have somewhere to go before a transaction writes them
	// (PostgreSQL: the day's partition, created before the transaction,
	// which would otherwise wait on the lock it takes).
	EventsAt func(ctx context.Context, atMs int64) error
	// LockRows ends a SELECT of rows the transaction changes next, locking
	// them (PostgreSQL: " FOR UPDATE"), SkipLocked one that takes only the
	// rows no other transaction holds (" FOR UPDATE SKIP LOCKED"); "" where
	// the one writer serializes every transaction.
	LockRows, SkipLocked string
	// OfflineAlso is what a device going OFFLINE clears besides its session
	// and deadline (PostgreSQL: ", agent_relay = NULL", the relay that
	// held it).
	OfflineAlso string
	// LockOrg is a statement that locks the organization's row (?) until
	// the transaction ends, so that its users change one at a time
	// whichever relay changes them; "" where the store's one writer
	// serializes every transaction (SQLite).
	LockOrg string
	// HasTags, when set, is a condition on a row of devices that holds
	// every one of tags (PostgreSQL: strpos), with its arguments; nil for
	// TagsWhere's default, SQLite's instr.
	HasTags func(tags []string) (string, []any)
}

// TagsWhere is a condition on a row of devices (named devices) that holds
// every one of tags, and its arguments; "" for no tags.
//
// devices.tags is the JSON array text json.Marshal wrote of tags that
// cloud.CheckDeviceTags admitted ([a-z0-9][a-z0-9_.:-]*: nothing JSON
// escapes), so a tag is an element exactly when its quoted form ("line-3")
// occurs in the text: the quotes bound it on both sides. A substring test
// per row is what the fleet page of 10,000 devices can afford (json_each
// per row cost it 50-100 ms); a tag the filter was given that no device can
// hold is quoted by JSON's rules, escapes included, and so matches nothing.
func (d Dialect) TagsWhere(tags []string) (string, []any) {
	if len(tags) == 0 {
		return "", nil
	}
	if d.HasTags != nil {
		return d.HasTags(tags)
	}
	var where []string
	var args []any
	for _, t := range tags {
		where = append(where, `instr(devices.tags, ?) > 0`)
		args = append(args, QuotedTag(t))
	}
	return strings.Join(where, ` AND `), args
}

// QuotedTag is tag as it appears in devices.tags: a JSON string.
func QuotedTag(tag string) string {
	b, _ := json.Marshal(tag) // a string always marshals
	return string(b)
}

// Change is what a change that other relays hear of (Dialect.Changed) was.
type Change int

// Changes other relays hear of.
const (
	ChangeOutbox     Change = iota // webhook deliveries were queued for any relay to take
	ChangeRevoked                  // the device's token (id) was revoked
	ChangeConfig                   // the device's (id) desired serial configuration changed
	ChangeRules                    // the organization's (id) rules, silences or notification channels changed
	ChangeDeviceTags               // a device's tags changed (id: "<org id> <device id>")
)

// Store is the one implementation of the store contract's queries, on a
// store's pools and transactions in its dialect. Embedded in the store
// (sqlite.DB, postgres.DB), its methods are the store's.
type Store struct {
	Dialect
	// R runs reads (SQLite: the readers' pool, each statement prepared
	// once; PostgreSQL: the pool).
	R Querier
	// W runs a write outside a transaction (SQLite: the writer;
	// PostgreSQL: the pool).
	W Querier
	// Tx runs fn in a write transaction.
	Tx func(ctx context.Context, fn func(Querier) error) error
	// Clock is the store's clock.
	Clock func() time.Time
}

// Wrap passes nil and domain errors through and wraps the others as the
// store's failure to do what.
func (d Dialect) Wrap(what string, err error) error {
	if err == nil || cloud.ErrorCode(err) != cloud.EINTERNAL {
		return err
	}
	err = fmt.Errorf("%s: %s: %w", d.Name, what, err)
	if d.Classify != nil {
		return d.Classify(err)
	}
	return err
}

// changed runs d.Changed, when set, in tx.
func (d Dialect) changed(ctx context.Context, tx Querier, c Change, id string) error {
	if d.Changed == nil {
		return nil
	}
	return d.Changed(ctx, tx, c, id)
}

// nowMs is the clock's time in Unix milliseconds.
func (s *Store) nowMs() int64 { return s.Clock().UnixMilli() }
