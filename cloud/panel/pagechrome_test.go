package panel_test

import (
	"bytes"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
)

// TestFavicon: every page names the icon, and /favicon.ico (where
// browsers look without asking) answers 200 with an icon and caching,
// signed in or not: no 404 in the browser's console.
func TestFavicon(t *testing.T) { stores.Run(t, testFavicon) }

func testFavicon(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	// The sign-in page signed out, the fleet page signed in.
	for page, c := range map[string]*client{"/panel/login": h.anon(), "/panel/": h.signIn(cloud.RoleViewer)} {
		r := c.get("/favicon.ico")
		if r.status != http.StatusOK || r.header.Get("Content-Type") != "image/x-icon" || !strings.HasPrefix(r.body, "\x00\x00\x01\x00") {
			t.Errorf("beside %s: /favicon.ico: %d %q", page, r.status, r.header.Get("Content-Type"))
		}
		if cc := r.header.Get("Cache-Control"); !strings.Contains(cc, "max-age=") {
			t.Errorf("beside %s: /favicon.ico Cache-Control %q", page, cc)
		}
		link := regexp.MustCompile(`<link rel="icon" href="([^"]+)" type="image/svg\+xml">`).FindStringSubmatch(c.get(page).body)
		if link == nil {
			t.Errorf("%s names no icon", page)
			continue
		}
		svg := c.get(strings.ReplaceAll(link[1], "&amp;", "&"))
		if svg.status != http.StatusOK || svg.header.Get("Content-Type") != "image/svg+xml" || !bytes.HasPrefix([]byte(svg.body), []byte("<svg")) {
			t.Errorf("%s: the icon %s: %d %q", page, link[1], svg.status, svg.header.Get("Content-Type"))
		}
	}
}

// TestPageTitles walks every page: each <title> reads "<Page> · Fleet",
// the fleet page just "Fleet"; no part of a title repeats.
func TestPageTitles(t *testing.T) { stores.Run(t, testPageTitles) }

func testPageTitles(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	title := regexp.MustCompile(`<title>([^<]*)</title>`)
	check := func(path, got, want string) {
		t.Helper()
		parts := strings.Split(got, " · ")
		seen := map[string]bool{}
		for _, p := range parts {
			if seen[p] || p == "" {
				t.Errorf("%s: title %q repeats or leaves empty a part", path, got)
			}
			seen[p] = true
		}
		if parts[len(parts)-1] != "Fleet" {
			t.Errorf("%s: title %q does not end in Fleet", path, got)
		}
		if want != "" && got != want {
			t.Errorf("%s: title %q, want %q", path, got, want)
		}
	}
	anon := h.anon()
	check("/panel/login", title.FindStringSubmatch(anon.get("/panel/login").body)[1], "Sign in · Fleet")
	c := h.signIn(cloud.RoleOwner)
	want := map[string]string{
		"/panel/":                       "Fleet",
		"/panel/alerts":                 "Alerts · Fleet",
		"/panel/settings/api-keys":      "API keys · Fleet",
		"/panel/settings/webhooks":      "Webhooks · Fleet",
		"/panel/settings/members":       "Members · Fleet",
		"/panel/devices/" + h.device.ID: "Press line 1 · Fleet",
		"/panel/nothing":                "Not Found · Fleet",
	}
	for _, path := range []string{"/panel/", "/panel/devices/" + h.device.ID, "/panel/devices/" + h.device.ID + "/points/" + testPoint, "/panel/alerts",
		"/panel/settings/api-keys", "/panel/settings/webhooks", "/panel/settings/members", "/panel/settings/security", "/panel/settings/audit",
		"/panel/settings/notifications", "/panel/account", "/panel/account/2fa", "/panel/alerts/rules", "/panel/alerts/rules/new",
		"/panel/alerts/rules/" + h.rules[0].ID, "/panel/alerts/silences", "/panel/alerts/" + h.alerts[0].ID, "/panel/nothing",
		"/panel/rollouts", "/panel/rollouts/new", "/panel/rollouts/" + h.rollouts[0].ID, "/panel/releases", "/panel/claims", "/panel/settings/sso"} {
		m := title.FindStringSubmatch(c.get(path).body)
		if m == nil {
			t.Errorf("%s: no <title>", path)
			continue
		}
		check(path, m[1], want[path])
	}
}
