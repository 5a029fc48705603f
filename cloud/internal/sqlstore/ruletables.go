package sqlstore

import (
	"context"

	"github.com/fleet/fleet/shared/resource"
)

// RuleTables is what RuleService reads and changes of a store's rules,
// silences and notification channels, in the store's dialect.
type RuleTables interface {
	AlertTables
	// RuleReader runs reads.
	RuleReader() Querier
	// Wrap passes nil and domain errors through and wraps the others as
	// the store's failure to do what.
	Wrap(what string, err error) error
	// RulePage and SilencePage read a page of a list.
	RulePage(ctx context.Context, k Keyset[resource.AlertRule]) (resource.List[resource.AlertRule], error)
	SilencePage(ctx context.Context, k Keyset[resource.Silence]) (resource.List[resource.Silence], error)
	// RuleTx runs fn in a write transaction (AlertTx, so that it may
	// resolve alerts) that changes the organization's rules, silences or
	// channels: the organization's row is locked first (so that its
	// bounds and names are checked one change at a time, whichever relay
	// makes them), and other relays hear of the change at commit
	// (ChangeRules).
	RuleTx(ctx context.Context, orgID, what string, fn func(Querier) error) error
}

// RuleReader implements RuleTables.
func (s *Store) RuleReader() Querier { return s.R }

// RulePage implements RuleTables.
func (s *Store) RulePage(ctx context.Context, k Keyset[resource.AlertRule]) (resource.List[resource.AlertRule], error) {
	return listPage(ctx, s, k)
}

// SilencePage implements RuleTables.
func (s *Store) SilencePage(ctx context.Context, k Keyset[resource.Silence]) (resource.List[resource.Silence], error) {
	return listPage(ctx, s, k)
}

// RuleTx implements RuleTables.
func (s *Store) RuleTx(ctx context.Context, orgID, what string, fn func(Querier) error) error {
	return s.AlertTx(ctx, s.nowMs(), what, func(tx Querier) error {
		if s.LockOrg != "" {
			if _, err := tx.Exec(ctx, s.LockOrg, orgID); err != nil {
				return err
			}
		}
		if err := fn(tx); err != nil {
			return err
		}
		return s.changed(ctx, tx, ChangeRules, orgID)
	})
}
