package deploy_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/peterbourgon/ff/v3/ffyaml"

	"github.com/fleet/fleet/agent"
	"github.com/fleet/fleet/test/rig/logbuf"
	"github.com/fleet/fleet/test/rig/testnet"
)

// TestAgentInstalledConfig parses deploy/agent.yaml, the file the package
// installs as the live configuration: only relay and token are in it (empty
// until the operator sets them, so the agent refuses to start before), and
// everything else keeps the agent's defaults (host name, system time zone,
// catalog ports, WireGuard watched only when set up), none of the example's
// sample values.
func TestAgentInstalledConfig(t *testing.T) {
	keys := yamlKeys(t, "agent.yaml")
	slices.Sort(keys)
	if fmt.Sprint(keys) != "[relay token]" {
		t.Errorf("deploy/agent.yaml sets %v, want only relay and token", keys)
	}
	if _, err := agent.ParseConfig([]string{"--config", "agent.yaml"}, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "--relay is required") || !strings.Contains(err.Error(), "--token is required") {
		t.Errorf("the installed config as shipped: %v, want relay and token required", err)
	}
	c, err := agent.ParseConfig([]string{"--config", "agent.yaml", "--relay", "https://relay.example.com", "--token", "fleet_dt_x"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "" || c.Location != "" || c.Timezone != "" || len(c.Ports) != 0 || c.VPNInterface != agent.VPNAuto || c.HW != "linux" || c.Model != "IG-500" {
		t.Errorf("defaults overridden by the installed config: %+v", c)
	}
}

// TestAgentExample parses deploy/agent.example.yaml with the agent's own
// configuration parser: every key must be a flag of fleet-agent (ff refuses
// unknown keys) and every value must validate. The keys are also checked
// against `fleet-agent -h` of the packaged binary.
func TestAgentExample(t *testing.T) {
	c, err := agent.ParseConfig([]string{"--config", "agent.example.yaml"}, io.Discard)
	if err != nil {
		t.Fatalf("agent.example.yaml: %v", err)
	}
	if c.StateDir != "/var/lib/fleet-agent" || c.HW != "linux" || c.Ports["rs485-1"] != "/dev/ttyUSB0" || c.VPNInterface != "wg0" {
		t.Fatalf("parsed %+v", c)
	}
	keys := yamlKeys(t, "agent.example.yaml")
	// Commented-out keys ("# metrics-listen: ...") are flags too.
	b, _ := os.ReadFile("agent.example.yaml")
	for _, m := range regexp.MustCompile(`(?m)^#\s?([a-z][a-z0-9-]*): `).FindAllStringSubmatch(string(b), -1) {
		keys = append(keys, m[1])
	}
	root := t.TempDir()
	run(t, "dpkg-deb", "-x", deb(t, "fleet-agent", "amd64"), root)
	flags := helpFlags(t, filepath.Join(root, "usr/bin/fleet-agent"), "-h")
	for _, k := range keys {
		if !slices.Contains(flags, k) {
			t.Errorf("agent.example.yaml: key %q is not a flag of fleet-agent (flags: %v)", k, flags)
		}
	}
	if len(keys) < 20 {
		t.Fatalf("only %d keys read from agent.example.yaml: %v", len(keys), keys)
	}

	// The same parser refuses a key that is no flag: the check above can fail.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, append(b, []byte("\nspool-max-size: 10\n")...), 0o600)
	if _, err := agent.ParseConfig([]string{"--config", bad}, io.Discard); err == nil || !strings.Contains(err.Error(), "spool-max-size") {
		t.Fatalf("unknown key accepted: %v", err)
	}
}

func yamlKeys(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]bool{}
	if err := ffyaml.Parser(f, func(name, _ string) error { seen[name] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var helpFlagRE = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)

// helpFlags runs a binary's help and returns its flag names.
func helpFlags(t *testing.T, bin string, args ...string) []string {
	t.Helper()
	out, _ := exec.Command(bin, args...).CombinedOutput()
	var flags []string
	for _, m := range helpFlagRE.FindAllStringSubmatch(string(out), -1) {
		flags = append(flags, m[1])
	}
	if len(flags) < 5 {
		t.Fatalf("%s %v: no flags in its help:\n%s", bin, args, out)
	}
	return flags
}

// envEntry is one FLEET_ line of relay.example.env, commented or not.
type envEntry struct {
	key, value string
	active     bool
}

var envLineRE = regexp.MustCompile(`^(#?)(FLEET_[A-Z0-9_]+)=(.*)$`)

func relayEnv(t *testing.T) []envEntry {
	t.Helper()
	f, err := os.Open("relay.example.env")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []envEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := envLineRE.FindStringSubmatch(line); m != nil {
			out = append(out, envEntry{key: m[2], value: m[3], active: m[1] == ""})
			continue
		}
		if strings.TrimSpace(line) != "" && !strings.HasPrefix(line, "#") {
			t.Errorf("relay.example.env: not a FLEET_KEY=value line: %q", line)
		}
	}
	return out
}

// TestRelayExample checks deploy/relay.example.env against `fleet-relay
// serve -h` of the packaged binary: every variable is a serve flag and
// every serve flag has its variable. Then it starts that binary with every
// line of the file in its environment, commented ones too (the defaults
// they show must parse), on a temporary database and port, and waits for
// /healthz.
func TestRelayExample(t *testing.T) {
	root := t.TempDir()
	run(t, "dpkg-deb", "-x", deb(t, "fleet-relay", "amd64"), root)
	relay := filepath.Join(root, "usr/bin/fleet-relay")
	flags := helpFlags(t, relay, "serve", "-h")
	entries := relayEnv(t)
	inFile := map[string]bool{}
	for _, e := range entries {
		flag := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(e.key, "FLEET_")), "_", "-")
		inFile[flag] = true
		if !slices.Contains(flags, flag) {
			t.Errorf("relay.example.env: %s is no flag of fleet-relay serve (--%s)", e.key, flag)
		}
	}
	for _, f := range flags {
		if !inFile[f] {
			t.Errorf("relay.example.env: serve flag --%s has no FLEET_%s line; add it (commented, with its default)",
				f, strings.ToUpper(strings.ReplaceAll(f, "-", "_")))
		}
	}
	if t.Failed() {
		return
	}

	dir := t.TempDir()
	addr := testnet.FreeAddr(t)
	env := []string{"PATH=/usr/bin:/bin"}
	for _, e := range entries {
		switch e.key {
		case "FLEET_TLS_CERT", "FLEET_TLS_KEY", "FLEET_WEBHOOK_CA":
			continue // files an operator provides
		case "FLEET_DB":
			e.value = filepath.Join(dir, "relay.db")
		case "FLEET_LISTEN":
			e.value = addr
		}
		env = append(env, e.key+"="+e.value)
	}
	cmd := exec.Command(relay, "serve")
	cmd.Env = env
	logs := startProcess(t, cmd)
	waitHealthy(t, "http://"+addr+"/readyz", logs)
	if _, err := os.Stat(filepath.Join(dir, "relay.db")); err != nil {
		t.Fatalf("FLEET_DB not used: %v", err)
	}
}

// startProcess starts cmd with its output collected, and stops it with
// SIGINT (SIGKILL after 10 s) when the test ends.
func startProcess(t *testing.T, cmd *exec.Cmd) *logbuf.Buffer {
	t.Helper()
	logs := &logbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	return logs
}

// waitHealthy polls url until it answers 200 (10 s at most).
func waitHealthy(t *testing.T, url string, logs *logbuf.Buffer) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not healthy (%v); relay output:\n%s", url, err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
