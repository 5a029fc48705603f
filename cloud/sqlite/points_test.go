package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// TestLatestPointSamples: the newest stored sample of each of a device's
// points, from the head or, once compacted, from the newest chunk, a bad
// reading with its cause either way.
func TestLatestPointSamples(t *testing.T) {
	ctx := context.Background()
	s := openStores(t, filepath.Join(t.TempDir(), "fleet.db"), nil)
	db := s.Store.(*sqlite.DB)
	org := storetest.Org(t, s.Store, "acme")
	d, token := storetest.Device(t, s.Store, cloud.NewDevice{OrgID: org.ID, Name: "gw", SerialNumber: "SN-1", Model: "IG-500"})
	dev := storetest.Auth(t, s.Agent, token)
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	send := func(seq uint64, samples ...protocol.PointSample) {
		t.Helper()
		if _, err := s.Agent.Records(ctx, agentlink.RecordsIn{Device: dev, Session: "s", Items: []protocol.Record{{Seq: seq, Points: &protocol.PointBatch{Samples: samples}}}}); err != nil {
			t.Fatal(err)
		}
	}
	temp := protocol.PointSample{Point: "rs485-1.temp", At: resource.T(t0.Add(time.Second)), Value: 21.5}
	flow := protocol.PointSample{Point: "rs485-1.flow", At: resource.T(t0.Add(2 * time.Second)), Error: "modbus exception 2 (illegal data address)"}
	send(1, protocol.PointSample{Point: "rs485-1.temp", At: resource.T(t0), Value: 20}, temp,
		protocol.PointSample{Point: "rs485-1.flow", At: resource.T(t0), Value: 3}, flow)
	check := func(when string, want map[string]protocol.PointSample) {
		t.Helper()
		got, err := db.LatestPointSamples(ctx, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Errorf("%s: %+v, want %+v", when, got, want)
		}
		for p, w := range want {
			if g := got[p]; g.Point != w.Point || !g.At.Equal(w.At.Time) || g.Value != w.Value || g.Error != w.Error {
				t.Errorf("%s: %s is %+v, want %+v", when, p, g, w)
			}
		}
	}
	check("in the head", map[string]protocol.PointSample{"rs485-1.temp": temp, "rs485-1.flow": flow})
	if _, err := s.PointHistory.CompactPoints(ctx, cloud.PointCompaction{Before: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	check("in chunks", map[string]protocol.PointSample{"rs485-1.temp": temp, "rs485-1.flow": flow})
	newer := protocol.PointSample{Point: "rs485-1.flow", At: resource.T(t0.Add(time.Minute)), Value: 4.25}
	send(2, newer)
	check("a newer one in the head", map[string]protocol.PointSample{"rs485-1.temp": temp, "rs485-1.flow": newer})
}
