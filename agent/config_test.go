package agent

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseConfigFlags(t *testing.T) {
	c, err := ParseConfig([]string{
		"--relay", "https://relay.example.com", "--token", "tok", "--hw", "sim", "--model", "IG-500",
		"--port", "rs485-1=/dev/ttyUSB0", "--port", "canfd-1=can1",
		"--state-dir", "/tmp/st", "--heartbeat", "10s", "--metrics-interval", "1m",
		"--spool-max-bytes", "1048576", "--spool-max-age", "48h", "--name", "gw-7",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Relays) != 1 || c.Relays[0] != "https://relay.example.com" || c.Token != "tok" || c.HW != "sim" || c.Heartbeat != 10*time.Second ||
		c.MetricsInterval != time.Minute || c.SpoolMaxBytes != 1<<20 || c.SpoolMaxAge != 48*time.Hour || c.Name != "gw-7" {
		t.Fatalf("config = %+v", c)
	}
	if len(c.Ports) != 2 || c.Ports["rs485-1"] != "/dev/ttyUSB0" || c.Ports["canfd-1"] != "can1" {
		t.Fatalf("ports = %v", c.Ports)
	}
	if c.StatusFile != "/tmp/st/status" {
		t.Fatalf("status file = %q", c.StatusFile)
	}
	// --hw sim watches no VPN unless asked; passthrough defaults on.
	if c.VPNInterface != "" || c.PassthroughListen != ":4001" {
		t.Fatalf("vpn %q passthrough %q", c.VPNInterface, c.PassthroughListen)
	}
	if strings.Contains(c.String(), "tok") {
		t.Fatalf("String() shows the token: %s", c)
	}
}

func TestParseConfigDefaults(t *testing.T) {
	c, err := ParseConfig([]string{"--relay", "http://r:8080", "--token", "t"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.HW != "linux" || c.Model != "IG-500" || c.Heartbeat != 30*time.Second || c.MetricsInterval != 5*time.Minute ||
		c.StateDir != "/var/lib/fleet-agent" || c.VPNInterface != VPNAuto || c.ProcRoot != "/proc" || c.SysRoot != "/sys" ||
		c.DiskPath != "/" || c.DevRoot != "/dev" {
		t.Fatalf("defaults = %+v", c)
	}
}

func TestParseConfigEnvAndFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "agent.yaml")
	yaml := `relay: https://from-file.example.com
token: file-token
hw: sim
model: IG-300
heartbeat: 15s
metrics-interval: 2m
port:
  - rs485-1=/dev/ttyUSB3
location: Plant 3, Line 2
vpn-interface: none
passthrough-listen: none
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FLEET_TOKEN", "env-token")
	t.Setenv("FLEET_SPOOL_MAX_AGE", "12h")
	t.Setenv("FLEET_PORT", "gpio-1=gpiochip1:3")
	c, err := ParseConfig([]string{"--config", file, "--heartbeat", "20s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// flag > env > file
	if c.Heartbeat != 20*time.Second || c.Token != "env-token" || c.SpoolMaxAge != 12*time.Hour ||
		len(c.Relays) != 1 || c.Relays[0] != "https://from-file.example.com" || c.Model != "IG-300" || c.MetricsInterval != 2*time.Minute ||
		c.Location != "Plant 3, Line 2" {
		t.Fatalf("config = %+v", c)
	}
	// The environment's --port replaces the file's (same precedence as any flag).
	if len(c.Ports) != 1 || c.Ports["gpio-1"] != "gpiochip1:3" {
		t.Fatalf("ports = %v", c.Ports)
	}
	if c.VPNInterface != "" || c.PassthroughListen != "" {
		t.Fatalf("none did not disable: vpn %q passthrough %q", c.VPNInterface, c.PassthroughListen)
	}
	os.Unsetenv("FLEET_PORT")
	c, err = ParseConfig([]string{"--config", file}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Ports) != 1 || c.Ports["rs485-1"] != "/dev/ttyUSB3" {
		t.Fatalf("ports from file = %v", c.Ports)
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--token", "t"}, "--relay is required"},
		{[]string{"--relay", "ftp://x", "--token", "t"}, "--relay"},
		{[]string{"--relay", "http://x"}, "--token is required"},
		{[]string{"--relay", "http://x", "--token", "t", "--hw", "fpga"}, "--hw"},
		{[]string{"--relay", "http://x", "--token", "t", "--model", "IG-9000"}, "--model"},
		{[]string{"--relay", "http://x", "--token", "t", "--port", "rs485-9=/dev/x"}, "rs485-9"},
		{[]string{"--relay", "http://x", "--token", "t", "--port", "rs485-1"}, "CHANNEL=DEVICE"},
		{[]string{"--relay", "http://x", "--token", "t", "--heartbeat", "10ms"}, "--heartbeat"},
		{[]string{"--relay", "http://x", "--token", "t", "--spool-max-bytes", "10"}, "--spool-max-bytes"},
		{[]string{"--relay", "http://x", "--token", "t", "extra"}, "unexpected"},
		{[]string{"--relay", "http://x", "--token", "t", "--backoff-min", "2s", "--backoff-max", "1s"}, "--backoff-min"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := ParseConfig(tc.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want mention of %q", err, tc.want)
			}
		})
	}
}

func TestReadStatus(t *testing.T) {
	p := filepath.Join(t.TempDir(), "status")
	if s, err := readStatus(p); s != "ONLINE" || err != nil {
		t.Fatalf("missing file: %s %v", s, err)
	}
	for in, want := range map[string]string{"updating\n": "UPDATING", " REBOOTING ": "REBOOTING", "error\nflash failing": "ERROR", "": "ONLINE"} {
		os.WriteFile(p, []byte(in), 0o600)
		if s, err := readStatus(p); string(s) != want || err != nil {
			t.Errorf("%q: %s %v", in, s, err)
		}
	}
	os.WriteFile(p, []byte("OFFLINE"), 0o600)
	if s, err := readStatus(p); s != "ONLINE" || err == nil {
		t.Fatalf("OFFLINE accepted: %s %v", s, err)
	}
}

func TestIdentityDefaults(t *testing.T) {
	etc := t.TempDir()
	t.Setenv("TZ", "")
	if tz := detectTimezone(etc); tz != "UTC" {
		t.Fatalf("empty etc: %q", tz)
	}
	os.Symlink("/usr/share/zoneinfo/America/Chicago", filepath.Join(etc, "localtime"))
	if tz := detectTimezone(etc); tz != "America/Chicago" {
		t.Fatalf("localtime link: %q", tz)
	}
	os.WriteFile(filepath.Join(etc, "timezone"), []byte("Europe/Berlin\n"), 0o644)
	if tz := detectTimezone(etc); tz != "Europe/Berlin" {
		t.Fatalf("/etc/timezone: %q", tz)
	}
	t.Setenv("TZ", "Asia/Tokyo")
	if tz := detectTimezone(etc); tz != "Asia/Tokyo" {
		t.Fatalf("TZ: %q", tz)
	}
	osr := filepath.Join(etc, "os-release")
	os.WriteFile(osr, []byte("NAME=\"GatewayOS\"\nVERSION_ID=\"4.2.1\"\n"), 0o644)
	if v := osReleaseVersion(osr); v != "GatewayOS 4.2.1" {
		t.Fatalf("os-release: %q", v)
	}
	os.WriteFile(osr, []byte("PRETTY_NAME=\"GatewayOS 4.2.1 (rev b)\"\nNAME=x\n"), 0o644)
	if v := osReleaseVersion(osr); v != "GatewayOS 4.2.1 (rev b)" {
		t.Fatalf("os-release: %q", v)
	}
}

func TestDefaultRouteIP(t *testing.T) {
	proc := t.TempDir()
	os.MkdirAll(filepath.Join(proc, "net"), 0o755)
	route := "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
		"lo\t0000007F\t00000000\t0001\t0\t0\t0\t000000FF\t0\t0\t0\n" +
		"lo\t00000000\t0100007F\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
	os.WriteFile(filepath.Join(proc, "net", "route"), []byte(route), 0o644)
	if ip := defaultRouteIP(proc); ip != "127.0.0.1" {
		t.Fatalf("default route via lo: %q", ip)
	}
	os.WriteFile(filepath.Join(proc, "net", "route"), []byte(strings.SplitAfter(route, "\n")[0]), 0o644)
	if ip := defaultRouteIP(proc); ip != "" {
		t.Fatalf("no default route: %q", ip)
	}
}

// The shipped example parses as it stands.
func TestExampleConfigParses(t *testing.T) {
	c, err := ParseConfig([]string{"--config", "../deploy/agent.example.yaml"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.HW != "linux" || c.Ports["rs485-1"] != "/dev/ttyUSB0" || c.VPNInterface != "wg0" || c.Location != "Plant 3, Line 2" {
		t.Fatalf("example config = %+v", c)
	}
}

// The VPN is watched by default only on a gateway with WireGuard set up for
// wg0: the interface exists, or wg-quick's /etc/wireguard/wg0.conf does.
func TestDefaultVPN(t *testing.T) {
	if _, err := net.InterfaceByName("wg0"); err == nil {
		t.Skip("this machine has a wg0 interface")
	}
	etc := t.TempDir()
	if got := defaultVPN(etc); got != "" {
		t.Errorf("without WireGuard: %q, want none", got)
	}
	os.MkdirAll(filepath.Join(etc, "wireguard"), 0o700)
	os.WriteFile(filepath.Join(etc, "wireguard", "wg0.conf"), []byte("[Interface]\n"), 0o600)
	if got := defaultVPN(etc); got != "wg0" {
		t.Errorf("with /etc/wireguard/wg0.conf: %q, want wg0", got)
	}
}

// TestParseConfigRelays: --relay repeats (and lists in the file and the
// environment) keep their order; a single --relay works as before.
func TestParseConfigRelays(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "agent.yaml")
	yaml := "relay:\n  - https://r1.example.com\n  - https://r2.example.com\ntoken: t\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		env  string
		want []string
	}{
		{"one flag", []string{"--relay", "http://a:8080", "--token", "t"}, "", []string{"http://a:8080"}},
		{"repeated flag", []string{"--relay", "http://a:8080", "--relay", "http://b:8080", "--relay", "http://c:8080", "--token", "t"}, "",
			[]string{"http://a:8080", "http://b:8080", "http://c:8080"}},
		{"file list", []string{"--config", file}, "", []string{"https://r1.example.com", "https://r2.example.com"}},
		{"flag over file", []string{"--config", file, "--relay", "http://a:8080"}, "", []string{"http://a:8080"}},
		{"environment", []string{"--token", "t"}, "http://a:8080, http://b:8080", []string{"http://a:8080", "http://b:8080"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("FLEET_RELAY", c.env)
			if c.env == "" {
				os.Unsetenv("FLEET_RELAY")
			}
			cfg, err := ParseConfig(c.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(cfg.Relays, " ") != strings.Join(c.want, " ") {
				t.Fatalf("relays %q, want %q", cfg.Relays, c.want)
			}
			if !strings.Contains(cfg.String(), "relay="+strings.Join(c.want, ",")) {
				t.Fatalf("String() = %s", cfg)
			}
		})
	}
	_, err := ParseConfig([]string{"--relay", "http://a:8080", "--relay", "ftp://b", "--token", "t"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `--relay "ftp://b"`) {
		t.Fatalf("bad second relay: %v", err)
	}
}

// TestTokenOnCommandLine: only a token given with --token on the command
// line (which ps shows) is flagged, not FLEET_TOKEN, the config file or a
// flag's value that merely reads "--token".
func TestTokenOnCommandLine(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(file, []byte("token: from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--relay", "https://relay.example.com", "--hw", "sim"}
	for _, tc := range []struct {
		name string
		args []string
		env  string
		want bool
	}{
		{"--token", []string{"--token", "tok"}, "", true},
		{"-token=", []string{"-token=tok"}, "", true},
		{"after a bool flag", []string{"--version=false", "--token", "tok"}, "", true},
		{"FLEET_TOKEN", nil, "tok", false},
		{"config file", []string{"--config", file}, "", false},
		{"a value reading --token", []string{"--name", "--token", "--token", "tok"}, "", true},
		{"only a value reading --token", []string{"--name", "--token"}, "tok", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("FLEET_TOKEN", tc.env)
			c, err := ParseConfig(append(append([]string{}, base...), tc.args...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if c.Token == "" || c.TokenOnCommandLine != tc.want {
				t.Errorf("token %q, on the command line %v; want %v", c.Token, c.TokenOnCommandLine, tc.want)
			}
		})
	}
}
