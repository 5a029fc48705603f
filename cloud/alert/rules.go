package alert

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// rule is an enabled rule of an organization as the engine indexes it.
type rule struct {
	cloud.AlertRule
	// metric is the index in cloud.RuleMetrics of a threshold rule's
	// metric; -1 for every other rule.
	metric int
	// hbResolves: an event rule on the agent's alert.vpn_down, which a
	// heartbeat reporting the tunnel up also resolves.
	hbResolves bool
}

// orgRules is an organization's enabled rules, indexed for the paths that
// read them: by scope (to build a device's view) and by kind.
type orgRules struct {
	sum      uint64           // fingerprint of every rule, enabled or not: equal sums, same rules
	byID     map[string]*rule // enabled rules
	anyScope []*rule          // scope {} (every device)
	byDevice map[string][]*rule
	byTag    map[string][]*rule // tag-scoped rules under their first tag
	samples  bool               // some threshold rule exists: samples are worth evaluating
	offline  []*rule
	status   []*rule
	events   map[string][]*rule // event rules under their type and their resolveOn
}

// ruleFields is a rule without its String method: every field prints.
type ruleFields cloud.AlertRule

// compileRules indexes rs.
func compileRules(rs []cloud.AlertRule) *orgRules {
	o := &orgRules{byID: map[string]*rule{}, byDevice: map[string][]*rule{}, byTag: map[string][]*rule{}, events: map[string][]*rule{}}
	h := fnv.New64a()
	for _, ar := range rs {
		fmt.Fprintf(h, "%+v\n", ruleFields(ar))
		if !ar.Enabled {
			continue
		}
		r := &rule{AlertRule: ar, metric: slices.Index(cloud.RuleMetrics, ar.Cond.Metric)}
		if ar.Cond.Kind != resource.ConditionThreshold || ar.Cond.Metric == "" {
			r.metric = -1
		}
		o.byID[r.ID] = r
		switch {
		case len(r.Scope.DeviceIDs) > 0:
			for _, id := range r.Scope.DeviceIDs {
				o.byDevice[id] = append(o.byDevice[id], r)
			}
		case len(r.Scope.Tags) > 0:
			first := slices.Min(r.Scope.Tags)
			o.byTag[first] = append(o.byTag[first], r)
		default:
			o.anyScope = append(o.anyScope, r)
		}
		switch r.Cond.Kind {
		case resource.ConditionThreshold:
			o.samples = true
		case resource.ConditionOffline:
			o.offline = append(o.offline, r)
		case resource.ConditionStatus:
			o.status = append(o.status, r)
		case resource.ConditionEvent:
			r.hbResolves = r.Cond.EventType == protocol.EventVPNDown
			o.events[r.Cond.EventType] = append(o.events[r.Cond.EventType], r)
			if r.Cond.ResolveOn != "" {
				o.events[r.Cond.ResolveOn] = append(o.events[r.Cond.ResolveOn], r)
			}
		}
	}
	o.sum = h.Sum64()
	return o
}

// inScope returns the rules whose scope holds the device.
func (o *orgRules) inScope(deviceID string, tags []string) []*rule {
	out := slices.Clone(o.anyScope)
	out = append(out, o.byDevice[deviceID]...)
	for _, t := range tags {
		for _, r := range o.byTag[t] {
			if cloud.InScope(r.Scope, deviceID, tags) {
				out = append(out, r)
			}
		}
	}
	return out
}

// ruleCache keeps each organization's rules until RulesChanged (or a move
// of the data version, or the cluster's notification) says they changed,
// and at most ttl. Reads take no lock: the hot path reads an atomic
// pointer.
type ruleCache struct {
	ttl  time.Duration
	load func(ctx context.Context, orgID string) ([]cloud.AlertRule, error)
	orgs sync.Map // orgID -> *orgSlot
}

// orgSlot is one organization's place in the cache.
type orgSlot struct {
	loading sync.Mutex // one load at a time
	gen     atomic.Uint64
	cur     atomic.Pointer[orgEntry]
}

type orgEntry struct {
	rules *orgRules
	at    time.Time // when read
	stale bool      // invalidated: read again before use
}

func (c *ruleCache) slot(orgID string) *orgSlot {
	if s, ok := c.orgs.Load(orgID); ok {
		return s.(*orgSlot)
	}
	s, _ := c.orgs.LoadOrStore(orgID, &orgSlot{})
	return s.(*orgSlot)
}

// get returns the organization's rules at now: the cached ones, or read
// from the store when missing, invalidated or older than ttl. When the
// store fails it answers the rules it had, if any, with the error.
func (c *ruleCache) get(ctx context.Context, orgID string, now time.Time) (*orgRules, error) {
	s := c.slot(orgID)
	if en := s.cur.Load(); en != nil && !en.stale && now.Sub(en.at) < c.ttl {
		return en.rules, nil
	}
	if en := s.cur.Load(); en != nil && !en.stale {
		// Expired, not invalidated: one caller reads the store while the
		// others go on with what it had.
		if !s.loading.TryLock() {
			return en.rules, nil
		}
	} else {
		s.loading.Lock()
	}
	defer s.loading.Unlock()
	old := s.cur.Load()
	if old != nil && !old.stale && now.Sub(old.at) < c.ttl {
		return old.rules, nil // loaded while this one waited
	}
	gen := s.gen.Load()
	rs, err := c.load(ctx, orgID)
	if err != nil {
		if old != nil {
			return old.rules, err
		}
		return nil, err
	}
	o := compileRules(rs)
	if old != nil && old.rules.sum == o.sum {
		o = old.rules // unchanged: devices keep their views
	}
	s.cur.Store(&orgEntry{rules: o, at: now})
	if s.gen.Load() != gen {
		s.markStale() // changed while it read: what it read may predate the change
	}
	return o, nil
}

// invalidate makes the next get of orgID read the store.
func (c *ruleCache) invalidate(orgID string) {
	if s, ok := c.orgs.Load(orgID); ok {
		s := s.(*orgSlot)
		s.gen.Add(1)
		s.markStale()
	}
}

// expireAll makes the next get of every organization read the store, the
// first caller of each reading while the others use what it had: any
// organization's rules may have changed, most did not.
func (c *ruleCache) expireAll() {
	c.orgs.Range(func(_, s any) bool {
		s.(*orgSlot).gen.Add(1)
		s.(*orgSlot).mark(false)
		return true
	})
}

func (s *orgSlot) markStale() { s.mark(true) }

// mark expires the current entry, and with stale invalidates it.
func (s *orgSlot) mark(stale bool) {
	for {
		en := s.cur.Load()
		if en == nil || en.stale || (!stale && en.at.IsZero()) {
			return
		}
		cp := *en
		cp.at = time.Time{}
		cp.stale = cp.stale || stale
		if s.cur.CompareAndSwap(en, &cp) {
			return
		}
	}
}
