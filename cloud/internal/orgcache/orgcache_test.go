package orgcache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/internal/orgcache"
)

// TestCacheKeepsEachOrgForTTL: a value is loaded once per organization and
// TTL, again once TTL passed; a failed load is not kept.
func TestCacheKeepsEachOrgForTTL(t *testing.T) {
	now := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	loads := map[string]int{}
	fail := false
	c := orgcache.Cache[int]{TTL: 30 * time.Second, Now: func() time.Time { return now },
		Load: func(_ context.Context, org string) (int, error) {
			if fail {
				return 0, errors.New("store down")
			}
			loads[org]++
			return loads[org], nil
		}}
	get := func(org string, want int) {
		t.Helper()
		if v, err := c.Get(context.Background(), org); err != nil || v != want {
			t.Fatalf("Get(%s) = %d, %v; want %d", org, v, err, want)
		}
	}
	get("a", 1)
	get("b", 1)
	now = now.Add(29 * time.Second)
	get("a", 1)
	now = now.Add(time.Second)
	get("a", 2)
	now = now.Add(time.Minute)
	fail = true
	if _, err := c.Get(context.Background(), "b"); err == nil {
		t.Fatal("a failed load answered from the stale entry")
	}
	fail = false
	get("b", 2)
}
