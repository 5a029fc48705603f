package relay

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
)

// TestPublicURLSecuresBrowsers runs serve on plain HTTP as behind a proxy
// that ends TLS: with an https --public-url the panel's session cookie is
// Secure and the API, the panel and the agents' HTTP routes carry
// Strict-Transport-Security; with an http one, or none, neither.
func TestPublicURLSecuresBrowsers(t *testing.T) {
	for name, tc := range map[string]struct {
		publicURL string
		secure    bool
	}{
		"https":      {"https://fleet.example.com", true},
		"https path": {"https://fleet.example.com/relay/", true},
		"http":       {"http://fleet.example.com", false},
		"unset":      {"", false},
	} {
		t.Run(name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "fleet.db")
			args := []string{"--db", db, "--listen", "127.0.0.1:0", "--metrics-listen", "none"}
			if tc.publicURL != "" {
				args = append(args, "--public-url", tc.publicURL)
			}
			m := NewMain(io.Discard)
			if err := m.ParseFlags(args); err != nil {
				t.Fatal(err)
			}
			if err := m.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Close() })
			var org struct{ ID string }
			mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")
			if _, errOut, code := cliIn(t, "correct horse battery\n", "user", "create", "--db", db, "--org", org.ID, "--email", "ada@acme.example", "--role", "ADMIN", "--password-stdin"); code != 0 {
				t.Fatalf("user create: %s", errOut)
			}
			base := "http://" + m.Addr()
			hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			want := ""
			if tc.secure {
				want = "max-age=31536000"
			}
			for _, path := range []string{"/api/v1/public/devices", "/healthz", "/panel/login", "/agent/v1/ws", "/agent/v1/claim"} {
				resp, err := hc.Get(base + path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if got := resp.Header.Get("Strict-Transport-Security"); got != want {
					t.Errorf("GET %s (%d): Strict-Transport-Security %q, want %q", path, resp.StatusCode, got, want)
				}
			}
			resp, err := hc.PostForm(base+"/panel/login", url.Values{"email": {"ada@acme.example"}, "password": {"correct horse battery"}})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			var session *http.Cookie
			for _, c := range resp.Cookies() {
				if c.Name == "fleet_session" {
					session = c
				}
			}
			if session == nil {
				t.Fatalf("sign-in answered %d without a session cookie: %v", resp.StatusCode, resp.Header["Set-Cookie"])
			}
			if session.Secure != tc.secure || !strings.Contains(resp.Header.Get("Set-Cookie"), "HttpOnly") {
				t.Errorf("session cookie %q: Secure %v, want %v", resp.Header.Get("Set-Cookie"), session.Secure, tc.secure)
			}
			if got := resp.Header.Get("Strict-Transport-Security"); got != want {
				t.Errorf("sign-in: Strict-Transport-Security %q, want %q", got, want)
			}
		})
	}
}
