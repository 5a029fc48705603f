package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/test/rig/fleetproc"
)

// The audit log end to end (issue 30): a change through each door (the
// admin CLI, the public API with a key, the panel as a signed-in user) is
// one record naming who made it, through which door, from where and when,
// read back with `fleet-relay audit list --json`; one organization never
// reads another's records. On PostgreSQL a change stored through one relay
// is read through another relay's process.

// auditRecord is a record as `audit list --json` prints it.
type auditRecord struct {
	ID    string    `json:"id"`
	At    time.Time `json:"at"`
	Actor struct {
		Kind, ID, Name string
	} `json:"actor"`
	Action string `json:"action"`
	Target struct {
		Kind, ID string
	} `json:"target"`
	IP      string          `json:"ip"`
	Details json.RawMessage `json:"details"`
}

func TestAuditThroughEveryDoor(t *testing.T) { onStores(t, testAuditThroughEveryDoor) }

func testAuditThroughEveryDoor(t *testing.T, env []string) {
	dir := workDir(t)
	start := time.Now().Add(-time.Second)
	ten := fleetproc.Provision(t, bins.relay, env, "Audited", 1)
	other := fleetproc.Provision(t, bins.relay, env, "Elsewhere", 1)
	dev := ten.Devices[0].ID
	const email, password = "ana@audited.example", "a long panel password 1"
	fleetproc.AdminInput(t, bins.relay, env, password+"\n", nil, "user", "create", "--org", ten.OrgID,
		"--email", email, "--role", "ADMIN", "--password-stdin")

	_, base := serveRelay(t, dir, env)
	bases := []string{base}
	if strings.Contains(strings.Join(env, " "), "postgres") {
		// A second relay on the same database: the API's change goes
		// through it, the panel's through the first.
		_, b2 := serveRelay(t, t.TempDir(), env)
		bases = append(bases, b2)
	}
	api := fleetproc.NewAPI(t, bases[len(bases)-1], ten.Key)
	if code := api.Do("PATCH", "/devices/"+dev, map[string]any{"name": "Press line 1"}, nil); code != 200 {
		t.Fatalf("PATCH /devices/%s: %d", dev, code)
	}
	if code := api.Do("PATCH", "/devices/"+dev+"/serial", map[string]any{"mode": "passthrough"}, nil); code != 200 {
		t.Fatalf("PATCH /devices/%s/serial: %d", dev, code)
	}

	// The panel: a wrong password, then the right one, an API key made,
	// and a sign-out.
	jar, _ := cookiejar.New(nil)
	web := &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(path string, form url.Values) int {
		t.Helper()
		resp, err := web.PostForm(base+path, form)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("/panel/login", url.Values{"email": {email}, "password": {"not it"}}); code != http.StatusUnauthorized {
		t.Fatalf("sign-in with a wrong password: %d, want 401", code)
	}
	if code := post("/panel/login", url.Values{"email": {email}, "password": {password}}); code != http.StatusSeeOther {
		t.Fatalf("sign-in: %d, want 303", code)
	}
	if code := post("/panel/settings/api-keys", url.Values{"name": {"made in the panel"}, "scope": {"devices:read"}, "expires": {"30"}}); code != http.StatusOK {
		t.Fatalf("create a key in the panel: %d, want 200", code)
	}
	if code := post("/panel/logout", nil); code != http.StatusSeeOther {
		t.Fatalf("sign-out: %d, want 303", code)
	}
	end := time.Now().Add(time.Second)

	var recs []auditRecord
	fleetproc.Admin(t, bins.relay, env, &recs, "audit", "list", "--org", ten.OrgID, "--since", "1h", "--limit", "0")
	find := func(action, kind string) auditRecord {
		t.Helper()
		var got []auditRecord
		for _, r := range recs {
			if r.Action == action && r.Actor.Kind == kind {
				got = append(got, r)
			}
		}
		if len(got) != 1 {
			t.Fatalf("records of %s by %s: %d, want 1; every record: %+v", action, kind, len(got), recs)
		}
		r := got[0]
		if r.At.Before(start) || r.At.After(end) {
			t.Errorf("%s at %v, not within the test's %v..%v", action, r.At, start, end)
		}
		if r.At.Nanosecond()%int(time.Millisecond) != 0 {
			t.Errorf("%s at %v: more than millisecond precision", action, r.At)
		}
		return r
	}

	cli := find("key.created", "cli")
	if cli.Actor.ID == "" || !strings.Contains(cli.Actor.Name, "@") || cli.IP != "" {
		t.Errorf("the CLI's key.created: actor %+v ip %q, want the OS user@host and no address", cli.Actor, cli.IP)
	}
	find("org.created", "cli")
	find("device.added", "cli")
	if r := find("member.added", "cli"); r.Target.Kind != "member" || strings.Contains(string(r.Details), password) {
		t.Errorf("member.added: target %+v details %s", r.Target, r.Details)
	}

	patched := find("device.updated", "api_key")
	if patched.Actor.Name != "e2e" || patched.Target.Kind != "device" || patched.Target.ID != dev || patched.IP != "127.0.0.1" {
		t.Errorf("device.updated: actor %+v target %+v ip %q, want the key e2e on device %s from 127.0.0.1", patched.Actor, patched.Target, patched.IP, dev)
	}
	if !strings.Contains(string(patched.Details), "Press line 1") {
		t.Errorf("device.updated details %s do not say the new name", patched.Details)
	}
	serial := find("serial.updated", "api_key")
	if serial.Target.ID != dev || !strings.Contains(string(serial.Details), `"mode"`) || !strings.Contains(string(serial.Details), "passthrough") {
		t.Errorf("serial.updated: target %+v details %s, want the device and the mode from and to", serial.Target, serial.Details)
	}

	failed := find("session.sign_in_failed", "user")
	if failed.Actor.Name != email || failed.IP != "127.0.0.1" {
		t.Errorf("sign_in_failed: actor %+v ip %q", failed.Actor, failed.IP)
	}
	in := find("session.signed_in", "user")
	panelKey := find("key.created", "user")
	out := find("session.signed_out", "user")
	if panelKey.Actor.Name != email || panelKey.IP != "127.0.0.1" || !strings.Contains(string(panelKey.Details), "made in the panel") {
		t.Errorf("the panel's key.created: actor %+v ip %q details %s", panelKey.Actor, panelKey.IP, panelKey.Details)
	}
	if in.Actor.ID != panelKey.Actor.ID || out.Actor.ID != in.Actor.ID {
		t.Errorf("sign-in %+v, key %+v and sign-out %+v name different users", in.Actor, panelKey.Actor, out.Actor)
	}
	if !(in.At.Before(panelKey.At) || in.At.Equal(panelKey.At)) || out.At.Before(panelKey.At) {
		t.Errorf("sign-in %v, key %v, sign-out %v are out of order", in.At, panelKey.At, out.At)
	}
	for _, r := range recs {
		for _, secret := range []string{ten.Key, password, ten.Devices[0].Token, ten.WebhookSecret} {
			if strings.Contains(string(r.Details), secret) {
				t.Errorf("record %s (%s) holds a secret in its details: %s", r.ID, r.Action, r.Details)
			}
		}
	}

	var theirs []auditRecord
	fleetproc.Admin(t, bins.relay, env, &theirs, "audit", "list", "--org", other.OrgID, "--limit", "0")
	mine := map[string]bool{}
	for _, r := range recs {
		mine[r.ID] = true
	}
	for _, r := range theirs {
		if mine[r.ID] || r.Target.ID == dev {
			t.Errorf("the other organization reads a record of this one: %+v", r)
		}
	}
	if len(theirs) == 0 {
		t.Error("the other organization has no records of its own creation")
	}
	t.Log(fmt.Sprintf("%d records through %d relay(s)", len(recs), len(bases)))
}
