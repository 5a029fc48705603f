package relay

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestPanelOnEachStore runs the panel in serve on each store: sign in with
// a user made by the CLI, the fleet page, a key created in the panel that
// works on the API and shows its last use, revoked in the panel; a VIEWER
// refused. On PostgreSQL a second relay on the same database serves the
// same session (a cluster behind a load balancer).
func TestPanelOnEachStore(t *testing.T) {
	for name, db := range databases(t) {
		t.Run(name, func(t *testing.T) { testPanelOnStore(t, db, name == "postgres") })
	}
}

type browser struct {
	t    *testing.T
	hc   *http.Client
	base string
}

func newBrowser(t *testing.T, base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, hc: &http.Client{Jar: jar, Timeout: 20 * time.Second}}
}

func (b *browser) do(method, path string, form url.Values) (int, string) {
	b.t.Helper()
	req, _ := http.NewRequest(method, b.base+path, strings.NewReader(form.Encode()))
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func testPanelOnStore(t *testing.T, db string, cluster bool) {
	m := startMain(t, db)
	base := "http://" + m.Addr()
	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")
	var dev struct{ ID string }
	mustJSON(t, &dev, "device", "add", "--db", db, "--org", org.ID, "--name", "Press line 1", "--serial", "SN-1", "--model", "IG-500")
	for _, u := range [][2]string{{"ada@acme.example", "ADMIN"}, {"vic@acme.example", "VIEWER"}} {
		if _, errOut, code := cliIn(t, "correct horse battery\n", "user", "create", "--db", db, "--org", org.ID, "--email", u[0], "--role", u[1], "--password-stdin"); code != 0 {
			t.Fatalf("user create: %s", errOut)
		}
	}
	// The icon is served at the root to anyone, as browsers ask for it.
	if resp, err := http.Get(base + "/favicon.ico"); err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/x-icon" {
		t.Errorf("/favicon.ico signed out: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	admin := newBrowser(t, base)
	if code, body := admin.do("POST", "/panel/login", url.Values{"email": {"ada@acme.example"}, "password": {"correct horse battery"}}); code != 200 || !strings.Contains(body, "Press line 1") {
		t.Fatalf("sign in and fleet page: %d", code)
	}
	code, body := admin.do("POST", "/panel/settings/api-keys", url.Values{"name": {"ERP"}, "scope": {"devices:read"}, "expires": {"30"}})
	key := regexp.MustCompile(`svc_sk_[A-Za-z0-9_]+`).FindString(body)
	if code != 200 || key == "" {
		t.Fatalf("create key in the panel: %d", code)
	}
	if code, _ := get(t, base+"/api/v1/public/devices", key); code != 200 {
		t.Fatalf("the panel's key on the API: %d", code)
	}
	if code, _ := get(t, base+"/api/v1/public/alerts", key); code != 403 {
		t.Errorf("the panel's key beyond its scopes: %d", code)
	}
	var keys []struct {
		ID, Name, CreatedBy string
		LastUsedAt          *string
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		mustJSON(t, &keys, "key", "list", "--db", db, "--org", org.ID)
		if len(keys) == 1 && keys[0].LastUsedAt != nil || time.Now().After(end) {
			break
		}
	}
	if len(keys) != 1 || keys[0].CreatedBy != "ada@acme.example" || keys[0].LastUsedAt == nil {
		t.Fatalf("key list after use: %+v", keys)
	}
	if code, _ := admin.do("POST", "/panel/settings/api-keys/"+keys[0].ID+"/revoke", url.Values{"confirm": {"yes"}}); code != 200 {
		t.Fatalf("revoke in the panel: %d", code)
	}
	if code, _ := get(t, base+"/api/v1/public/devices", key); code != 401 {
		t.Errorf("revoked key: %d", code)
	}
	viewer := newBrowser(t, base)
	viewer.do("POST", "/panel/login", url.Values{"email": {"vic@acme.example"}, "password": {"correct horse battery"}})
	if code, _ := viewer.do("POST", "/panel/settings/api-keys", url.Values{"name": {"nope"}, "scope": {"devices:read"}, "expires": {"30"}}); code != 403 {
		t.Errorf("VIEWER creates a key: %d", code)
	}
	if code, body := viewer.do("GET", "/panel/devices/"+dev.ID, nil); code != 200 || !strings.Contains(body, "Press line 1") {
		t.Errorf("VIEWER on the device page: %d", code)
	}
	if !cluster {
		return
	}
	// A second relay on the same database: the same cookie is signed in
	// there, and signing out on one ends the session on both.
	m2 := startMain(t, db)
	u1, _ := url.Parse(base + "/panel/")
	other := newBrowser(t, "http://"+m2.Addr())
	u2, _ := url.Parse(other.base + "/panel/")
	other.hc.Jar.SetCookies(u2, viewer.hc.Jar.Cookies(u1))
	if code, body := other.do("GET", "/panel/alerts", nil); code != 200 || !strings.Contains(body, "vic@acme.example") {
		t.Fatalf("the session on another relay: %d", code)
	}
	viewer.do("POST", "/panel/logout", url.Values{})
	if _, body := other.do("GET", "/panel/alerts", nil); !strings.Contains(body, "Sign in to Fleet") {
		t.Error("signed out on one relay, still signed in on the other")
	}
}
