package deploy_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/test/rig/testnet"
)

// Exposure thresholds of `systemd-analyze security` (0 safest, 10 unsafe;
// up to 3.9 is "OK"). The relay has no capability, no devices and a user
// namespace; the agent needs CAP_NET_ADMIN (CAN bit timing, WireGuard
// status), serial and GPIO devices with their groups, and netlink and CAN
// sockets, and cannot have PrivateUsers= (its device groups and capability
// must be the host's), so its bound is higher.
const (
	relayMaxExposure = 2.0
	agentMaxExposure = 3.0
)

// installedRoot extracts the amd64 packages into a temporary root beside
// the host's systemd units (for the targets the units refer to), as a
// machine with both packages installed has them.
func installedRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, p := range []string{"fleet-agent", "fleet-relay"} {
		run(t, "dpkg-deb", "-x", deb(t, p, "amd64"), root)
	}
	units := filepath.Join(root, "lib/systemd/system")
	run(t, "cp", "-an", "/lib/systemd/system/.", units)
	// Programs of Essential Debian packages the backup unit runs.
	for _, p := range []string{"/bin/sh", "/usr/bin/install", "/usr/bin/find"} {
		copyFile(t, p, filepath.Join(root, p), 0o755)
	}
	return root
}

func TestUnitsVerify(t *testing.T) {
	root := installedRoot(t)
	out, err := exec.Command("systemd-analyze", "verify", "--root="+root, "fleet-agent.service", "fleet-relay.service",
		"fleet-relay-backup.service", "fleet-relay-backup.timer").CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// No warning at all is expected (an unknown directive, a missing
	// executable, a bad value all print one).
	if s := strings.TrimSpace(string(out)); s != "" {
		t.Fatalf("systemd-analyze verify printed:\n%s", s)
	}
}

// TestUnitsVerifyCatchesErrors proves the verify check can fail: a unit
// with a typo and a missing executable.
func TestUnitsVerifyCatchesErrors(t *testing.T) {
	root := installedRoot(t)
	unit := filepath.Join(root, "lib/systemd/system/fleet-relay.service")
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(b), "ProtectSystem=strict", "ProtectSystm=strict", 1)
	bad = strings.Replace(bad, "ExecStart=/usr/bin/fleet-relay ", "ExecStart=/usr/bin/fleet-relay-missing ", 1)
	if err := os.WriteFile(unit, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("systemd-analyze", "verify", "--root="+root, "fleet-relay.service").CombinedOutput()
	for _, want := range []string{"ProtectSystm", "fleet-relay-missing"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("verify of a broken unit does not mention %s:\n%s", want, out)
		}
	}
}

var exposureRE = regexp.MustCompile(`Overall exposure level for (\S+): ([0-9.]+) (\S+)`)

func TestUnitsSecurityExposure(t *testing.T) {
	root := installedRoot(t)
	for _, tt := range []struct {
		unit string
		max  float64
	}{
		{"fleet-relay.service", relayMaxExposure},
		{"fleet-relay-backup.service", relayMaxExposure},
		{"fleet-agent.service", agentMaxExposure},
	} {
		out, err := exec.Command("systemd-analyze", "security", "--offline=true", "--root="+root, "--no-pager", tt.unit).CombinedOutput()
		if err != nil {
			t.Fatalf("systemd-analyze security %s: %v\n%s", tt.unit, err, out)
		}
		m := exposureRE.FindStringSubmatch(string(out))
		if m == nil {
			t.Fatalf("%s: no overall exposure line in:\n%s", tt.unit, out)
		}
		score, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("systemd-analyze security %s: exposure %.1f %s (bound %.1f)", tt.unit, score, m[3], tt.max)
		if score > tt.max {
			t.Errorf("%s: exposure %.1f over %.1f:\n%s", tt.unit, score, tt.max, out)
		}
	}
}

// unitKeys parses a unit file into key -> values (in order).
func unitKeys(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: line %q", path, line)
		}
		keys[k] = append(keys[k], v)
	}
	return keys
}

// TestUnitsLeastPrivilege pins the hardening the units promise: who runs
// them, which capability, devices and socket families each has.
func TestUnitsLeastPrivilege(t *testing.T) {
	common := map[string]string{
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes", "ProtectHome": "yes",
		"ProtectKernelTunables": "yes", "ProtectKernelModules": "yes", "ProtectKernelLogs": "yes",
		"ProtectControlGroups": "yes", "ProtectClock": "yes", "ProtectHostname": "yes",
		"RestrictNamespaces": "yes", "RestrictRealtime": "yes", "RestrictSUIDSGID": "yes",
		"LockPersonality": "yes", "MemoryDenyWriteExecute": "yes", "SystemCallArchitectures": "native",
		"UMask": "0077",
	}
	tests := []struct {
		unit string
		want map[string]string
		// exact lists every value of a repeated key.
		exact map[string][]string
	}{
		{"fleet-agent.service", map[string]string{
			"User": "fleet-agent", "Group": "fleet-agent", "SupplementaryGroups": "dialout gpio",
			"AmbientCapabilities": "CAP_NET_ADMIN", "CapabilityBoundingSet": "CAP_NET_ADMIN",
			"StateDirectory": "fleet-agent", "ConfigurationDirectory": "fleet-agent",
			"DevicePolicy": "closed", "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK AF_CAN",
			"ExecStart": "/usr/bin/fleet-agent --config /etc/fleet-agent/agent.yaml",
		}, map[string][]string{
			"DeviceAllow":      {"char-ttyS rw", "char-ttyUSB rw", "char-ttyACM rw", "char-gpiochip rw"},
			"SystemCallFilter": {"@system-service", "~@privileged"},
		}},
		{"fleet-relay.service", map[string]string{
			"User": "fleet-relay", "Group": "fleet-relay", "CapabilityBoundingSet": "", "AmbientCapabilities": "",
			"StateDirectory": "fleet-relay", "ConfigurationDirectory": "fleet-relay", "PrivateDevices": "yes",
			"RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6", "ExecStart": "/usr/bin/fleet-relay serve",
			"EnvironmentFile": "/etc/fleet-relay/relay.env", "PrivateUsers": "yes",
		}, map[string][]string{
			"SystemCallFilter": {"@system-service", "~@privileged"},
			"Environment":      {"FLEET_DB=/var/lib/fleet-relay/relay.db"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.unit, func(t *testing.T) {
			keys := unitKeys(t, filepath.Join("systemd", tt.unit))
			for k, v := range common {
				if _, ok := tt.want[k]; !ok {
					tt.want[k] = v
				}
			}
			for k, v := range tt.want {
				if got := keys[k]; len(got) != 1 || got[0] != v {
					t.Errorf("%s=%q, want %q", k, got, v)
				}
			}
			for k, v := range tt.exact {
				if strings.Join(keys[k], "|") != strings.Join(v, "|") {
					t.Errorf("%s: %q, want %q", k, keys[k], v)
				}
			}
			if tt.unit == "fleet-relay.service" {
				for _, k := range []string{"SupplementaryGroups", "DeviceAllow"} {
					if len(keys[k]) > 0 {
						t.Errorf("relay has %s=%q", k, keys[k])
					}
				}
			}
		})
	}
}

// TestBackupUnitCommands runs the commands of fleet-relay-backup.service
// (ExecStart, then ExecStartPost) as systemd would, with its paths moved
// into a temporary folder, against a running relay: a new copy appears,
// copies older than FLEET_BACKUP_KEEP_DAYS go, newer ones stay.
func TestBackupUnitCommands(t *testing.T) {
	keys := unitKeys(t, "systemd/fleet-relay-backup.service")
	env := map[string]string{}
	for _, e := range keys["Environment"] {
		k, v, _ := strings.Cut(e, "=")
		env[k] = v
	}
	pkgRoot := t.TempDir()
	run(t, "dpkg-deb", "-x", deb(t, "fleet-relay", "amd64"), pkgRoot)
	relay := filepath.Join(pkgRoot, "usr/bin/fleet-relay")
	dir := t.TempDir()
	backups := filepath.Join(dir, "backups")
	if err := os.Mkdir(backups, 0o700); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "relay.db")
	env["FLEET_DB"] = db // as a drop-in would
	addr := testnet.FreeAddr(t)
	logs := startProcess(t, exec.Command(relay, "serve", "--db", db, "--listen", addr))
	waitHealthy(t, "http://"+addr+"/readyz", logs)
	run(t, relay, "org", "create", "--db", db, "--name", "Acme")

	old := filepath.Join(backups, "relay-20200101T000000Z.db")
	recent := filepath.Join(backups, "relay-20200102T000000Z.db")
	for _, f := range []struct {
		path string
		age  time.Duration
	}{{old, 30 * 24 * time.Hour}, {recent, 24 * time.Hour}} {
		if err := os.WriteFile(f.path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		mt := time.Now().Add(-f.age)
		os.Chtimes(f.path, mt, mt)
	}
	// systemd's own expansion: %% is %, ${VAR} from Environment=.
	expand := func(cmd string) string {
		cmd = strings.ReplaceAll(cmd, "%%", "%")
		cmd = strings.ReplaceAll(cmd, "/usr/bin/fleet-relay", relay)
		cmd = strings.ReplaceAll(cmd, "/var/backups/fleet-relay", backups)
		return os.Expand(cmd, func(k string) string {
			if v, ok := env[k]; ok {
				return v
			}
			return "${" + k + "}"
		})
	}
	start := keys["ExecStart"]
	if len(start) != 1 || !strings.HasPrefix(start[0], "/bin/sh -c '") || !strings.HasSuffix(start[0], "'") {
		t.Fatalf("ExecStart %q: want /bin/sh -c '...'", start)
	}
	script := expand(strings.TrimSuffix(strings.TrimPrefix(start[0], "/bin/sh -c '"), "'"))
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "FLEET_DB=" + db}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ExecStart %s: %v\n%s", script, err, out)
	}
	post := keys["ExecStartPost"]
	if len(post) != 1 {
		t.Fatalf("ExecStartPost %q", post)
	}
	args := strings.Fields(expand(post[0]))
	run(t, args[0], args[1:]...)

	entries, _ := os.ReadDir(backups)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 2 || names[0] != filepath.Base(recent) || !regexp.MustCompile(`^relay-\d{8}T\d{6}Z\.db$`).MatchString(names[1]) {
		t.Fatalf("backups after a run: %v (want the recent copy and a new one; the old one deleted)", names)
	}
	fresh := filepath.Join(backups, names[1])
	if out := run(t, relay, "org", "list", "--db", fresh); !strings.Contains(out, "Acme") {
		t.Fatalf("the new backup lacks the organization:\n%s", out)
	}
}

// TestRelayDatabaseFromEnvironment: the relay's database URL (for a
// cluster, a postgres:// URL with its password) reaches the process only
// through the environment: ExecStart names no --db, FLEET_DB comes from
// Environment= or from relay.env, which the package installs readable by
// root only (systemd reads it before dropping privileges).
func TestRelayDatabaseFromEnvironment(t *testing.T) {
	keys := unitKeys(t, filepath.Join("systemd", "fleet-relay.service"))
	for _, cmd := range keys["ExecStart"] {
		if strings.Contains(cmd, "--db") || strings.Contains(cmd, "postgres") {
			t.Errorf("ExecStart=%s carries the database on the command line", cmd)
		}
	}
	if got := keys["EnvironmentFile"]; len(got) != 1 || got[0] != "/etc/fleet-relay/relay.env" {
		t.Errorf("EnvironmentFile=%q", got)
	}
	pkg, err := os.ReadFile(filepath.Join("package", "fleet-relay.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)dst: /etc/fleet-relay/relay\.env\n(?:\s+type: .*\n)?\s+file_info: \{mode: 0640, owner: root, group: root\}`)
	if !re.Match(pkg) {
		t.Error("package: /etc/fleet-relay/relay.env is not installed root:root 0640")
	}
	env, err := os.ReadFile("relay.example.env")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^#\s+FLEET_DB=postgres://`).Match(env) {
		t.Error("relay.example.env does not show where a cluster's PostgreSQL URL goes")
	}
}
