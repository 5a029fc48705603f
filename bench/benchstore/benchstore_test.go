package benchstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/fleet/fleet/bench/benchstore"
	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/sqlitetest"
)

// TestProvisionAndCountMetrics prepares a tenant on a real SQLite store,
// stores samples as the agent endpoint does (more than one page of
// GET /metrics for one device) and counts them back through the API's
// service, whole and in a narrower window.
func TestProvisionAndCountMetrics(t *testing.T) {
	ctx := context.Background()
	st := sqlitetest.Open(t)
	ten, err := benchstore.Provision(ctx, st, "Bench", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(ten.Devices) != 3 || len(ten.Tokens) != 3 || ten.Tokens[2] == "" {
		t.Fatalf("tenant %+v", ten)
	}
	l, err := st.Devices().ListDevices(ctx, ten.Org, cloud.DeviceFilter{Page: cloud.Page{Limit: 10}})
	if err != nil || len(l.Data) != 3 || l.Data[0].Model != "IG-500" {
		t.Fatalf("devices of the tenant: %+v, %v", l.Data, err)
	}
	if k, err := st.ListKeys(ctx, ten.Org); err != nil || len(k) != 1 || len(k[0].Scopes) != len(cloud.AllScopes) {
		t.Fatalf("keys of the tenant: %+v, %v", k, err)
	}

	agents, err := sqlite.NewAgentStore(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer agents.Close()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	store := func(dev, n int) {
		var items []protocol.Record
		for i := range n {
			items = append(items, protocol.Record{Seq: uint64(i + 1), Metric: &resource.MetricSample{CapturedAt: resource.T(base.Add(time.Duration(i) * time.Millisecond)),
				CPUPct: 10, MemPct: 20, DiskUsedPct: 30, TempCPU: 40, LoadAvg1: 0.5}})
		}
		in := agentlink.RecordsIn{Device: agentlink.Device{ID: ten.Devices[dev], OrgID: ten.Org, Model: "IG-500"}, Session: "bench", Items: items}
		if _, err := agents.Records(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	store(0, 2345)
	store(1, 5)

	counts, err := benchstore.CountMetrics(ctx, st.Devices(), ten.Org, ten.Devices, base.Add(-time.Minute), time.Now())
	if err != nil || len(counts) != 3 || counts[0] != 2345 || counts[1] != 5 || counts[2] != 0 {
		t.Fatalf("CountMetrics = %v, %v; want [2345 5 0]", counts, err)
	}
	// [base+100 ms, base+2099 ms]: two full pages and nothing after.
	counts, err = benchstore.CountMetrics(ctx, st.Devices(), ten.Org, ten.Devices[:1], base.Add(100*time.Millisecond), base.Add(2099*time.Millisecond))
	if err != nil || len(counts) != 1 || counts[0] != 2000 {
		t.Fatalf("CountMetrics in a window = %v, %v; want [2000]", counts, err)
	}
}
