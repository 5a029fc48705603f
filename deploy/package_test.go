package deploy_test

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// debFile is one entry of a package's data archive.
type debFile struct {
	hdr  *tar.Header
	body []byte
}

// debContents reads a package's data archive.
func debContents(t *testing.T, pkg string) map[string]debFile {
	t.Helper()
	out, err := exec.Command("dpkg-deb", "--fsys-tarfile", pkg).Output()
	if err != nil {
		t.Fatalf("dpkg-deb --fsys-tarfile %s: %v", pkg, err)
	}
	files := map[string]debFile{}
	tr := tar.NewReader(bytes.NewReader(out))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		name := "/" + strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		files[name] = debFile{h, body}
	}
	return files
}

func TestPackages(t *testing.T) {
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "armhf": elf.EM_ARM}
	type entry struct {
		path string
		mode int64
		dir  bool
	}
	tests := []struct {
		name, arch string
		conffile   string
	}{
		{"fleet-agent", "amd64", "/etc/fleet-agent/agent.yaml"},
		{"fleet-agent", "arm64", "/etc/fleet-agent/agent.yaml"},
		{"fleet-agent", "armhf", "/etc/fleet-agent/agent.yaml"},
		{"fleet-relay", "amd64", "/etc/fleet-relay/relay.env"},
	}
	for _, tt := range tests {
		t.Run(tt.name+"_"+tt.arch, func(t *testing.T) {
			pkg := deb(t, tt.name, tt.arch)
			fields := map[string]string{}
			for _, f := range []string{"Package", "Architecture", "Version", "Depends"} {
				fields[f] = strings.TrimSpace(run(t, "dpkg-deb", "-f", pkg, f))
			}
			if fields["Package"] != tt.name || fields["Architecture"] != tt.arch {
				t.Errorf("control fields %v", fields)
			}
			if want := tt.name + "_" + fields["Version"] + "_" + tt.arch + ".deb"; filepath.Base(pkg) != want {
				t.Errorf("file %s, control says %s", filepath.Base(pkg), want)
			}
			run(t, "dpkg", "--validate-version", fields["Version"])
			for _, d := range []string{"passwd", "systemd"} {
				if !strings.Contains(fields["Depends"], d) {
					t.Errorf("Depends %q lacks %s", fields["Depends"], d)
				}
			}

			files := debContents(t, pkg)
			binPath := "/usr/bin/" + tt.name
			if tt.name == "fleet-agent" {
				// The agent updates itself: its binary lives in a folder its
				// user owns once installed, /usr/bin/fleet-agent a relative
				// symlink to it (docs/updates.md).
				binPath = "/usr/lib/fleet-agent/fleet-agent"
				if l := files["/usr/bin/fleet-agent"]; l.hdr == nil || l.hdr.Typeflag != tar.TypeSymlink || l.hdr.Linkname != "../lib/fleet-agent/fleet-agent" {
					t.Errorf("/usr/bin/fleet-agent is not a symlink to ../lib/fleet-agent/fleet-agent: %+v", l.hdr)
				}
			}
			want := []entry{
				{binPath, 0o755, false},
				{"/lib/systemd/system/" + tt.name + ".service", 0o644, false},
				{tt.conffile, 0o640, false},
				{filepath.Dir(tt.conffile), 0o750, true},
				{"/usr/share/doc/" + tt.name + "/copyright", 0o644, false},
				{"/usr/share/doc/" + tt.name + "/deploy.md", 0o644, false},
			}
			if tt.name == "fleet-relay" {
				want = append(want, entry{"/lib/systemd/system/fleet-relay-backup.service", 0o644, false},
					entry{"/lib/systemd/system/fleet-relay-backup.timer", 0o644, false})
			}
			if tt.name == "fleet-agent" {
				want = append(want, entry{"/usr/lib/fleet-agent", 0o755, true}, entry{"/lib/udev/rules.d/60-fleet-gpio.rules", 0o644, false},
					entry{"/usr/lib/modules-load.d/fleet-agent.conf", 0o644, false},
					entry{polkitRule, 0o644, false})
				checkPolkitRule(t, files[polkitRule].body)
			}
			for _, w := range want {
				f, ok := files[w.path]
				if !ok {
					t.Errorf("%s missing from the package", w.path)
					continue
				}
				if f.hdr.Mode&0o7777 != w.mode || f.hdr.Uname != "root" || f.hdr.Gname != "root" || (f.hdr.Typeflag == tar.TypeDir) != w.dir {
					t.Errorf("%s: mode %o %s:%s dir=%v, want %o root:root dir=%v", w.path, f.hdr.Mode&0o7777, f.hdr.Uname, f.hdr.Gname, f.hdr.Typeflag == tar.TypeDir, w.mode, w.dir)
				}
			}
			if src, _ := os.ReadFile(filepath.Join("systemd", tt.name+".service")); !bytes.Equal(files["/lib/systemd/system/"+tt.name+".service"].body, src) {
				t.Errorf("packaged unit differs from deploy/systemd/%s.service", tt.name)
			}

			// The binary is for the package's architecture, and static.
			ef, err := elf.NewFile(bytes.NewReader(files[binPath].body))
			if err != nil {
				t.Fatalf("%s: %v", binPath, err)
			}
			if ef.Machine != machines[tt.arch] {
				t.Errorf("%s is %v, want %v", binPath, ef.Machine, machines[tt.arch])
			}
			for _, p := range ef.Progs {
				if p.Type == elf.PT_INTERP {
					t.Errorf("%s has an interpreter: not static", binPath)
				}
			}

			// Control archive: conffiles and maintainer scripts.
			ctl := t.TempDir()
			run(t, "dpkg-deb", "-e", pkg, ctl)
			conf, _ := os.ReadFile(filepath.Join(ctl, "conffiles"))
			if strings.TrimSpace(string(conf)) != tt.conffile {
				t.Errorf("conffiles %q, want %s", conf, tt.conffile)
			}
			for _, s := range []string{"postinst", "prerm", "postrm"} {
				p := filepath.Join(ctl, s)
				b, err := os.ReadFile(p)
				if err != nil {
					t.Errorf("%s: %v", s, err)
					continue
				}
				if strings.Contains(string(b), "@PKG@") || strings.Contains(string(b), "@CONFFILE@") || strings.Contains(string(b), "@EXTRA_GROUPS@") {
					t.Errorf("%s: template placeholder left", s)
				}
				if !strings.Contains(string(b), "PKG="+tt.name+"\n") {
					t.Errorf("%s does not name %s", s, tt.name)
				}
				run(t, "sh", "-n", p)
			}
		})
	}
}

// fakeRoot makes an empty Debian-like root for dpkg --root: the dpkg
// database and the account files of base-passwd (root, and group dialout).
func fakeRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers", "etc", "usr/sbin", "var/lib"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"var/lib/dpkg/status": "",
		"etc/passwd":          "root:x:0:0:root:/root:/bin/sh\n",
		"etc/shadow":          "root:*:20000:0:99999:7:::\n",
		"etc/group":           "root:x:0:\ndialout:x:20:\n",
		"etc/gshadow":         "root:*::\ndialout:*::\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// accountLine returns the line of name in a root's passwd or group file.
func accountLine(t *testing.T, root, file, name string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "etc", file))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name+":") {
			found = append(found, l)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: %d lines for %s:\n%s", file, len(found), name, b)
	}
	return strings.Split(found[0], ":")
}

// TestPackagesInstall installs both amd64 packages into a throwaway root
// with dpkg, running their maintainer scripts (chrootless: they act on
// $DPKG_ROOT), twice (the second is an upgrade), runs the installed relay,
// then purges both.
func TestPackagesInstall(t *testing.T) {
	hostPasswd, _ := os.ReadFile("/etc/passwd")
	hostGroup, _ := os.ReadFile("/etc/group")
	root := fakeRoot(t)
	dpkg := func(args ...string) {
		t.Helper()
		cmd := exec.Command("dpkg", append([]string{"--root=" + root, "--force-not-root", "--force-script-chrootless", "--force-depends"}, args...)...)
		cmd.Env = append(os.Environ(), "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("dpkg %v: %v\n%s", args, err, out)
		}
	}
	agentDeb, relayDeb := deb(t, "fleet-agent", "amd64"), deb(t, "fleet-relay", "amd64")
	dpkg("-i", agentDeb, relayDeb)
	dpkg("-i", agentDeb, relayDeb) // upgrade in place: the scripts are idempotent

	for _, name := range []string{"fleet-agent", "fleet-relay"} {
		u := accountLine(t, root, "passwd", name)
		g := accountLine(t, root, "group", name)
		if u[3] != g[2] || u[5] != "/var/lib/"+name || u[6] != "/usr/sbin/nologin" {
			t.Errorf("passwd %v, group %v", u, g)
		}
		conf := map[string]string{"fleet-agent": "agent.yaml", "fleet-relay": "relay.env"}[name]
		for path, mode := range map[string]os.FileMode{"/etc/" + name: 0o750 | os.ModeDir, "/etc/" + name + "/" + conf: 0o640} {
			st, err := os.Stat(filepath.Join(root, path))
			if err != nil {
				t.Fatal(err)
			}
			sys := st.Sys().(*syscall.Stat_t)
			if st.Mode() != mode || sys.Uid != 0 || g[2] != strconv.FormatUint(uint64(sys.Gid), 10) {
				t.Errorf("%s: %v uid %d gid %d, want %v root:%s (%s)", path, st.Mode(), sys.Uid, sys.Gid, mode, name, g[2])
			}
		}
		link, err := os.Readlink(filepath.Join(root, "etc/systemd/system/multi-user.target.wants", name+".service"))
		if err != nil || link != "/lib/systemd/system/"+name+".service" {
			t.Errorf("%s not enabled: %q %v", name, link, err)
		}
	}
	for _, grp := range []string{"dialout", "gpio"} {
		members := accountLine(t, root, "group", grp)[3]
		if !strings.Contains(","+members+",", ",fleet-agent,") {
			t.Errorf("group %s members %q lack fleet-agent", grp, members)
		}
	}
	if strings.Contains(accountLine(t, root, "group", "dialout")[3], "fleet-relay") {
		t.Errorf("fleet-relay joined dialout")
	}

	// The agent's user owns its binary and the binary's folder (it
	// updates itself), also after the upgrade put a root-owned binary there.
	agentUser := accountLine(t, root, "passwd", "fleet-agent")
	for _, p := range []string{"usr/lib/fleet-agent", "usr/lib/fleet-agent/fleet-agent"} {
		st, err := os.Stat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		if sys := st.Sys().(*syscall.Stat_t); strconv.FormatUint(uint64(sys.Uid), 10) != agentUser[2] || st.Mode().Perm() != 0o755 {
			t.Errorf("/%s: uid %d mode %v, want fleet-agent's (%s) 0755", p, sys.Uid, st.Mode().Perm(), agentUser[2])
		}
	}

	out, err := exec.Command(filepath.Join(root, "usr/bin/fleet-relay"), "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "backup") || !strings.Contains(string(out), "serve") {
		t.Fatalf("installed fleet-relay --help: %v\n%s", err, out)
	}
	out, err = exec.Command(filepath.Join(root, "usr/bin/fleet-agent"), "-h").CombinedOutput()
	if !strings.Contains(string(out), "-relay") {
		t.Fatalf("installed fleet-agent -h: %v\n%s", err, out)
	}

	// Purge: state and configuration go, the accounts stay.
	state := filepath.Join(root, "var/lib/fleet-agent/spool")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	// What an interrupted update leaves beside the binary goes too.
	if err := os.WriteFile(filepath.Join(root, "usr/lib/fleet-agent/fleet-agent.new"), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	dpkg("--purge", "fleet-agent", "fleet-relay")
	for _, gone := range []string{"var/lib/fleet-agent", "etc/fleet-agent", "etc/fleet-relay", "usr/bin/fleet-agent", "usr/lib/fleet-agent",
		"etc/systemd/system/multi-user.target.wants/fleet-agent.service"} {
		if _, err := os.Lstat(filepath.Join(root, gone)); !os.IsNotExist(err) {
			t.Errorf("%s still there after purge (%v)", gone, err)
		}
	}
	accountLine(t, root, "passwd", "fleet-agent")

	// Nothing reached the host's accounts.
	if b, _ := os.ReadFile("/etc/passwd"); !bytes.Equal(b, hostPasswd) {
		t.Errorf("the host's /etc/passwd changed")
	}
	if b, _ := os.ReadFile("/etc/group"); !bytes.Equal(b, hostGroup) {
		t.Errorf("the host's /etc/group changed")
	}
}

// polkitRule is where the agent's .deb installs its polkit rule.
const polkitRule = "/usr/share/polkit-1/rules.d/50-fleet-agent.rules"

// checkPolkitRule: the packaged rule is deploy/package's, and allows the
// fleet-agent user exactly logind's reboot actions: no other action of
// logind or anything else, and for no other user.
func checkPolkitRule(t *testing.T, body []byte) {
	t.Helper()
	if src, _ := os.ReadFile("package/fleet-agent.polkit.rules"); !bytes.Equal(body, src) {
		t.Errorf("packaged %s differs from deploy/package/fleet-agent.polkit.rules", polkitRule)
	}
	actions := regexp.MustCompile(`action\.id\s*==\s*"([^"]+)"`).FindAllStringSubmatch(string(body), -1)
	var ids []string
	for _, a := range actions {
		ids = append(ids, a[1])
	}
	if want := []string{"org.freedesktop.login1.reboot", "org.freedesktop.login1.reboot-multiple-sessions"}; !slices.Equal(ids, want) {
		t.Errorf("polkit rule allows actions %v, want exactly %v", ids, want)
	}
	users := regexp.MustCompile(`subject\.user\s*==\s*"([^"]+)"`).FindAllStringSubmatch(string(body), -1)
	if len(users) != 1 || users[0][1] != "fleet-agent" {
		t.Errorf("polkit rule is for users %v, want fleet-agent only", users)
	}
	code := regexp.MustCompile(`(?m)^\s*//.*$`).ReplaceAllString(string(body), "")
	if n := strings.Count(code, "polkit.Result.YES"); n != 1 || strings.Contains(code, "action.id.indexOf") || strings.Contains(code, "startsWith") {
		t.Errorf("polkit rule grants more than one match (%d YES, or a prefix match)", n)
	}
	if _, err := exec.LookPath("node"); err == nil {
		// The rule is valid JavaScript (polkit's duktape refuses a
		// syntax error, and then none of the file's rules apply).
		cmd := exec.Command("node", "--check")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("polkit rule is not valid JavaScript: %v\n%s", err, out)
		}
	}
}
