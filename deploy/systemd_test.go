package deploy_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleet/fleet/test/rig/fleetproc"
	"github.com/fleet/fleet/test/rig/logbuf"
	"github.com/fleet/fleet/test/rig/testnet"
)

// container is a Debian root booted with systemd-nspawn.
type container struct {
	t    *testing.T
	root string
	cmd  *exec.Cmd
	init int // PID 1 of the container, as the host sees it
	logs *logbuf.Buffer
}

// exec runs args in the booted container (nsenter into its namespaces).
func (c *container) exec(args ...string) (string, error) {
	cmd := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(c.init), "-m", "-u", "-i", "-n", "-p", "--"}, args...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "SYSTEMD_PAGER=", "LANG=C"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// must runs args in the container and fails the test, with the services'
// journal, when they fail.
func (c *container) must(args ...string) string {
	c.t.Helper()
	out, err := c.exec(args...)
	if err != nil {
		c.t.Fatalf("in the container: %v: %v\n%s\n%s", args, err, out, c.journal())
	}
	return out
}

func (c *container) journal() string {
	out, _ := c.exec("journalctl", "--no-pager", "-o", "short-precise", "-u", "fleet-agent", "-u", "fleet-relay", "-u", "fleet-relay-backup")
	return "journal:\n" + out
}

// nspawnRoot copies the cached Debian root (make nspawn-root) for one test.
func nspawnRoot(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(nspawnTemplate, ".complete")); err != nil {
		t.Fatalf("no Debian root for systemd-nspawn at %s (make nspawn-root): %v", nspawnTemplate, err)
	}
	root := filepath.Join(t.TempDir(), "root")
	run(t, "cp", "-a", nspawnTemplate, root)
	return root
}

// boot starts systemd in root and waits for the container's PID 1.
func boot(t *testing.T, root string) *container {
	t.Helper()
	c := &container{t: t, root: root, logs: &logbuf.Buffer{}}
	// The container shares the host's network; nspawn keeps CAP_NET_ADMIN
	// in its bounding set only when asked (the agent's unit grants it).
	c.cmd = exec.Command("systemd-nspawn", "-q", "--register=no", "--keep-unit", "--capability=CAP_NET_ADMIN", "-D", root, "-b")
	c.cmd.Stdout, c.cmd.Stderr = c.logs, c.logs
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { c.cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		c.cmd.Process.Signal(syscall.SIGTERM) // nspawn powers the container off
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			c.cmd.Process.Kill()
			<-done
		}
	})
	// A boot takes about a second here; the bound leaves room for a
	// loaded CI machine.
	deadline := time.Now().Add(60 * time.Second)
	for c.init == 0 {
		c.init = childOf(c.cmd.Process.Pid)
		if c.init != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container's systemd did not start:\n%s", c.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Wait until systemd answers and the boot is done.
	for {
		out, _ := c.exec("systemctl", "is-system-running")
		if s := strings.TrimSpace(out); s == "running" || s == "degraded" {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("boot not finished (%q):\n%s", out, c.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// childOf returns a child process of pid (0 when none).
func childOf(pid int) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut at ')'.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			return child
		}
	}
	return 0
}

// procStatus reads fields of /proc/PID/status of a unit's main process in
// the container.
func (c *container) procStatus(unit string) map[string]string {
	c.t.Helper()
	pid := strings.TrimSpace(c.must("systemctl", "show", "-p", "MainPID", "--value", unit))
	if pid == "" || pid == "0" {
		c.t.Fatalf("%s has no main process\n%s", unit, c.journal())
	}
	out := c.must("cat", "/proc/"+pid+"/status")
	st := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if ok {
			st[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return st
}

// TestUnitsUnderSystemd installs both amd64 packages in a Debian bookworm
// root with dpkg (maintainer scripts run for real), boots it with systemd
// (systemd-nspawn, sharing the host's network), and checks the services as
// their units run them: the relay answers, the agent connects and comes
// ONLINE, each process has the user, capabilities, no_new_privs and
// seccomp filter the unit promises, the status file and SIGUSR1 work,
// the backup unit writes a usable copy, and stopping the agent takes the
// device OFFLINE. Nothing in the services' journal may say that the
// sandbox refused something.
func TestUnitsUnderSystemd(t *testing.T) {
	root := nspawnRoot(t)
	debs := filepath.Join(root, "var/tmp/fleet-debs")
	for _, p := range []string{"fleet-agent", "fleet-relay"} {
		copyFile(t, deb(t, p, "amd64"), filepath.Join(debs, p+".deb"), 0o644)
	}
	install := exec.Command("systemd-nspawn", "-q", "--register=no", "--keep-unit", "-D", root, "--pipe",
		"sh", "-c", "dpkg -i /var/tmp/fleet-debs/fleet-agent.deb /var/tmp/fleet-debs/fleet-relay.deb && echo INSTALLED")
	out, _ := install.CombinedOutput()
	if !strings.Contains(string(out), "INSTALLED") || !strings.Contains(string(out), "fleet-agent: enabled, not started") {
		t.Fatalf("dpkg -i in the container:\n%s", out)
	}
	ids := func(name string) (uid, gid int) {
		u := accountLine(t, root, "passwd", name)
		uid, _ = strconv.Atoi(u[2])
		gid, _ = strconv.Atoi(u[3])
		return uid, gid
	}
	agentUID, _ := ids("fleet-agent")
	relayUID, relayGID := ids("fleet-relay")

	// The relay's database with an organization and a device, made before
	// boot with the packaged binary; then the two config files.
	relay := filepath.Join(root, "usr/bin/fleet-relay")
	stateDir := filepath.Join(root, "var/lib/fleet-relay")
	if err := os.MkdirAll(stateDir, 0o750); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(stateDir, "relay.db")
	relayCLI := fleetproc.AdminOn(t, relay, db)
	orgID, dev := addGateway(relayCLI)
	run(t, "chown", "-R", fmt.Sprintf("%d:%d", relayUID, relayGID), stateDir)

	addr := testnet.FreeAddr(t)
	editFile(t, filepath.Join(root, "etc/fleet-relay/relay.env"), map[string]string{`(?m)^FLEET_LISTEN=.*$`: "FLEET_LISTEN=" + addr})
	// The installed agent.yaml holds relay and token only (the rest are the
	// agent's defaults); hw: sim is added because the container has none
	// of the gateway's devices.
	agentConf := filepath.Join(root, "etc/fleet-agent/agent.yaml")
	editFile(t, agentConf, map[string]string{
		`(?m)^relay: .*$`: "relay: http://" + addr,
		`(?m)^token: .*$`: "token: " + dev.Token,
	})
	appendFile(t, agentConf, "hw: sim\n")
	var key struct{ Key string }
	relayCLI(&key, "key", "create", "--org", orgID, "--name", "test", "--scopes", "devices:read")

	c := boot(t, root)
	waitHealthy(t, "http://"+addr+"/readyz", c.logs)
	if out := c.must("systemctl", "is-active", "fleet-relay", "fleet-agent"); out != "active\nactive\n" {
		t.Fatalf("is-active: %q\n%s", out, c.journal())
	}
	deviceStatus := func() string {
		out := c.must("runuser", "-u", "fleet-relay", "--", "fleet-relay", "device", "list",
			"--db", "/var/lib/fleet-relay/relay.db", "--org", orgID, "--json")
		var ds []struct{ Status string }
		if err := json.Unmarshal([]byte(out), &ds); err != nil || len(ds) != 1 {
			t.Fatalf("device list: %v %q", err, out)
		}
		return ds[0].Status
	}
	waitStatus := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			s := deviceStatus()
			if s == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("device %s, want %s\n%s", s, want, c.journal())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitStatus("ONLINE")

	// The identity the installed configuration reports: the container's
	// host name and time zone, none of the example's sample values.
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/public/devices/"+dev.ID, nil)
	req.Header.Set("Authorization", "Bearer "+key.Key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Data struct{ AgentDeviceName, AgentDeviceLocation, AgentTimezone string }
	}
	json.NewDecoder(res.Body).Decode(&got)
	res.Body.Close()
	host := strings.TrimSpace(c.must("cat", "/proc/sys/kernel/hostname"))
	tz := strings.TrimSpace(c.must("sh", "-c", `cat /etc/timezone 2>/dev/null || readlink /etc/localtime | sed 's|.*zoneinfo/||' | grep . || echo UTC`))
	if d := got.Data; d.AgentDeviceName != host || d.AgentTimezone != tz || d.AgentDeviceLocation != "" {
		t.Errorf("the installed agent reports name %q, location %q, time zone %q; want the host's %q, none, the system's %q",
			d.AgentDeviceName, d.AgentDeviceLocation, d.AgentTimezone, host, tz)
	}

	// The processes as the units made them.
	for _, tt := range []struct {
		unit string
		want map[string]string
	}{
		{"fleet-agent", map[string]string{"Uid": strings.Repeat(strconv.Itoa(agentUID)+" ", 4), "CapEff": "0000000000001000",
			"CapBnd": "0000000000001000", "CapAmb": "0000000000001000", "NoNewPrivs": "1", "Seccomp": "2"}},
		{"fleet-relay", map[string]string{"Uid": strings.Repeat(strconv.Itoa(relayUID)+" ", 4), "CapEff": "0000000000000000",
			"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}},
	} {
		st := c.procStatus(tt.unit)
		for k, v := range tt.want {
			if st[k] != strings.TrimSpace(v) {
				t.Errorf("%s: %s %q, want %q", tt.unit, k, st[k], strings.TrimSpace(v))
			}
		}
		if tt.unit == "fleet-agent" {
			groups := " " + st["Groups"] + " "
			gpio := accountLine(t, root, "group", "gpio")[2]
			if !strings.Contains(groups, " 20 ") || !strings.Contains(groups, " "+gpio+" ") {
				t.Errorf("agent groups %q lack dialout (20) or gpio (%s)", st["Groups"], gpio)
			}
		}
	}

	// Maintenance status through the state directory and SIGUSR1.
	c.must("sh", "-c", "echo UPDATING > /var/lib/fleet-agent/status && systemctl kill -s USR1 fleet-agent")
	waitStatus("UPDATING")
	c.must("sh", "-c", "rm /var/lib/fleet-agent/status && systemctl kill -s USR1 fleet-agent")
	waitStatus("ONLINE")

	// The backup unit, as its timer would start it.
	c.must("systemctl", "start", "fleet-relay-backup.service")
	copies, _ := filepath.Glob(filepath.Join(root, "var/backups/fleet-relay/relay-*.db"))
	if len(copies) != 1 {
		t.Fatalf("backups: %v\n%s", copies, c.journal())
	}
	if st, err := os.Stat(copies[0]); err != nil || st.Mode().Perm() != 0o600 || st.Sys().(*syscall.Stat_t).Uid != uint32(relayUID) {
		t.Fatalf("backup %s: %v %v", copies[0], st.Mode(), err)
	}
	var orgs []struct{ ID string }
	out2, err := exec.Command(relay, "org", "list", "--db", copies[0], "--json").Output()
	if err != nil || json.Unmarshal(out2, &orgs) != nil || len(orgs) != 1 || orgs[0].ID != orgID {
		t.Fatalf("the backup does not hold the organization: %v %s", err, out2)
	}

	c.must("systemctl", "stop", "fleet-agent")
	waitStatus("OFFLINE")
	j := c.journal()
	if !strings.Contains(j, "fleet-agent stopped") {
		t.Errorf("no clean agent stop in the journal\n%s", j)
	}
	for _, bad := range []string{"operation not permitted", "permission denied", "read-only file system", "bad system call"} {
		if strings.Contains(strings.ToLower(j), bad) {
			t.Errorf("the journal says %q:\n%s", bad, j)
		}
	}
	t.Logf("%s", j)
}

// editFile replaces each regexp's matches in a file with its text.
func editFile(t *testing.T, path string, edits map[string]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for re, repl := range edits {
		r := regexp.MustCompile(re)
		if !r.MatchString(s) {
			t.Fatalf("%s: nothing matches %s", path, re)
		}
		s = r.ReplaceAllLiteralString(s, repl)
	}
	if err := os.WriteFile(path, []byte(s), 0o640); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}
