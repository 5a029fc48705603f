package relay

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/test/rig/dialects"
)

// auditClock is a settable clock for the stores that seed audit records.
type auditClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *auditClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *auditClock) Set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

// storesAt opens the stores on db (a SQLite file or a PostgreSQL URL) beside
// the relay, as another process would, with clock now.
func storesAt(t *testing.T, db string, now cloud.Now) storetest.Stores {
	if isPostgresURL(db) {
		return dialects.PostgresAt(t, db, now, "seed")
	}
	return dialects.SQLiteAt(t, db, now)
}

// seedAudit writes a record of action on target by a at time at.
func seedAudit(t *testing.T, s storetest.Stores, clock *auditClock, at time.Time, org string, a cloud.Actor, action string, target cloud.AuditTarget, details any) {
	t.Helper()
	clock.Set(at)
	if err := s.Store.Audit().RecordAudit(cloud.WithActor(context.Background(), a), org, action, target, details); err != nil {
		t.Fatal(err)
	}
}

var (
	ana   = cloud.Actor{Kind: cloud.ActorUser, ID: "usr-ana", Name: "ana@acme.example", IP: "192.0.2.7"}
	ciKey = cloud.Actor{Kind: cloud.ActorAPIKey, ID: "key-ci", Name: "ci deploys", IP: "2001:db8::1"}
	root  = cloud.Actor{Kind: cloud.ActorCLI, ID: "root", Name: "root@relay-1"}
)

// TestAuditList: `audit list --org` prints the organization's records,
// newest first, in DESIGN.md's JSON shape (at to the millisecond, UTC) or
// as a table; filters by time, door, actor, action or its kind and target
// select; --limit pages through the store (0: all); another organization's
// records never show; bad flags are usage errors (exit 2) and an unknown
// organization is not_found. On each store.
func TestAuditList(t *testing.T) {
	for name, db := range databases(t) {
		t.Run(name, func(t *testing.T) { testAuditList(t, db) })
	}
}

func testAuditList(t *testing.T, db string) {
	var org, other struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")
	mustJSON(t, &other, "org", "create", "--db", db, "--name", "Other")
	clock := &auditClock{}
	s := storesAt(t, db, clock.Now)
	now := time.Now().UTC().Truncate(time.Millisecond)
	key := cloud.AuditTarget{Kind: cloud.TargetKey, ID: "key-1"}
	dev := cloud.AuditTarget{Kind: cloud.TargetDevice, ID: "dev-1"}
	seedAudit(t, s, clock, now.Add(-10*24*time.Hour), org.ID, root, cloud.ActionKeyCreated, key, map[string]any{"name": "erp"})
	seedAudit(t, s, clock, now.Add(-3*time.Hour), org.ID, ana, cloud.ActionDeviceUpdated, dev, map[string]any{"name": "Press\tline <1>\x1b[31m"})
	seedAudit(t, s, clock, now.Add(-2*time.Hour+123*time.Millisecond), org.ID, ciKey, cloud.ActionKeyRevoked, key, nil)
	seedAudit(t, s, clock, now.Add(-time.Hour), other.ID, ana, cloud.ActionKeyCreated, key, nil)
	for i := range 5 {
		seedAudit(t, s, clock, now.Add(-30*time.Minute+time.Duration(i)*time.Second), org.ID, ciKey, cloud.ActionChannelConfigured,
			cloud.AuditTarget{Kind: cloud.TargetChannel, ID: "dev-1/rs485-1"}, map[string]any{"channel": "rs485-1"})
	}

	list := func(args ...string) []map[string]any {
		t.Helper()
		var out []map[string]any
		mustJSON(t, &out, append([]string{"audit", "list", "--db", db, "--org", org.ID}, args...)...)
		return out
	}
	all := list()
	if len(all) != 8 {
		t.Fatalf("audit list: %d records, want the organization's 8: %v", len(all), all)
	}
	for i := 1; i < len(all); i++ {
		if all[i]["at"].(string) > all[i-1]["at"].(string) {
			t.Fatalf("not newest first: %v before %v", all[i-1]["at"], all[i]["at"])
		}
	}
	revoked := all[5]
	wantAt := now.Add(-2*time.Hour + 123*time.Millisecond).Format("2006-01-02T15:04:05.000Z")
	actor, _ := revoked["actor"].(map[string]any)
	target, _ := revoked["target"].(map[string]any)
	if revoked["action"] != cloud.ActionKeyRevoked || revoked["at"] != wantAt || revoked["ip"] != ciKey.IP ||
		actor["kind"] != "api_key" || actor["id"] != ciKey.ID || actor["name"] != ciKey.Name ||
		target["kind"] != "api_key" || target["id"] != "key-1" || revoked["id"] == "" {
		t.Errorf("key.revoked printed as %v; want at %s by %+v", revoked, wantAt, ciKey)
	}
	if d, ok := revoked["details"].(map[string]any); !ok || len(d) != 0 {
		t.Errorf("empty details printed as %v, want {}", revoked["details"])
	}
	var keys []string
	for k := range revoked {
		keys = append(keys, k)
	}
	if len(keys) != 7 {
		t.Errorf("a record has the fields %q; want id, at, actor, action, target, ip, details", keys)
	}

	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"--since", "24h"}, 7},
		{[]string{"--since", "11d"}, 8},
		{[]string{"--since", now.Add(-150 * time.Minute).Format(time.RFC3339)}, 6},
		{[]string{"--until", now.Add(-150 * time.Minute).Format(time.RFC3339)}, 2},
		{[]string{"--since", "4h", "--until", "90m"}, 2},
		{[]string{"--action", "key."}, 2},
		{[]string{"--action", cloud.ActionKeyCreated}, 1},
		{[]string{"--actor-kind", "api_key"}, 6},
		{[]string{"--actor-kind", "cli", "--actor", "root"}, 1},
		{[]string{"--actor", ana.ID}, 1},
		{[]string{"--target-kind", cloud.TargetKey, "--target", "key-1"}, 2},
		{[]string{"--target", "nothing"}, 0},
		{[]string{"--limit", "3"}, 3},
		{[]string{"--limit", "0"}, 8},
	} {
		if got := list(c.args...); len(got) != c.want {
			t.Errorf("audit list %q: %d records, want %d", c.args, len(got), c.want)
		}
	}
	// Pages of the store follow each other: more records than a page.
	for i := range cloud.MaxAuditPage + 5 {
		seedAudit(t, s, clock, now.Add(time.Duration(i)*time.Millisecond), org.ID, root, cloud.ActionDeviceAdded, dev, nil)
	}
	if got := list("--limit", "0"); len(got) != cloud.MaxAuditPage+13 {
		t.Errorf("--limit 0 over several pages: %d records, want %d", len(got), cloud.MaxAuditPage+13)
	}
	if got := list("--limit", "1002"); len(got) != 1002 || got[1001]["at"] != now.Add(3*time.Millisecond).Format("2006-01-02T15:04:05.000Z") {
		t.Errorf("--limit 1002: %d records", len(got))
	}
	if got := list(); len(got) != defaultAuditList {
		t.Errorf("no --limit: %d records, want %d", len(got), defaultAuditList)
	}

	// For people: a table, the time to the millisecond, control characters
	// of details never reach the terminal.
	human, _, code := cli(t, "audit", "list", "--db", db, "--org", org.ID, "--action", "device.updated")
	if code != 0 || !strings.HasPrefix(human, "AT ") || !strings.Contains(human, "user ana@acme.example") ||
		!strings.Contains(human, now.Add(-3*time.Hour).Format("2006-01-02T15:04:05.000Z")) || !strings.Contains(human, "device dev-1") {
		t.Errorf("audit list for people (exit %d):\n%s", code, human)
	}
	if strings.ContainsAny(human, "\x1b\t") {
		t.Errorf("a control character of the details reached the terminal: %q", human)
	}
	if human, _, _ := cli(t, "audit", "list", "--db", db, "--org", org.ID, "--target", "nothing"); !strings.Contains(human, "No audit records.") {
		t.Errorf("no records for people: %q", human)
	}
	// Another organization: its own record only.
	var theirs []map[string]any
	mustJSON(t, &theirs, "audit", "list", "--db", db, "--org", other.ID)
	if len(theirs) != 1 || theirs[0]["action"] != cloud.ActionKeyCreated {
		t.Errorf("the other organization's log: %v", theirs)
	}

	for _, bad := range [][]string{
		{"--since", "yesterday"}, {"--since", "-3d"}, {"--until", "soon"}, {"--since", "1h", "--until", "2h"},
		{"--action", "key"}, {"--action", "key.made"}, {"--actor-kind", "robot"}, {"--limit", "-1"},
		{"--target", strings.Repeat("x", 201)}, {"stray"},
	} {
		_, errOut, code := cli(t, append([]string{"audit", "list", "--db", db, "--org", org.ID}, bad...)...)
		if code != 2 || !strings.Contains(errOut, "fleet-relay audit list:") {
			t.Errorf("audit list %q: exit %d, %q; want a usage error", bad, code, errOut)
		}
	}
	if _, errOut, code := cli(t, "audit", "list", "--db", db); code != 2 || !strings.Contains(errOut, "--org") {
		t.Errorf("audit list without --org: exit %d, %q", code, errOut)
	}
	if _, errOut, code := cli(t, "audit", "list", "--db", db, "--org", "nope"); code != 1 || !strings.Contains(errOut, "organization") {
		t.Errorf("audit list of an unknown organization: exit %d, %q", code, errOut)
	}
}

// TestServeSweepsAudit: the relay's retention sweep deletes audit records
// older than --audit-retention (365d by default) and keeps the newer; a
// retention under a day is refused.
func TestServeSweepsAudit(t *testing.T) {
	for name, db := range databases(t) {
		t.Run(name+"/default", func(t *testing.T) { testServeSweepsAudit(t, db, nil, "1h 40d 364d") })
	}
	for name, db := range databases(t) {
		t.Run(name+"/30d", func(t *testing.T) { testServeSweepsAudit(t, db, []string{"--audit-retention", "30d"}, "1h") })
	}
	for _, bad := range []string{"0", "0d", "23h", "a year", "-5d"} {
		db := filepath.Join(t.TempDir(), "relay.db")
		if _, errOut, code := cli(t, "serve", "--db", db, "--listen", "127.0.0.1:0", "--metrics-listen", "none", "--audit-retention", bad); code != 2 || !strings.Contains(errOut, "audit-retention") {
			t.Errorf("serve --audit-retention %s: exit %d, %q; want a usage error naming it", bad, code, errOut)
		}
	}
	t.Setenv("FLEET_AUDIT_RETENTION", "90d")
	m := NewMain(io.Discard)
	if err := m.ParseFlags(nil); err != nil || m.Config.AuditRetention != 90*24*time.Hour {
		t.Errorf("FLEET_AUDIT_RETENTION=90d: %v, %v", m.Config.AuditRetention, err)
	}
}

// testServeSweepsAudit seeds records 400, 366, 364 and 40 days and an hour
// old, runs serve with args and waits for the ages want to be left.
func testServeSweepsAudit(t *testing.T, db string, args []string, want string) {
	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")
	clock := &auditClock{}
	s := storesAt(t, db, clock.Now)
	now := time.Now()
	target := cloud.AuditTarget{Kind: cloud.TargetKey, ID: "k"}
	for _, age := range []string{"400d", "366d", "364d", "40d", "1h"} {
		d, _ := parseDays(age)
		seedAudit(t, s, clock, now.Add(-d), org.ID, ana, cloud.ActionKeyCreated, target, map[string]any{"age": age})
	}
	// waitAges waits for the records left, newest first, to be of want ages.
	waitAges := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var recs []struct{ Details struct{ Age string } }
			mustJSON(t, &recs, "audit", "list", "--db", db, "--org", org.ID, "--limit", "0")
			var got []string
			for _, r := range recs {
				got = append(got, r.Details.Age)
			}
			if strings.Join(got, " ") == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("records of ages %q after the sweep, want %s", got, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	m := NewMain(io.Discard)
	if err := m.ParseFlags(append([]string{"--db", db, "--listen", "127.0.0.1:0", "--metrics-listen", "none"}, args...)); err != nil {
		t.Fatal(err)
	}
	if args == nil && m.Config.AuditRetention != cloud.DefaultAuditRetention {
		t.Errorf("--audit-retention defaults to %v, want %v", m.Config.AuditRetention, cloud.DefaultAuditRetention)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	waitAges(want)
}
