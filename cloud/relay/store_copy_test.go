package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/dialects"
)

// TestStoreCopy moves a SQLite deployment with every kind of data
// (organizations, keys, devices and tokens, metrics, events, alerts and
// rules (a deleted one among them), notification channels and silences,
// serial desired and reported state, the webhook outbox and
// secrets, panel users and sessions, point history in chunks and head) into an empty PostgreSQL database and
// compares, answer by answer, what the API and the admin commands say
// before and after; agents keep their tokens, receivers their secrets; a
// second copy into the now full database is refused and writes nothing.
func TestStoreCopy(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "relay.db")
	url := pg.Get(t).CreateDB(t)

	// The SQLite deployment.
	var org, other struct{ ID, WebhookSecret string }
	mustJSON(t, &org, "org", "create", "--db", path, "--name", "Acme")
	mustJSON(t, &other, "org", "create", "--db", path, "--name", "Other")
	var key struct{ ID, Key string }
	mustJSON(t, &key, "key", "create", "--db", path, "--org", org.ID, "--name", "ops", "--expires", "never",
		"--scopes", "devices:read,devices:write,metrics:read,logs:read,alerts:read,alerts:write")
	var gone struct{ ID, Key string }
	mustJSON(t, &gone, "key", "create", "--db", path, "--org", org.ID, "--name", "old", "--scopes", "devices:read")
	mustJSON(t, &struct{}{}, "key", "revoke", "--db", path, "--id", gone.ID)
	var devs []struct{ ID, Token string }
	for i, model := range []string{"IG-500", "IG-500", "IG-100", "IG-300"} {
		var d struct{ ID, Token string }
		mustJSON(t, &d, "device", "add", "--db", path, "--org", org.ID, "--name", fmt.Sprint("gw-", i), "--serial", fmt.Sprint("SN-", i), "--model", model, "--location", "Hall "+fmt.Sprint(i))
		devs = append(devs, d)
	}
	mustJSON(t, &struct{}{}, "device", "revoke", "--db", path, "--id", devs[3].ID)
	mustJSON(t, &struct{}{}, "org", "rotate-secret", "--db", path, "--org", org.ID, "--grace", "48h")
	var claim struct{ ID, Token string }
	mustJSON(t, &claim, "claim", "create", "--db", path, "--org", org.ID, "--model", "IG-500", "--tags", "line-3", "--uses", "3", "--expires", "30d")

	// Agents, the alert engine and a user make the rest, through the
	// contract, as on a relay.
	s := dialects.SQLiteAt(t, path, nil)
	agents := make([]agentlink.Device, 3)
	for i, d := range devs[:3] {
		agents[i] = storetest.Auth(t, s.Agent, d.Token)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	storetest.Channels(t, s.Agent, agents[0], now, protocol.ChannelState{ID: "rs485-1", Available: true, Live: "17 42", TxOn: true},
		protocol.ChannelState{ID: "canfd-1", Available: true, Error: "bus-off"}, protocol.ChannelState{ID: "rs485-2", Available: false})
	for i, dev := range agents[:3] {
		var samples []resource.MetricSample
		var events []resource.Event
		for k := 0; k < 300; k++ {
			at := now.Add(-time.Duration(k) * 5 * time.Minute) // a day and more, across partitions
			samples = append(samples, resource.MetricSample{CapturedAt: resource.T(at), CPUPct: float64(k%97) + 0.25, MemPct: 41.5, DiskUsedPct: float64(i), TempCPU: 55.125, LoadAvg1: 0.07})
			if k%7 == 0 {
				events = append(events, resource.Event{Type: "heartbeat", Severity: resource.SeverityInfo, Message: "hb", CreatedAt: resource.T(at),
					Data: json.RawMessage(`{"uptime":` + fmt.Sprint(k) + `,"note":"ünïcode ✓"}`)})
			}
		}
		if got := storetest.Metrics(t, s.Agent, dev, samples...); len(got) != len(samples) {
			t.Fatalf("%d metrics stored of %d", len(got), len(samples))
		}
		if got := storetest.Events(t, s.Agent, dev, events...); len(got) != len(events) {
			t.Fatalf("%d events stored of %d", len(got), len(events))
		}
		// Seen just now: no device_offline alert opens while the test runs.
		storetest.Offline(t, s.Agent, dev, now.Add(time.Duration(i)*time.Millisecond), time.Minute)
	}
	for i, st := range []resource.AlertState{resource.AlertActive, resource.AlertAcknowledged, resource.AlertResolved} {
		storetest.Alert(t, s.Engine, s.Store.Alerts(), storetest.NewAlert{OrgID: org.ID, DeviceID: devs[i].ID, Rule: "high_cpu", State: st, Message: "CPU high",
			Payload: json.RawMessage(`{"value":97.5}`), At: now.Add(-time.Duration(i) * time.Hour)})
	}
	// The outbox: a delivery tried once, and one never tried. Neither is
	// due while the test runs: the webhook sender of each relay it starts
	// would otherwise make an attempt of its own, at a moment of its own,
	// and the deliveries read before the copy would differ from those read
	// after it for that reason alone.
	outbox := s.Outbox
	dl := &webhook.Delivery{ID: "dlvcopy1", OrgID: org.ID, DeviceID: devs[0].ID, Event: webhook.EventSignal, URL: "https://hooks.example.com/s",
		Body: []byte(`{"event":"serial.signal"}`), NextAttemptAt: now, CreatedAt: now}
	if err := outbox.WriteOutbox(ctx, []*webhook.Delivery{dl, {ID: "dlvcopy2", OrgID: org.ID, DeviceID: devs[1].ID, Event: webhook.EventAlertOpened,
		URL: "https://hooks.example.com/alerts", Body: []byte(`{}`), NextAttemptAt: now.Add(time.Hour), CreatedAt: now}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := outbox.WriteOutbox(ctx, nil, []webhook.Attempt{{DeliveryID: dl.ID, Number: 1, At: now, StatusCode: 503, Duration: 12 * time.Millisecond,
		State: webhook.StatePending, NextAttemptAt: now.Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	// Point history: a point's samples over the last 2,000 s, a bad
	// reading now and then, the older half compacted into chunks.
	var pts []protocol.Record
	for k := 0; k < 2000; k += protocol.MaxPointSamples {
		var b protocol.PointBatch
		for i := k; i < min(k+protocol.MaxPointSamples, 2000); i++ {
			at := resource.T(now.Add(-time.Duration(2000-i) * time.Second))
			if i%97 == 5 {
				b.Samples = append(b.Samples, protocol.PointSample{Point: "rs485-1.temp", At: at, Error: "modbus timeout (slave 7)"})
			} else {
				b.Samples = append(b.Samples, protocol.PointSample{Point: "rs485-1.temp", At: at, Value: 20 + float64(i%50)/8},
					protocol.PointSample{Point: "gpio-1.level", At: at, Value: float64(i / 300 % 2)})
			}
		}
		pts = append(pts, protocol.Record{Seq: uint64(10000 + k), Points: &b})
	}
	if out, err := s.Agent.Records(ctx, agentlink.RecordsIn{Device: agents[0], Session: "s", Items: pts}); err != nil || len(out.Points) != 2000+1979 {
		t.Fatalf("point samples: %d stored (%v)", len(out.Points), err)
	}
	if n, err := s.PointHistory.CompactPoints(ctx, cloud.PointCompaction{Before: now.Add(-1000 * time.Second)}); err != nil || n < 1900 {
		t.Fatalf("compacted %d point samples (%v)", n, err)
	}
	// A release: its binary in two chunks.
	relData, relSig := storetest.ReleaseBinary(t, cloud.ReleaseChunkBytes+1000)
	rel := storetest.Release(t, s.Store.Releases(), cloud.NewRelease{OrgID: org.ID, Version: "1.5.0", Arch: "armv7", Signature: relSig}, relData)
	claimed, err := s.Store.Claims().RedeemClaim(ctx, cloud.ClaimRedeem{Token: claim.Token, ClaimRequest: protocol.ClaimRequest{SerialNumber: "CLAIMED-1"}})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Set after the alerts were made, which would otherwise queue alert
	// webhooks due at once (the store writes them with the alert).
	mustJSON(t, &struct{}{}, "org", "set-alert-webhook", "--db", path, "--org", org.ID, "--url", "https://hooks.example.com/alerts")
	pointAnswers := func(st *cloud.Stores) map[string]string {
		out := map[string]string{}
		for _, q := range []cloud.PointQuery{{Limit: 10000}, {Limit: 100}, {Step: time.Minute}, {Step: 7 * time.Second, Limit: 50}} {
			for _, p := range []string{"rs485-1.temp", "gpio-1.level"} {
				q.From, q.To = now.Add(-time.Hour), now
				got, err := st.Points().PointSamples(ctx, org.ID, devs[0].ID, p, q)
				out[fmt.Sprint(p, q)] = fmt.Sprintf("%+v %v", got, err)
			}
		}
		return out
	}

	m := startServe(t, path, "--rate-limit", "100000")
	base := "http://" + m.Addr() + "/api/v1/public"
	put := `{"kind":"rs485","baudRate":19200,"dataBits":8,"parity":"even","stopBits":1,"mode":"modbus_rtu_master","slaveId":7,"tx":{"enabled":false,"intervalMs":0,"register":0,"value":0}}`
	for _, r := range []struct{ method, path, body string }{
		{"PUT", "/devices/" + devs[0].ID + "/serial/channels/rs485-1", put},
		{"PATCH", "/devices/" + devs[0].ID + "/serial", `{"mode":"both","webhookUrl":"https://hooks.example.com/fwd","webhookEnabled":true}`},
	} {
		if code, body := apiCall(t, r.method, base+r.path, key.Key, r.body); code != 200 {
			t.Fatalf("%s %s: %d %s", r.method, r.path, code, body)
		}
	}
	user, err := m.DB.Panel.CreateUser(ctx, cloud.NewUser{OrgID: org.ID, Email: "ada@example.com", Role: cloud.RoleOwner, PasswordHash: "$argon2id$v=19$m=65536,t=1,p=2$c2FsdA$aGFzaA"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DB.Panel.CommitSession(ctx, "sessionhash1", []byte("session-bytes\x00\x01"), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	secrets, err := m.DB.Outbox.OrgSecrets(ctx, org.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Rules, notification channels and silences (issue 27), a deleted
	// default among them.
	rules := m.DB.Rules()
	chat, err := rules.CreateChannel(ctx, cloud.NewChannel{OrgID: org.ID, Name: "chat", Kind: resource.ChannelSlack, Target: "https://chat.example.com/hook", AllRules: true})
	if err != nil {
		t.Fatal(err)
	}
	hot, clear := 95.0, 90.0
	if _, err := rules.CreateRule(ctx, org.ID, resource.AlertRule{Name: "gw-0 hot", Enabled: true, Severity: resource.SeverityCritical,
		Scope: resource.RuleScope{DeviceIDs: []string{devs[0].ID}}, Notify: []string{chat.ID}, RepeatEvery: "1h",
		Condition: resource.RuleCondition{Kind: resource.ConditionThreshold, Source: "metric.cpuPct", Op: ">", Value: &hot, Clear: &clear, For: "1m"}}); err != nil {
		t.Fatal(err)
	}
	if l, err := rules.ListRules(ctx, org.ID, cloud.Page{Limit: 100}); err != nil || len(l.Data) != 8 {
		t.Fatalf("rules %+v, %v", l, err)
	} else if err := rules.DeleteRule(ctx, org.ID, l.Data[3].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := rules.CreateSilence(ctx, org.ID, cloud.NewSilence{Scope: resource.RuleScope{DeviceIDs: []string{devs[1].ID}}, To: now.Add(24 * time.Hour), Comment: "move", CreatedBy: "cli"}); err != nil {
		t.Fatal(err)
	}
	ruleAnswers := func(st *cloud.Stores) string {
		l, err := st.Rules().ListRules(ctx, org.ID, cloud.Page{Limit: 100})
		s, err2 := st.Rules().ListSilences(ctx, org.ID, cloud.SilenceFilter{All: true})
		c, err3 := st.Rules().ListChannels(ctx, org.ID)
		engine, err4 := st.Engine.Rules(ctx, org.ID)
		b, _ := json.Marshal([]any{l, s, c})
		return fmt.Sprintf("%s %v %v %v\n%v %v", b, err, err2, err3, engine, err4)
	}
	answers := func(base string) map[string]string {
		out := map[string]string{}
		from, to := now.Add(-30*time.Hour).Format(time.RFC3339Nano), now.Format(time.RFC3339Nano)
		paths := []string{"/devices", "/devices?limit=1", "/devices?status=OFFLINE", "/devices?status=PROVISIONING",
			"/alerts", "/alerts?state=ACKNOWLEDGED", "/alerts?state=RESOLVED", "/alerts?state=ACTIVE&deviceId=" + devs[0].ID}
		for _, d := range devs {
			p := "/devices/" + d.ID
			paths = append(paths, p, p+"/metrics?from="+from+"&to="+to, p+"/metrics?limit=1000&from="+from+"&to="+to,
				p+"/events", p+"/events?limit=7", p+"/events?type=heartbeat&limit=3", p+"/serial", p+"/serial/telemetry", p+"/serial/channels/rs485-1")
		}
		// Follow cursors: pages after the first.
		for len(paths) > 0 {
			p := paths[0]
			paths = paths[1:]
			code, body := apiCall(t, "GET", base+p, key.Key, "")
			out[p] = fmt.Sprintf("%d %s", code, body)
			var page struct{ Pagination resource.Pagination }
			if json.Unmarshal(body, &page) == nil && page.Pagination.HasMore && !strings.Contains(p, "cursor=") {
				sep := "?"
				if strings.Contains(p, "?") {
					sep = "&"
				}
				paths = append(paths, p+sep+"cursor="+*page.Pagination.NextCursor)
			}
		}
		return out
	}
	cliAnswers := func(db string) map[string]string {
		out := map[string]string{}
		for _, args := range [][]string{{"org", "list"}, {"key", "list", "--org", org.ID}, {"device", "list", "--org", org.ID},
			{"webhook", "deliveries", "--org", org.ID}, {"user", "list", "--org", org.ID}, {"release", "list", "--org", org.ID},
			{"claim", "list", "--org", org.ID}} {
			o, e, code := cli(t, append(args, "--db", db, "--json")...)
			out[strings.Join(args, " ")] = fmt.Sprintf("%d %s %s", code, o, e)
		}
		return out
	}
	before, beforeCLI, beforePoints, beforeRules := answers(base), cliAnswers(path), pointAnswers(m.DB), ruleAnswers(m.DB)
	m.Close()

	var res struct {
		Tables map[string]int64
		Rows   int64
	}
	mustJSON(t, &res, "store", "copy", "--from", path, "--to", url)
	if res.Tables["metrics"] != 900 || res.Tables["events"] < 129 || res.Tables["users"] != 1 || res.Tables["sessions"] != 1 || res.Tables["webhook_attempts"] < 1 || res.Tables["alert_rules"] != 15 ||
		res.Tables["notification_channels"] != 1 || res.Tables["silences"] != 1 || res.Tables["releases"] != 1 || res.Tables["release_chunks"] != 2 {
		t.Errorf("copied %+v", res)
	}

	m2 := startServe(t, url, "--rate-limit", "100000")
	// The claim still works from its token, and knows the serial it
	// registered.
	again, err := m2.DB.Claims().RedeemClaim(ctx, cloud.ClaimRedeem{Token: claim.Token, ClaimRequest: protocol.ClaimRequest{SerialNumber: "CLAIMED-1"}})
	if err != nil || again.DeviceID != claimed.DeviceID {
		t.Errorf("the claimed serial again after the copy: %+v, %v (was %s)", again, err, claimed.DeviceID)
	}
	after, afterCLI := answers("http://"+m2.Addr()+"/api/v1/public"), cliAnswers(url)
	if len(after) != len(before) || len(before) < 50 {
		t.Errorf("%d answers before, %d after", len(before), len(after))
	}
	for p, b := range before {
		if after[p] != b {
			t.Errorf("GET %s:\n  SQLite:     %.300s\n  PostgreSQL: %.300s", p, b, after[p])
		}
	}
	if afterRules := ruleAnswers(m2.DB); afterRules != beforeRules || !strings.Contains(beforeRules, "gw-0 hot") {
		t.Errorf("rules, silences and channels:\n  SQLite:     %s\n  PostgreSQL: %s", beforeRules, afterRules)
	}
	afterPoints := pointAnswers(m2.DB)
	if all := fmt.Sprint(afterPoints); !strings.Contains(all, "Value:<nil>") || !strings.Contains(all, "Value:true") || !strings.Contains(all, "Count:") {
		t.Errorf("point samples after the copy lack bad readings, bool values or buckets: %.500s", all)
	}
	for q, b := range afterPoints {
		if beforePoints[q] != b {
			t.Errorf("point samples %s:\n  SQLite:     %.300s\n  PostgreSQL: %.300s", q, beforePoints[q], b)
		}
	}
	for c, b := range beforeCLI {
		if afterCLI[c] != b {
			t.Errorf("%s:\n  SQLite:     %.300s\n  PostgreSQL: %.300s", c, b, afterCLI[c])
		}
	}
	got := make([]byte, len(relData)+1)
	if n, err := m2.DB.Releases().ReadRelease(ctx, org.ID, rel.ID, got, 0); n != len(relData) || err != io.EOF || !bytes.Equal(got[:n], relData) {
		t.Errorf("release after the copy: %d of %d bytes, %v", n, len(relData), err)
	}
	// Tokens and secrets still hold.
	connectAgent(t, m2.Addr(), devs[0].Token, time.Minute)
	if code, _ := apiCall(t, "GET", "http://"+m2.Addr()+"/api/v1/public/devices", gone.Key, ""); code != 401 {
		t.Errorf("the revoked key answers %d", code)
	}
	if s2, err := m2.DB.Outbox.OrgSecrets(ctx, org.ID); err != nil || s2 != secrets || s2.Previous == "" {
		t.Errorf("secrets after the copy %+v, before %+v (%v)", s2, secrets, err)
	}
	if data, ok, err := m2.DB.Panel.FindSession(ctx, "sessionhash1"); err != nil || !ok || string(data) != "session-bytes\x00\x01" {
		t.Errorf("session after the copy: %q %v %v", data, ok, err)
	}
	if u, err := m2.DB.Panel.UserByOrgEmail(ctx, user.OrgID, "ada@example.com"); err != nil || u.ID != user.ID || u.PasswordHash != user.PasswordHash {
		t.Errorf("user after the copy: %+v %v", u, err)
	}
	// New deliveries follow the copied ones in the outbox.
	if id, err := m2.DB.RedeliverWebhook(ctx, dl.ID); err != nil {
		t.Errorf("redeliver after the copy: %v", err)
	} else {
		// Newest first: the redelivery before both copied deliveries. (The
		// relay on PostgreSQL may have queued notifications of its own
		// meanwhile, such as the resolution of an offline alert when the
		// agent above connected.)
		ds, _ := m2.DB.WebhookDeliveries(ctx, org.ID, 50)
		at := map[string]int{}
		for i, d := range ds {
			at[d.ID] = i + 1
		}
		if at[id] == 0 || at["dlvcopy1"] == 0 || at["dlvcopy2"] == 0 || at[id] > at["dlvcopy1"] || at[id] > at["dlvcopy2"] {
			t.Errorf("deliveries after a redelivery (want %s newer than the copied dlvcopy1 and dlvcopy2): %+v", id, ds)
		}
	}

	// A new point's series is numbered after the copied ones.
	pgAgent, err := m2.DB.NewAgentStore(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pgAgent.Close()
	if out, err := pgAgent.Records(ctx, agentlink.RecordsIn{Device: agents[1], Session: "s", Items: []protocol.Record{{Seq: 1,
		Points: &protocol.PointBatch{Samples: []protocol.PointSample{{Point: "rs485-1.flow", At: resource.T(now), Value: 1}}}}}}); err != nil || len(out.Points) != 1 {
		t.Errorf("a new point after the copy: %+v %v", out, err)
	}

	// A second copy into the full database is refused; nothing is written.
	count := func() (n int64) {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		conn.QueryRow(ctx, `SELECT (SELECT COUNT(*) FROM metrics) + (SELECT COUNT(*) FROM devices) + (SELECT COUNT(*) FROM orgs)`).Scan(&n)
		return n
	}
	n := count()
	_, errOut, code := cli(t, "store", "copy", "--from", path, "--to", url)
	if code != 1 || !strings.Contains(errOut, "not empty") {
		t.Errorf("copy into a full database: exit %d, %s", code, errOut)
	}
	if count() != n {
		t.Errorf("the refused copy wrote rows")
	}
}
