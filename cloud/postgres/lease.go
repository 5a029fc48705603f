package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// serverMs is the database server's clock in Unix milliseconds: leases are
// timed by it, so relays whose clocks differ still agree on them.
const serverMs = `(extract(epoch from clock_timestamp()) * 1000)::bigint`

// TryLease takes or renews the cluster-wide lease name for owner until ttl
// from now, unless another owner holds it and it has not run out; it
// reports whether owner holds it. A job that one relay at a time should run
// (the device_offline sweep, retention) runs while its relay holds the
// lease; when that relay dies, another takes the lease within ttl.
//
// Asking writes only when the lease changes hands or its holder has less
// than half of ttl left (callers ask more often than that): a lease another
// relay holds, or one of owner's that is still fresh, is answered by a
// read. Every write moves the data version (DataVersion), which empties the
// API's page and key caches on every relay; relays asking every few
// seconds would otherwise do that several times a second in a cluster.
func (db *DB) TryLease(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	var holder string
	var live, fresh bool
	err := db.Pool.QueryRow(ctx, `SELECT owner, lease_until > `+serverMs+`, lease_until - `+serverMs+` > $2
		FROM leases WHERE name = $1`, name, ttl.Milliseconds()/2).Scan(&holder, &live, &fresh)
	switch {
	case err == nil && live && holder != owner:
		return false, nil
	case err == nil && fresh && holder == owner:
		return true, nil
	case err != nil && !errors.Is(err, pgx.ErrNoRows):
		return false, storeError("postgres: lease %s: %w", name, err)
	}
	var got string
	err = db.Pool.QueryRow(ctx, `INSERT INTO leases (name, owner, lease_until) VALUES ($1, $2, `+serverMs+` + $3)
		ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, lease_until = excluded.lease_until
		WHERE leases.owner = excluded.owner OR leases.lease_until < `+serverMs+`
		RETURNING owner`, name, owner, ttl.Milliseconds()).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, storeError("postgres: lease %s: %w", name, err)
	}
	return got == owner, nil
}
