package fleet_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDemoBannerNamesLikeREADME: the curl lines `make run` prints
// (deploy/demo/run.sh) and the copies of its banner in README.md and
// docs/demo.md set and use the names the README's API examples use (KEY,
// RELAY, DEVICE_ID), in the README's form, so that what one pastes from
// either place works with the other. deploy/demo's test runs the printed
// lines against the demo.
func TestDemoBannerNamesLikeREADME(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// The README's API examples: the names their curl lines use.
	apiNames := map[string]bool{}
	for _, line := range strings.Split(readmeSection(t, "The public API"), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "curl ") {
			for _, m := range regexp.MustCompile(`\$([A-Z_]+)`).FindAllStringSubmatch(line, -1) {
				apiNames[m[1]] = true
			}
		}
	}
	want := []string{"DEVICE_ID", "KEY", "RELAY"}
	for _, n := range want {
		if !apiNames[n] {
			t.Fatalf("README's API examples no longer use $%s: change this test and the banner together", n)
		}
	}
	curlLine := regexp.MustCompile(`^curl -s -H "Authorization: Bearer \$KEY" "\$RELAY/api/v1/public/[^"\s]+"$`)
	var printed []string
	for _, doc := range []struct{ path, text string }{
		{"deploy/demo/run.sh", strings.ReplaceAll(read("deploy/demo/run.sh"), `\$`, `$`)},
		{"README.md", read("README.md")},
		{"docs/demo.md", read("docs/demo.md")},
	} {
		m := regexp.MustCompile(`(?s)Paste into another terminal:\n(.*?)\n\n`).FindStringSubmatch(doc.text)
		if m == nil {
			t.Errorf("%s has no banner with curl lines", doc.path)
			continue
		}
		lines := strings.Split(m[1], "\n")
		var set []string
		for _, kv := range strings.Fields(lines[0]) {
			name, _, _ := strings.Cut(kv, "=")
			set = append(set, name)
		}
		slices.Sort(set)
		if !slices.Equal(set, want) {
			t.Errorf("%s: the banner sets %v, want %v (the README's names): %q", doc.path, set, want, lines[0])
		}
		for _, l := range lines[1:] {
			l = strings.TrimSpace(l)
			if l == "..." {
				continue
			}
			if !curlLine.MatchString(l) {
				t.Errorf("%s: banner line %q is not in the README's form (curl -s -H \"Authorization: Bearer $KEY\" \"$RELAY/api/v1/public/...\")", doc.path, l)
			}
			for _, n := range regexp.MustCompile(`\$([A-Z_]+)`).FindAllStringSubmatch(l, -1) {
				if !slices.Contains(want, n[1]) {
					t.Errorf("%s: banner line %q uses $%s, which the banner does not set", doc.path, l, n[1])
				}
			}
			if doc.path == "deploy/demo/run.sh" {
				printed = append(printed, l)
			} else if !slices.Contains(printed, l) {
				t.Errorf("%s quotes a banner line make run does not print: %q", doc.path, l)
			}
		}
	}
}
