package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPackageVersion runs deploy/package/version.sh in a scratch git
// repository through its history: no tag, a tag, commits after it, a dirty
// tree. Every answer must be a valid Debian version, and later states must
// sort after earlier ones (dpkg --compare-versions).
func TestPackageVersion(t *testing.T) {
	script, err := filepath.Abs("package/version.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_COMMITTER_DATE=2026-03-04T05:06:07Z", "GIT_AUTHOR_DATE=2026-03-04T05:06:07Z")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	commit := func(msg string) string {
		t.Helper()
		os.WriteFile(filepath.Join(dir, "f"), []byte(msg), 0o644)
		git("add", "f")
		git("commit", "-q", "-m", msg)
		return git("rev-parse", "--short=8", "HEAD")
	}
	version := func() string {
		t.Helper()
		cmd := exec.Command("sh", script)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("version.sh: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	var got []string
	sha := commit("one")
	steps := []struct {
		name string
		do   func() string // returns the expected version (a regexp)
	}{
		{"no tag", func() string { return `0\.0\.0~git20260304\.` + sha }},
		{"dirty", func() string {
			os.WriteFile(filepath.Join(dir, "f"), []byte("changed"), 0o644)
			return `0\.0\.0~git20260304\.` + sha + `\.dirty`
		}},
		{"tag", func() string { git("checkout", "-q", "f"); git("tag", "v1.2.0"); return `1\.2\.0` }},
		{"after the tag", func() string { s := commit("two"); return `1\.2\.0\+git20260304\.` + s }},
		{"next tag", func() string { git("tag", "v1.10.0"); return `1\.10\.0` }},
	}
	for _, s := range steps {
		want := s.do()
		v := version()
		if !regexp.MustCompile(`^` + want + `$`).MatchString(v) {
			t.Fatalf("%s: version %q, want %s", s.name, v, want)
		}
		run(t, "dpkg", "--validate-version", v)
		got = append(got, v)
	}
	// The dirty build of a commit is not a release: only the clean states
	// must sort in history order.
	order := []string{got[0], got[2], got[3], got[4]}
	for i := 1; i < len(order); i++ {
		if err := exec.Command("dpkg", "--compare-versions", order[i-1], "lt", order[i]).Run(); err != nil {
			t.Errorf("%s does not sort before %s", order[i-1], order[i])
		}
	}
	t.Logf("versions: %v", got)
}
