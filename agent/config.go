package agent

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3"
	"github.com/peterbourgon/ff/v3/ffyaml"

	"github.com/fleet/fleet/hw/catalog"
)

// EnvPrefix prefixes the environment variable of every flag:
// --spool-max-bytes is FLEET_SPOOL_MAX_BYTES.
const EnvPrefix = "FLEET"

// Config is the agent's configuration, from flags, FLEET_ environment
// variables and a YAML file (in that order of precedence).
type Config struct {
	// Relays are the relays' base URLs, tried in turn (--relay repeated):
	// the agent moves to the next one when its relay fails or drains.
	Relays []string
	// Token is the device token (--token, FLEET_TOKEN or the config file;
	// never on the command line in production: `ps` shows it). Empty when
	// the agent holds one in StateDir/device-token (a claimed gateway) or
	// claims one with Claim.
	Token string
	// TokenOnCommandLine is set when Token came from --token on the
	// command line, which every user of the gateway sees in ps: the agent
	// warns at start (TokenWarning).
	TokenOnCommandLine bool
	// Claim is a claim token (fleet_ct_...) the agent redeems once, with
	// Serial, for its device token when it has none (issue 28).
	Claim  string
	Serial string
	// UpdateKey is the minisign public key file that every agent update
	// must be signed by ("" refuses every update).
	UpdateKey string
	// HW is the hardware backend: "sim" or "linux".
	HW    string
	Model string
	// Ports overrides channel devices (channel id -> device).
	Ports map[string]string

	StateDir string
	// StatusFile holds the status the agent reports (default
	// StateDir/status); see docs/agent.md.
	StatusFile string

	Heartbeat       time.Duration
	MetricsInterval time.Duration
	SpoolMaxBytes   int64
	SpoolMaxAge     time.Duration

	ProcRoot string
	SysRoot  string
	DiskPath string
	// DevRoot is watched for USB serial adapters ("" disables).
	DevRoot string
	// RecheckInterval is how often missing channel devices are looked for.
	RecheckInterval time.Duration
	// BackoffMin and BackoffMax bound the reconnect delay.
	BackoffMin, BackoffMax time.Duration

	// VPNInterface is the WireGuard interface to watch ("" disables).
	VPNInterface string
	// PassthroughListen is HOST:BASEPORT for raw channel access ("" disables).
	PassthroughListen string
	// MetricsListen is the address of the agent's own Prometheus metrics
	// ("" disables; meant for localhost or the VPN address).
	MetricsListen string

	Name            string
	Location        string
	Timezone        string
	FirmwareVersion string
	// OSRelease is read for the firmware version when FirmwareVersion is "".
	OSRelease string

	LogLevel  string
	LogFormat string
}

// portFlag collects repeated --port CHANNEL=DEVICE (a comma-separated list is
// accepted too, for the environment variable).
type portFlag map[string]string

func (p portFlag) String() string {
	var out []string
	for k, v := range p {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func (p portFlag) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		ch, dev, ok := strings.Cut(part, "=")
		if !ok || ch == "" || dev == "" {
			return fmt.Errorf("want CHANNEL=DEVICE, got %q", part)
		}
		p[ch] = dev
	}
	return nil
}

// VPNAuto as Config.VPNInterface watches wg0 when the gateway has WireGuard
// set up for it (the interface exists, or /etc/wireguard/wg0.conf does) and
// nothing otherwise, so that a gateway without WireGuard raises no
// alert.vpn_down. It is --vpn-interface's default with --hw linux.
const VPNAuto = "auto"

// relayFlag collects repeated --relay URL (a comma-separated list is
// accepted too, for the environment variable; in the YAML file, a list).
type relayFlag []string

func (r *relayFlag) String() string { return strings.Join(*r, ",") }

func (r *relayFlag) Set(s string) error {
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			*r = append(*r, u)
		}
	}
	return nil
}

// ErrVersion is ParseConfig's answer to --version: print Version and exit.
var ErrVersion = errors.New("--version")

// ParseConfig parses the command line (without the program name), the
// FLEET_ environment and the --config YAML file. Usage goes to out.
func ParseConfig(args []string, out io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("fleet-agent", flag.ContinueOnError)
	fs.SetOutput(out)
	ports := portFlag{}
	var vpn, pt string
	fs.Var((*relayFlag)(&c.Relays), "relay", "relay base URL, e.g. https://relay.example.com (required; repeat it for the relays of a cluster: the agent moves to the next one when its relay fails)")
	fs.StringVar(&c.Token, "token", "", "device token printed by fleet-relay device add (required unless --claim or a token kept in --state-dir; never logged)")
	fs.StringVar(&c.Claim, "claim", "", "claim token (fleet_ct_...) to register this gateway with, once, when it has no device token; kept nowhere after (never logged)")
	fs.StringVar(&c.Serial, "serial", "", "this gateway's serial number, registered with --claim; file:PATH reads it from a file (e.g. file:/sys/class/dmi/id/product_serial)")
	fs.StringVar(&c.UpdateKey, "update-key", "", "minisign public key file that agent updates must be signed by (none: updates are refused)")
	fs.StringVar(&c.HW, "hw", "linux", "hardware backend: linux or sim")
	fs.StringVar(&c.Model, "model", "IG-500", "gateway model ("+strings.Join(catalog.Names(), ", ")+")")
	fs.Var(ports, "port", "bind a channel to an OS device, CHANNEL=DEVICE (repeatable), e.g. rs485-1=/dev/ttyUSB0")
	fs.StringVar(&c.StateDir, "state-dir", "/var/lib/fleet-agent", "directory for the spool and state")
	fs.StringVar(&c.StatusFile, "status-file", "", "file holding the reported status (ONLINE, REBOOTING, UPDATING, ERROR); default STATE_DIR/status")
	fs.DurationVar(&c.Heartbeat, "heartbeat", 30*time.Second, "heartbeat interval")
	fs.DurationVar(&c.MetricsInterval, "metrics-interval", 5*time.Minute, "metrics sample interval")
	fs.Int64Var(&c.SpoolMaxBytes, "spool-max-bytes", 64<<20, "spool size bound in bytes; the oldest records go first")
	fs.DurationVar(&c.SpoolMaxAge, "spool-max-age", 7*24*time.Hour, "spool age bound; older records are dropped")
	fs.StringVar(&c.ProcRoot, "proc-root", "/proc", "procfs mount read for metrics")
	fs.StringVar(&c.SysRoot, "sys-root", "/sys", "sysfs mount read for metrics")
	fs.StringVar(&c.DiskPath, "disk-path", "/", "path whose filesystem diskUsedPct measures")
	fs.StringVar(&c.DevRoot, "dev-root", "/dev", "directory watched for USB serial adapters (ttyUSB*, ttyACM*); none disables")
	fs.DurationVar(&c.RecheckInterval, "recheck-interval", 5*time.Second, "how often missing channel devices are looked for")
	fs.DurationVar(&c.BackoffMin, "backoff-min", time.Second, "first reconnect delay bound; doubles per failed attempt (full jitter)")
	fs.DurationVar(&c.BackoffMax, "backoff-max", 60*time.Second, "reconnect delay cap")
	fs.StringVar(&vpn, "vpn-interface", "", "WireGuard interface to watch (default with --hw linux: wg0 when it exists or /etc/wireguard/wg0.conf does, else none; none with --hw sim; none disables)")
	fs.StringVar(&pt, "passthrough-listen", ":4001", "HOST:BASEPORT for raw channel access in passthrough mode; empty HOST is the VPN address; none disables")
	fs.StringVar(&c.MetricsListen, "metrics-listen", "", "HOST:PORT serving the agent's own Prometheus metrics at /metrics, plain HTTP, on a local address (127.0.0.1 or the VPN address; an empty host, 0.0.0.0 or :: is refused); empty disables")
	fs.StringVar(&c.Name, "name", "", "device name reported to the relay (default: host name)")
	fs.StringVar(&c.Location, "location", "", "device location reported to the relay")
	fs.StringVar(&c.Timezone, "timezone", "", "IANA time zone reported (default: $TZ, /etc/timezone, /etc/localtime, UTC)")
	fs.StringVar(&c.FirmwareVersion, "firmware-version", "", "firmware version reported (default: from --os-release)")
	fs.StringVar(&c.OSRelease, "os-release", "/etc/os-release", "os-release file giving the firmware version")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: text or json")
	fs.String("config", "", "YAML config file (keys are flag names)")
	version := fs.Bool("version", false, "print the agent's version (what it reports to the relay) and exit")
	err := ff.Parse(fs, args,
		ff.WithEnvVarPrefix(EnvPrefix),
		ff.WithConfigFileFlag("config"),
		ff.WithConfigFileParser(ffyaml.Parser),
	)
	if err != nil {
		return c, err
	}
	if *version {
		return c, ErrVersion
	}
	c.TokenOnCommandLine = givenOnCommandLine(fs, args, "token")
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	c.Ports = ports
	switch vpn {
	case "":
		if c.HW == "linux" {
			c.VPNInterface = VPNAuto
		}
	case "none":
	default:
		c.VPNInterface = vpn
	}
	if pt != "none" {
		c.PassthroughListen = pt
	}
	if c.DevRoot == "none" {
		c.DevRoot = ""
	}
	if c.StatusFile == "" {
		c.StatusFile = filepath.Join(c.StateDir, "status")
	}
	return c, c.Validate()
}

// Validate checks the configuration, naming the offending flag.
func (c Config) Validate() error {
	var errs []error
	if len(c.Relays) == 0 {
		errs = append(errs, errors.New("--relay is required"))
	}
	for _, r := range c.Relays {
		if u, err := url.Parse(r); err != nil || u.Host == "" ||
			(u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "ws" && u.Scheme != "wss") {
			errs = append(errs, fmt.Errorf("--relay %q: want an http(s) or ws(s) URL", r))
		}
	}
	if c.Token == "" && c.Claim == "" && !HasStoredToken(c.StateDir) {
		errs = append(errs, errors.New("--token is required (or --claim with --serial, or a device token kept in --state-dir)"))
	}
	if c.Claim != "" && c.Serial == "" {
		errs = append(errs, errors.New("--claim needs --serial"))
	}
	if c.HW != "sim" && c.HW != "linux" {
		errs = append(errs, fmt.Errorf("--hw %q: want linux or sim", c.HW))
	}
	m, ok := catalog.Lookup(c.Model)
	if !ok {
		errs = append(errs, fmt.Errorf("--model %q: unknown (known: %s)", c.Model, strings.Join(catalog.Names(), ", ")))
	} else {
		for ch := range c.Ports {
			if _, ok := m.Channel(ch); !ok {
				errs = append(errs, fmt.Errorf("--port %s: model %s has no channel %q", ch, c.Model, ch))
			}
		}
	}
	if c.StateDir == "" {
		errs = append(errs, errors.New("--state-dir is required"))
	}
	if c.Heartbeat < time.Second {
		errs = append(errs, fmt.Errorf("--heartbeat %v: at least 1s", c.Heartbeat))
	}
	if c.MetricsInterval < time.Second {
		errs = append(errs, fmt.Errorf("--metrics-interval %v: at least 1s", c.MetricsInterval))
	}
	if c.SpoolMaxBytes < 64<<10 {
		errs = append(errs, fmt.Errorf("--spool-max-bytes %d: at least 65536", c.SpoolMaxBytes))
	}
	if c.SpoolMaxAge < time.Minute {
		errs = append(errs, fmt.Errorf("--spool-max-age %v: at least 1m", c.SpoolMaxAge))
	}
	if c.RecheckInterval <= 0 {
		errs = append(errs, fmt.Errorf("--recheck-interval %v: must be positive", c.RecheckInterval))
	}
	if c.MetricsListen != "" {
		// The metrics are plain HTTP without authentication: an empty host or
		// an unspecified address (0.0.0.0, ::) would serve them on every
		// interface, the public ones included.
		if host, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			errs = append(errs, fmt.Errorf("--metrics-listen %q: want HOST:PORT", c.MetricsListen))
		} else if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			errs = append(errs, fmt.Errorf("--metrics-listen %q: listens on every interface; name a local address such as 127.0.0.1:9465 or the VPN address", c.MetricsListen))
		}
	}
	if c.BackoffMin <= 0 || c.BackoffMax < c.BackoffMin {
		errs = append(errs, fmt.Errorf("--backoff-min %v / --backoff-max %v: want 0 < min <= max", c.BackoffMin, c.BackoffMax))
	}
	return errors.Join(errs...)
}

// TokenWarning is what the agent logs at start when the device token came
// from --token (Config.TokenOnCommandLine).
const TokenWarning = "the device token was given with --token, which every user of this gateway sees in ps: set FLEET_TOKEN, the config file's token key, or keep it in the state directory's " + DeviceTokenFile + " file instead"

// givenOnCommandLine reports whether args (as fs parses them) set the flag
// name: the flags before the first non-flag argument or "--", a
// non-boolean flag's value being the next argument unless after "=".
func givenOnCommandLine(fs *flag.FlagSet, args []string, name string) bool {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			return false
		}
		n, _, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		if n == name {
			return true
		}
		f := fs.Lookup(n)
		if f == nil || hasValue {
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
			i++ // the flag's value
		}
	}
	return false
}

// String describes the configuration for the startup log line, without the
// token.
func (c Config) String() string {
	return fmt.Sprintf("relay=%s hw=%s model=%s state-dir=%s heartbeat=%v metrics-interval=%v ports=%s vpn=%q passthrough=%q metrics-listen=%q",
		strings.Join(c.Relays, ","), c.HW, c.Model, c.StateDir, c.Heartbeat, c.MetricsInterval, portFlag(c.Ports), c.VPNInterface, c.PassthroughListen, c.MetricsListen)
}

// DeviceTokenFile is the file in the state directory holding the device
// token a claim gave (mode 0600; claim.go).
const DeviceTokenFile = "device-token"
