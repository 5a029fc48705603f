package deploy_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/test/rig/minisign"
)

// TestUpdateUnderSystemd updates the agent under the shipped unit, in the
// Debian root booted with systemd-nspawn: the installed binary is replaced
// by agent/update's test program (testdata/updatee, which boots the real
// updater and takes its command from the state directory), the unit's
// ExecStart pointed at it by a drop-in and nothing else changed, so the
// sandbox (user, ProtectSystem=strict with ReadWritePaths, seccomp,
// no_new_privs) is the one the package ships. A good release is
// downloaded from a relay on the host, runs on trial and is kept (the
// binary in /usr/lib/fleet-agent is the new one, still the agent user's,
// and the service's process runs it); then a release that exits at once
// is rolled back by systemd's restarts (the old binary on disk and
// running, the service active).
func TestUpdateUnderSystemd(t *testing.T) {
	root := nspawnRoot(t)
	copyFile(t, deb(t, "fleet-agent", "amd64"), filepath.Join(root, "var/tmp/fleet-debs/fleet-agent.deb"), 0o644)
	install := exec.Command("systemd-nspawn", "-q", "--register=no", "--keep-unit", "-D", root, "--pipe",
		"sh", "-c", "dpkg -i /var/tmp/fleet-debs/fleet-agent.deb && echo INSTALLED")
	if out, _ := install.CombinedOutput(); !strings.Contains(string(out), "INSTALLED") {
		t.Fatalf("dpkg -i in the container:\n%s", out)
	}
	u := accountLine(t, root, "passwd", "fleet-agent")
	uid, _ := strconv.Atoi(u[2])
	gid, _ := strconv.Atoi(u[3])

	builds := t.TempDir()
	build := func(version, behavior string) string {
		out := filepath.Join(builds, "updatee-"+version)
		cmd := exec.Command("go", "build", "-ldflags", "-X main.version="+version+" -X main.behavior="+behavior, "-o", out, "./testdata/updatee")
		cmd.Dir = filepath.Join(repo, "agent/update")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build updatee: %v\n%s", err, b)
		}
		return out
	}
	bin := filepath.Join(root, "usr/lib/fleet-agent/fleet-agent")
	copyFile(t, build("1.0.0", "good"), bin, 0o755)
	if err := os.Chown(bin, uid, gid); err != nil {
		t.Fatal(err)
	}

	// The relay's release download, on the host (the container shares
	// its network).
	const token = "device-token-of-the-update-test"
	releases := map[string][]byte{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := releases[r.URL.Path]
		if r.Header.Get("Authorization") != "Bearer "+token || !ok {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(w, r, "fleet-agent", time.Time{}, strings.NewReader(string(b)))
	}))
	defer srv.Close()
	key := minisign.NewKey(t)
	release := func(version, behavior string) protocol.Command {
		p := build(version, behavior)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		_, sig := key.Sign(t, p, "fleet-agent "+version)
		sum := sha256.Sum256(b)
		id := "rel" + strings.ReplaceAll(version, ".", "")
		releases[protocol.ReleasePath(id)] = b
		return protocol.Command{ID: "cmd-" + id, Kind: protocol.CommandUpdate, Update: &protocol.UpdateOrder{
			ReleaseID: id, Version: version, Path: protocol.ReleasePath(id), Size: int64(len(b)),
			SHA256: hex.EncodeToString(sum[:]), Signature: sig, HealthFor: protocol.Duration{Duration: 3 * time.Second}}}
	}
	good, bad := release("2.0.0", "good"), release("2.1.0", "exit")

	copyFile(t, key.Pub, filepath.Join(root, "etc/fleet-agent/update.pub"), 0o640)
	if err := os.Chown(filepath.Join(root, "etc/fleet-agent/update.pub"), 0, gid); err != nil {
		t.Fatal(err)
	}
	dropIn := "[Service]\nExecStart=\nExecStart=/usr/bin/fleet-agent --state /var/lib/fleet-agent --relay " + srv.URL +
		" --key /etc/fleet-agent/update.pub\nEnvironment=FLEET_TOKEN=" + token + "\n"
	copyFileText(t, filepath.Join(root, "etc/systemd/system/fleet-agent.service.d/update-test.conf"), dropIn)
	state := filepath.Join(root, "var/lib/fleet-agent")
	if err := os.MkdirAll(state, 0o750); err != nil {
		t.Fatal(err)
	}
	order := func(cmd protocol.Command) {
		b, _ := json.Marshal(cmd)
		p := filepath.Join(state, "order.json")
		copyFileText(t, p, string(b))
		for _, f := range []string{state, p} {
			if err := os.Chown(f, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	final := func(c *container, id string) protocol.CommandStatus {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			b, _ := os.ReadFile(filepath.Join(state, "reports.jsonl"))
			var last protocol.CommandStatus
			sc := bufio.NewScanner(strings.NewReader(string(b)))
			for sc.Scan() {
				var st protocol.CommandStatus
				if json.Unmarshal(sc.Bytes(), &st) == nil && st.ID == id {
					last = st
				}
			}
			_, jerr := os.Stat(filepath.Join(state, "update/journal.json"))
			switch last.State {
			case protocol.CommandHealthy, protocol.CommandFailed, protocol.CommandRolledBack:
				if os.IsNotExist(jerr) {
					return last
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no final state for %s: last %+v\n%s", id, last, c.journal())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	onDisk := func() string {
		out, err := exec.Command(bin, "--version").Output()
		if err != nil {
			t.Fatalf("%s --version: %v", bin, err)
		}
		return strings.TrimSpace(string(out))
	}
	// The service's process runs the binary at the binary path (not
	// fleet-agent.new, not a deleted file) and is active.
	runs := func(c *container, version string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			pid := strings.TrimSpace(c.must("systemctl", "show", "-p", "MainPID", "--value", "fleet-agent"))
			exe, _ := c.exec("readlink", "/proc/"+pid+"/exe")
			active, _ := c.exec("systemctl", "is-active", "fleet-agent")
			if strings.TrimSpace(exe) == "/usr/lib/fleet-agent/fleet-agent" && strings.TrimSpace(active) == "active" && onDisk() == version {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("service process %s runs %q (%s), disk holds %s; want %s\n%s", pid, exe, active, onDisk(), version, c.journal())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	order(good)
	c := boot(t, root)
	if st := final(c, good.ID); st.State != protocol.CommandHealthy || st.Version != "2.0.0" {
		t.Fatalf("good release: %+v\n%s", st, c.journal())
	}
	runs(c, "2.0.0")
	if st, err := os.Stat(bin); err != nil || st.Sys().(*syscall.Stat_t).Uid != uint32(uid) || st.Mode().Perm() != 0o755 {
		t.Errorf("%s after the update: %v %v, want the agent user's 0755", bin, st.Mode(), err)
	}

	order(bad)
	c.must("systemctl", "restart", "fleet-agent")
	st := final(c, bad.ID)
	if st.State != protocol.CommandRolledBack || !strings.Contains(st.Error, "stopped 3 times") || st.Version != "2.0.0" {
		t.Fatalf("release that exits at once: %+v\n%s", st, c.journal())
	}
	runs(c, "2.0.0")
	j := c.journal()
	for _, bad := range []string{"operation not permitted", "permission denied", "read-only file system", "bad system call"} {
		if strings.Contains(strings.ToLower(j), bad) {
			t.Errorf("the journal says %q:\n%s", bad, j)
		}
	}
	t.Logf("%s", j)
	if n := strings.TrimSpace(c.must("systemctl", "show", "-p", "NRestarts", "--value", "fleet-agent")); n == "0" {
		t.Errorf("systemd never restarted the agent: the rollback came from elsewhere\n%s", j)
	}
}

// copyFileText writes text to path (parents made), mode 0644.
func copyFileText(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
