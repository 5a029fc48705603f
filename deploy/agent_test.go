package deploy_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleet/fleet/test/rig/fleetproc"
	"github.com/fleet/fleet/test/rig/testnet"
)

// agentUID is the numeric user the agent runs as in TestAgentAsServiceUser
// (no account needed); its group is the same number.
const agentUID = 61001

// TestAgentAsServiceUser runs the packaged agent the way
// fleet-agent.service does, without systemd: as an unprivileged user with
// CAP_NET_ADMIN as its only (ambient) capability and no_new_privs, on a
// read-only file system except its state directory (ProtectSystem=strict
// with StateDirectory=), reading the example config as root:group 0640 and
// the token from the environment (the unit's EnvironmentFile=). Against a
// real relay it must come ONLINE, keep its spool in the state directory,
// and stop cleanly on SIGTERM.
func TestAgentAsServiceUser(t *testing.T) {
	pkgRoot := t.TempDir()
	run(t, "dpkg-deb", "-x", deb(t, "fleet-agent", "amd64"), pkgRoot)
	relayPath := filepath.Join(pkgRoot, "relay")
	copyFile(t, relayBin(), relayPath, 0o755)

	dir := t.TempDir()
	db := filepath.Join(dir, "relay.db")
	addr := testnet.FreeAddr(t)
	relay := exec.Command(relayPath, "serve", "--db", db, "--listen", addr)
	relayLogs := startProcess(t, relay)
	waitHealthy(t, "http://"+addr+"/readyz", relayLogs)
	cli := fleetproc.AdminOn(t, relayPath, db)
	orgID, dev := addGateway(cli)

	// The agent user must reach its files: open the temp folders' parents.
	gw := t.TempDir()
	for d := gw; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(gw, "agent.yaml")
	copyFile(t, "agent.example.yaml", conf, 0o640)
	state := filepath.Join(gw, "state")
	for _, p := range []struct {
		path     string
		uid, gid int
		mode     os.FileMode
	}{{conf, 0, agentUID, 0o640}, {state, agentUID, agentUID, 0o750}} {
		if p.path == state {
			if err := os.Mkdir(state, 0o750); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chown(p.path, p.uid, p.gid); err != nil {
			t.Fatal(err)
		}
	}

	id := fmt.Sprint(agentUID)
	script := `mount --bind "$STATE" "$STATE" && mount -o remount,bind,ro / && exec setpriv --reuid=` + id + ` --regid=` + id +
		` --clear-groups --inh-caps=-all,+net_admin --ambient-caps=+net_admin --bounding-set=-all,+net_admin --no-new-privs -- "$@"`
	agent := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
		filepath.Join(pkgRoot, "usr/bin/fleet-agent"), "--config", conf, "--hw", "sim", "--state-dir", state)
	agent.Env = []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin", "STATE=" + state,
		"FLEET_RELAY=http://" + addr, "FLEET_TOKEN=" + dev.Token}
	agentLogs := startProcess(t, agent)

	deadline := time.Now().Add(20 * time.Second)
	for {
		var devices []struct{ ID, Status string }
		cli(&devices, "device", "list", "--org", orgID)
		if len(devices) == 1 && devices[0].Status == "ONLINE" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("device not ONLINE: %+v\nagent:\n%s", devices, agentLogs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The process is the agent itself (unshare, sh and setpriv exec'd).
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", agent.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"Uid": id, "Gid": id, "CapEff": "0000000000001000", "CapBnd": "0000000000001000",
		"CapAmb": "0000000000001000", "NoNewPrivs": "1",
	}
	for _, l := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(l, ":")
		if w, ok := want[k]; ok {
			if f := strings.Fields(v); len(f) == 0 || f[0] != w {
				t.Errorf("agent %s: %q, want %s", k, v, w)
			}
			delete(want, k)
		}
	}
	if len(want) > 0 {
		t.Errorf("not in /proc/PID/status: %v", want)
	}

	var owned int
	filepath.Walk(state, func(p string, fi os.FileInfo, err error) error {
		if err == nil && p != state {
			owned++
			if fi.Sys().(*syscall.Stat_t).Uid != agentUID {
				t.Errorf("%s not owned by the agent user", p)
			}
		}
		return nil
	})
	if owned == 0 {
		t.Fatalf("the agent wrote nothing in its state directory\n%s", agentLogs.String())
	}

	agent.Process.Signal(syscall.SIGTERM)
	deadline = time.Now().Add(15 * time.Second)
	for {
		var devices []struct{ Status string }
		cli(&devices, "device", "list", "--org", orgID)
		if devices[0].Status == "OFFLINE" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("device %s after the agent's SIGTERM\n%s", devices[0].Status, agentLogs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("agent output:\n%s", agentLogs.String())
	if s := agentLogs.String(); strings.Contains(s, "read-only file system") || strings.Contains(s, "permission denied") {
		t.Errorf("agent hit the sandbox:\n%s", s)
	}
}
