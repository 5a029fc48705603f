package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/postgres"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// partitions lists table's partitions by name.
func partitions(t *testing.T, db *postgres.DB, table string) map[string]bool {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass`, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		rows.Scan(&n)
		out[n] = true
	}
	return out
}

// TestPartitionsByDay: metrics and events are partitioned by day; a week
// ahead exists from the start; samples of any day (an agent's old spool,
// a clock running ahead) make their partition on demand, also when two
// relays write the same new day at once; retention drops the partitions of
// whole old days and trims the boundary day.
func TestPartitionsByDay(t *testing.T) {
	ctx := context.Background()
	url := migratedDB(t)
	now := time.Date(2026, 7, 10, 12, 0, 0, 0, time.UTC)
	open := func() *postgres.DB {
		db := openDB(t, url)
		db.Now = func() time.Time { return now }
		return db
	}
	a, b := open(), open()
	if _, _, err := a.SweepRetention(ctx, 30*24*time.Hour); err != nil { // also makes the days ahead of now
		t.Fatal(err)
	}
	for _, table := range []string{"metrics", "events"} {
		p := partitions(t, a, table)
		for d := 0; d <= 7; d++ {
			name := fmt.Sprintf("%s_d%s", table, now.AddDate(0, 0, d).Format("20060102"))
			if !p[name] {
				t.Errorf("partition %s missing (have %v)", name, p)
			}
		}
	}
	org, err := a.CreateOrg(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	d, _, err := a.AddDevice(ctx, cloud.NewDevice{OrgID: org.ID, Name: "gw", SerialNumber: "S1", Model: "IG-500"})
	if err != nil {
		t.Fatal(err)
	}
	dev := agentlink.Device{ID: d.ID, OrgID: org.ID, Model: "IG-500"}
	// Two relays write samples and events of 40 days ago at once.
	old := now.AddDate(0, 0, -40)
	var wg sync.WaitGroup
	for i, db := range []*postgres.DB{a, b} {
		s := postgres.NewAgentStore(db, nil, fmt.Sprint("relay-", i))
		defer s.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			var items []protocol.Record
			for k := 0; k < 50; k++ {
				at := old.Add(time.Duration(i*50+k) * time.Minute)
				items = append(items, protocol.Record{Seq: uint64(k + 1), Metric: &resource.MetricSample{CapturedAt: resource.T(at)}},
					protocol.Record{Seq: uint64(k + 1), Event: &protocol.Event{ID: ids.New(), Type: "late", Severity: resource.SeverityInfo, CreatedAt: resource.T(at)}})
			}
			if _, err := s.Records(ctx, agentlink.RecordsIn{Device: dev, Session: "s", Items: items}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	oldName := "metrics_d" + old.Format("20060102")
	if !partitions(t, a, "metrics")[oldName] {
		t.Fatalf("no partition %s after writing its day", oldName)
	}
	m, err := a.Devices().Metrics(ctx, org.ID, d.ID, cloud.MetricsQuery{From: old, To: old.Add(24 * time.Hour), Limit: 1000})
	if err != nil || len(m.Data) != 100 {
		t.Fatalf("old samples: %d, %v", len(m.Data), err)
	}
	// A boundary day: samples just before and after the cut.
	cut := now.Add(-30 * 24 * time.Hour)
	s := postgres.NewAgentStore(a, nil, "relay-x")
	defer s.Close()
	if _, err := s.Records(ctx, agentlink.RecordsIn{Device: dev, Session: "s", Items: []protocol.Record{
		{Seq: 200, Metric: &resource.MetricSample{CapturedAt: resource.T(cut.Add(-time.Minute))}},
		{Seq: 201, Metric: &resource.MetricSample{CapturedAt: resource.T(cut.Add(time.Minute))}},
	}}); err != nil {
		t.Fatal(err)
	}
	mDel, eDel, err := b.SweepRetention(ctx, 30*24*time.Hour)
	if err != nil || mDel != 101 || eDel != 100 {
		t.Fatalf("sweep deleted %d metrics and %d events (%v), want 101 and 100", mDel, eDel, err)
	}
	if partitions(t, a, "metrics")[oldName] || partitions(t, a, "events")["events_d"+old.Format("20060102")] {
		t.Errorf("the old day's partitions survived the sweep")
	}
	if !partitions(t, a, "metrics")["metrics_d"+cut.Format("20060102")] {
		t.Errorf("the boundary day's partition was dropped")
	}
	m, _ = a.Devices().Metrics(ctx, org.ID, d.ID, cloud.MetricsQuery{From: cut.Add(-time.Hour), To: cut.Add(time.Hour)})
	if len(m.Data) != 1 || !m.Data[0].CapturedAt.Equal(cut.Add(time.Minute)) {
		t.Errorf("boundary day after the sweep: %+v", m.Data)
	}
	// The handle that did not sweep still writes to a day whose partition
	// the other dropped: it makes it again.
	if _, err := s.Records(ctx, agentlink.RecordsIn{Device: dev, Session: "s", Items: []protocol.Record{
		{Seq: 300, Metric: &resource.MetricSample{CapturedAt: resource.T(old.Add(time.Hour))}},
	}}); err != nil {
		t.Fatalf("write to a dropped day: %v", err)
	}
}
