package api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/api"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/test/rig/dialects"
)

// BenchmarkAuditPutChannel is issue 30's "audit write cost per API write":
// PUT /serial/channels/{id} through two real HTTP servers on loopback on
// one real SQLite store, one whose changes carry the key's actor (the
// store writes the audit record in the change's transaction) and one whose
// serial service sees the same request without it (no record), the two
// alternating request by request in one run (which goes first alternates
// too). It reports each side's throughput and the share of the
// throughput the record costs (target ≤ 5 %).
func BenchmarkAuditPutChannel(b *testing.B) {
	ctx := context.Background()
	s := dialects.SQLite(b, nil)
	org := storetest.Org(b, s.Store, "bench")
	d, _ := storetest.Device(b, s.Store, cloud.NewDevice{OrgID: org.ID, Name: "Press line 1", SerialNumber: "SN-1", Model: "IG-500"})
	_, key, err := s.Store.CreateKey(ctx, org.ID, "bench", cloud.AllScopes, 0)
	if err != nil {
		b.Fatal(err)
	}
	auth := apikey.NewAuthenticator(s.Store.Keys(), time.Now, 100)
	server := func(audited bool) *httptest.Server {
		srv := httptest.NewServer(api.NewServer(api.Config{
			Devices: s.Store.Devices(), Serial: actorSerial{s.Store.Serial(), audited}, Alerts: s.Store.Alerts(),
			Auth: auth, Versioner: s.Store.Versioner(), RateLimit: 1 << 30,
			Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
		}))
		b.Cleanup(srv.Close)
		return srv
	}
	sides := [2]*httptest.Server{server(true), server(false)}
	client := &http.Client{Timeout: 30 * time.Second}
	// Each PUT changes the channel (two baud rates in turn: each side's
	// first request of a pair sends the one, its second the other) and carries
	// ten points, as a configured line does.
	var bodies [2][]byte
	for i, baud := range []int{9600, 19200} {
		cfg := serialcfg.RS485{BaudRate: baud, DataBits: 8, Parity: "even", StopBits: 1, Mode: "modbus_rtu_master", SlaveID: 7,
			Tx: serialcfg.RS485Tx{Enabled: true, IntervalMs: 1000, Register: 40, Value: 1}}
		for p := range 10 {
			cfg.Points = append(cfg.Points, serialcfg.RS485Point{Name: fmt.Sprintf("p%d", p), Function: "holding", Register: 2 * p, Type: "f32", Unit: "bar"})
		}
		bodies[i] = must(serialcfg.Config{Kind: serialcfg.KindRS485, RS485: &cfg}.MarshalJSON())
	}
	path := api.Prefix + "/devices/" + d.ID + "/serial/channels/rs485-1"
	put := func(srv *httptest.Server, body []byte) {
		req, err := http.NewRequest(http.MethodPut, srv.URL+path, bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		res, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			b.Fatalf("PUT: %d %s", res.StatusCode, out)
		}
	}
	for i := range 20 { // warm both servers' connections and the store
		put(sides[i%2], bodies[i%2])
	}
	before := auditCount(b, s.Store, org.ID)
	var took [2][]time.Duration
	n := 0
	for b.Loop() {
		for j := range 2 {
			side := (n + j) % 2
			t0 := time.Now()
			put(sides[side], bodies[j])
			took[side] = append(took[side], time.Since(t0))
		}
		n++
	}
	if got := auditCount(b, s.Store, org.ID) - before; got != n {
		b.Fatalf("%d audit records of %d audited PUTs", got, n)
	}
	// Throughput of one client, from the median request time of each side:
	// a machine busy with other work stalls single requests of either side
	// now and then, and a sum would charge the stalls to whichever side
	// they fell on.
	with, without := 1/median(took[0]).Seconds(), 1/median(took[1]).Seconds()
	b.ReportMetric(with, "with-req/s")
	b.ReportMetric(without, "without-req/s")
	b.ReportMetric((1-with/without)*100, "audit-cost-%")
}

// median is the median of ds (which it sorts).
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// auditCount is how many audit records the organization has.
func auditCount(b *testing.B, st cloud.Store, orgID string) int {
	b.Helper()
	n := 0
	f := cloud.AuditFilter{Limit: cloud.MaxAuditPage}
	for {
		p, err := st.Audit().ListAudit(context.Background(), orgID, f)
		if err != nil {
			b.Fatal(err)
		}
		n += len(p.Records)
		if p.Next == "" {
			return n
		}
		f.Cursor = p.Next
	}
}

// actorSerial is the serial service whose PutChannel sees the request's
// context as the door made it (audited) or without its actor: the one
// difference between the two servers of BenchmarkAuditPutChannel. Both
// sides wrap the context once, so that the wrapping costs them alike.
type actorSerial struct {
	cloud.SerialService
	audited bool
}

func (a actorSerial) PutChannel(ctx context.Context, orgID, deviceID, channelID string, cfg serialcfg.Config) (resource.ChannelPutResult, error) {
	return a.SerialService.PutChannel(actorless{ctx, !a.audited}, orgID, deviceID, channelID, cfg)
}

// actorless is a context that, with drop, carries no cloud.Actor.
type actorless struct {
	context.Context
	drop bool
}

func (c actorless) Value(key any) any {
	v := c.Context.Value(key)
	if _, ok := v.(cloud.Actor); ok && c.drop {
		return nil
	}
	return v
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
