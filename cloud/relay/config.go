package relay

import (
	"cmp"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/mail"
	"net/url"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/api"
	"github.com/fleet/fleet/cloud/internal/clientaddr"
	"github.com/fleet/fleet/cloud/notify"
	"github.com/fleet/fleet/cloud/redis"
	"github.com/fleet/fleet/cloud/relaygc"
)

// Config is the configuration of `fleet-relay serve`: a field per flag
// (each flag also reads its FLEET_ variable), grouped by the part of the
// relay that uses it. ParseFlags checks it before anything opens.
type Config struct {
	DB        string
	Listen    string
	RateLimit int
	Retention time.Duration
	// RetentionInterval is how often the retention sweep runs.
	RetentionInterval time.Duration
	// PointRetention is how long point history is kept.
	PointRetention time.Duration
	// AuditRetention is how long audit records are kept (docs/audit.md).
	AuditRetention  time.Duration
	TLSCert, TLSKey string
	// ShutdownTimeout bounds the wait for in-flight requests on Close.
	ShutdownTimeout time.Duration
	// DrainDelay is how long Close keeps serving with /readyz at 503
	// before it tells agents to reconnect and stops accepting, so that a
	// load balancer's health checks see the relay leave first.
	DrainDelay time.Duration
	LogLevel   string
	// TrustedProxies lists the reverse proxies and load balancers (IP
	// addresses and CIDR ranges, comma-separated) whose X-Forwarded-For
	// names the client (cloud/internal/clientaddr); empty: none.
	TrustedProxies string

	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration

	// MetricsListen is where the Prometheus metrics are served: host:port,
	// "api" or "none" (serve_metrics.go).
	MetricsListen string
	// Redis is the URL of a Redis that shares the API's rate-limit
	// counters between relays; "" counts alone (serve_redis.go).
	Redis string
	// MemoryLimit and GCPercent set the garbage collector (cloud/relaygc):
	// the soft memory limit (auto, off or a size) and GOGC (0: the
	// default, negative: off).
	MemoryLimit string
	GCPercent   int

	Agent   AgentConfig   // the agents' endpoint (serve_agentlink.go)
	Webhook WebhookConfig // the webhook sender (serve_webhook.go)
	Notify  NotifyConfig  // e-mail and chat notifications, links to the panel
	Panel   PanelConfig   // the web panel (serve_panel.go)
}

// DefaultConfig returns serve's configuration when no flag is given.
func DefaultConfig() Config {
	return Config{
		DB: "fleet.db", Listen: "127.0.0.1:8080", RateLimit: api.DefaultRateLimit,
		Retention: cloud.DefaultRetention, RetentionInterval: time.Hour, PointRetention: cloud.DefaultPointRetention,
		AuditRetention: cloud.DefaultAuditRetention, ShutdownTimeout: 30 * time.Second,
		LogLevel:          "info",
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second,
		MetricsListen: DefaultMetricsListen, MemoryLimit: relaygc.Auto,
		Agent:   AgentConfig{OrphanWindow: agentlink.DefaultOrphanWindow, DefaultHeartbeat: agentlink.DefaultHeartbeatInterval, Quota: agentlink.DefaultQuota},
		Webhook: defaultWebhookConfig(),
		Panel:   defaultPanelConfig(),
	}
}

// flags registers serve's flags on fs, each defaulting to c's value.
func (c *Config) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.DB, "db", c.DB, "SQLite database file (created if missing), or a postgres:// URL (FLEET_DB keeps a password out of ps)")
	fs.StringVar(&c.Listen, "listen", c.Listen, "address to listen on (host:port; port 0 picks one)")
	fs.IntVar(&c.RateLimit, "rate-limit", c.RateLimit, "requests per minute per API key (and per client address before authentication)")
	fs.DurationVar(&c.Retention, "retention", c.Retention, "how long metrics and events are kept")
	fs.DurationVar(&c.RetentionInterval, "retention-interval", c.RetentionInterval, "how often the retention sweep runs")
	fs.DurationVar(&c.PointRetention, "point-retention", c.PointRetention, "how long point history (the samples of devices' points) is kept")
	fs.Var((*dayDuration)(&c.AuditRetention), "audit-retention", "how long audit log records are kept, a `duration` in days (365d) or hours (36h); at least 1d")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "TLS certificate file (PEM); serve HTTPS when set with --tls-key")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "TLS private key file (PEM)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "how long shutdown waits for in-flight requests")
	fs.DurationVar(&c.DrainDelay, "drain-delay", c.DrainDelay, "on SIGTERM, how long /readyz answers 503 before agents are told to reconnect and the listener closes (longer than the load balancer takes to notice; 0 without one)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: debug, info, warn, error")
	fs.StringVar(&c.TrustedProxies, "trusted-proxies", c.TrustedProxies, "reverse proxies and load balancers in front of the relay (IP addresses and CIDR ranges, comma-separated): a request from one is the client's that its X-Forwarded-For names, for rate limits, sign-in throttles and logs; empty: every peer is the client")
	fs.StringVar(&c.MetricsListen, "metrics-listen", c.MetricsListen, "where /metrics (Prometheus, plain HTTP, no key) is served: host:port (port 0 picks one), api (on the relay's listener, public with the API), or none")
	fs.StringVar(&c.Redis, "redis", c.Redis, "redis://[:password@]host:port[/db] (or rediss://) sharing the API rate-limit counters between relays; empty: each relay counts alone (keep a password in FLEET_REDIS, not on the command line)")
	fs.StringVar(&c.MemoryLimit, "memory-limit", c.MemoryLimit, fmt.Sprintf("the Go runtime's soft memory limit: a size (1500MiB, 2GiB), off, or auto: %.0f %% of the cgroup's memory limit, else of the machine's memory (GOMEMLIMIT in the environment wins over auto)", 100*relaygc.AutoLimitFraction))
	fs.IntVar(&c.GCPercent, "gc-percent", c.GCPercent, fmt.Sprintf("the Go runtime's GOGC: the heap grows this many percent over the live heap before a collection; 0: %d (GOGC in the environment wins over 0); negative: off, collections only near --memory-limit", relaygc.DefaultGCPercent))
	c.Agent.flags(fs)
	c.Webhook.flags(fs)
	c.Notify.flags(fs)
	c.Panel.flags(fs)
}

// check is one rule of a Config: when bad, the configuration is refused
// with msg, which names the flag.
type check struct {
	bad bool
	msg string
}

// firstBad returns a usage error for the first bad check, or nil.
func firstBad(checks ...check) error {
	for _, c := range checks {
		if c.bad {
			return fmt.Errorf("%w: %s", ErrUsage, c.msg)
		}
	}
	return nil
}

// validate returns a usage error naming the first flag whose value the
// relay cannot run with. It reads no file and opens nothing.
func (c *Config) validate() error {
	err := firstBad(
		check{c.DB == "", "--db must not be empty"},
		check{c.RateLimit < 1, "--rate-limit must be at least 1"},
		check{c.Retention < time.Hour, "--retention must be at least 1h"},
		check{c.RetentionInterval < time.Second, "--retention-interval must be at least 1s"},
		check{c.PointRetention < time.Hour, "--point-retention must be at least 1h"},
		check{c.AuditRetention < minAuditRetention, "--audit-retention must be at least 1d"},
		check{c.ShutdownTimeout <= 0, "--shutdown-timeout must be positive"},
		check{c.DrainDelay < 0, "--drain-delay must not be negative"},
		check{(c.TLSCert == "") != (c.TLSKey == ""), "--tls-cert and --tls-key go together"},
		check{isPostgresURL(c.DB) && !validURL(c.DB), "--db: not a valid postgres:// URL"},
		check{!validAddr(c.Listen), fmt.Sprintf("--listen %q: want host:port", c.Listen)},
		check{c.MetricsListen != "api" && c.MetricsListen != "none" && c.MetricsListen != "" && !validAddr(c.MetricsListen),
			fmt.Sprintf("--metrics-listen %q: want host:port, api or none", c.MetricsListen)},
	)
	if err != nil {
		return err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return fmt.Errorf("%w: --log-level: %v", ErrUsage, err)
	}
	if _, err := clientaddr.Parse(c.TrustedProxies); err != nil {
		return fmt.Errorf("%w: --trusted-proxies: %v", ErrUsage, err)
	}
	if c.Redis != "" {
		if err := redis.CheckURL(c.Redis); err != nil {
			return fmt.Errorf("%w: --redis: %v", ErrUsage, err)
		}
	}
	if err := relaygc.CheckLimit(c.MemoryLimit); err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	return cmp.Or(c.Agent.validate(), c.Webhook.validate(), c.Notify.validate(c.Listen, c.TLSCert != ""), c.Panel.validate())
}

// NotifyConfig is the notifications' part of Config: the SMTP server of
// e-mail channels and the relay's public URL, which messages link to.
type NotifyConfig struct {
	// SMTPURL is smtp://user:pass@host:587 (STARTTLS required),
	// smtps://user:pass@host:465 or smtp+insecure://127.0.0.1:25; ""
	// sends no e-mail. Its password comes from FLEET_SMTP_URL only.
	SMTPURL string
	// SMTPFrom is the sender address; "" is fleet@<host of PublicURL>.
	SMTPFrom string
	// PublicURL is where people reach the relay (links in messages; issue
	// 30's cookies and HSTS); "" is http(s)://<listen address>.
	PublicURL string
	// SMTPRootCAs, when set, verifies the SMTP server's certificate
	// instead of the system's pool (tests trust their own CA here).
	SMTPRootCAs *x509.CertPool

	smtp notify.SMTPServer // SMTPURL parsed by validate
}

func (c *NotifyConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.SMTPURL, "smtp-url", c.SMTPURL, "SMTP server of e-mail notifications: smtp://user@host:587 (STARTTLS required), smtps://user@host:465 (TLS), smtp+insecure://127.0.0.1:25 (loopback only); the password only in FLEET_SMTP_URL (the command line shows in ps); empty: no e-mail")
	fs.StringVar(&c.SMTPFrom, "smtp-from", c.SMTPFrom, "sender address of e-mail notifications (default fleet@<host of --public-url>)")
	fs.StringVar(&c.PublicURL, "public-url", c.PublicURL, "URL where people reach this relay (absolute http(s), no query or fragment): notifications link there; https marks the panel cookie Secure and sends Strict-Transport-Security, also behind a proxy that ends TLS (default http://<listen address>, https with --tls-cert)")
}

// validate checks the flags and fills the defaults of PublicURL and
// SMTPFrom; listen is --listen, tls whether --tls-cert is set.
func (c *NotifyConfig) validate(listen string, tls bool) error {
	if c.PublicURL == "" {
		c.PublicURL = "http://" + listen
		if tls {
			c.PublicURL = "https://" + listen
		}
	} else if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%w: --public-url %q: want an absolute http(s)://host[:port][/path] without query or fragment", ErrUsage, c.PublicURL)
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	if c.SMTPURL == "" {
		return nil
	}
	var err error
	if c.smtp, err = notify.ParseSMTPURL(c.SMTPURL); err != nil {
		return fmt.Errorf("%w: --smtp-url: %v", ErrUsage, err)
	}
	explicit := c.SMTPFrom != ""
	if !explicit {
		u, _ := url.Parse(c.PublicURL)
		c.SMTPFrom = "fleet@" + u.Hostname()
	}
	if a, err := mail.ParseAddress(c.SMTPFrom); err != nil || a.Name != "" || a.Address != c.SMTPFrom {
		if !explicit {
			return fmt.Errorf("%w: --smtp-from is required: the host of --public-url makes no address (%q)", ErrUsage, c.SMTPFrom)
		}
		return fmt.Errorf("%w: --smtp-from %q: want a plain address such as fleet@example.com", ErrUsage, c.SMTPFrom)
	}
	return nil
}

// refuseArgvPassword refuses an --smtp-url with a password on the command
// line (args parsed into fs, which defines every flag of the command and
// smtpURL's), which every user of the machine sees in ps.
func refuseArgvPassword(args []string, fs *flag.FlagSet, smtpURL *string) error {
	fs.SetOutput(io.Discard)
	if fs.Parse(args) != nil || *smtpURL == "" {
		return nil // parseFlags reports a bad command line
	}
	u, err := url.Parse(*smtpURL)
	if err != nil {
		return nil // validate refuses it without echoing it
	}
	if _, has := u.User.Password(); has {
		return fmt.Errorf("%w: --smtp-url: a password on the command line is visible in ps: set FLEET_SMTP_URL instead", ErrUsage)
	}
	return nil
}

// sender returns the SMTP sender of e-mail deliveries (nil without
// --smtp-url); timeout bounds its dial and each command.
func (c *NotifyConfig) sender(timeout time.Duration) (*notify.SMTP, error) {
	if c.SMTPURL == "" {
		return nil, nil
	}
	return notify.NewSMTP(notify.SMTPConfig{Server: c.smtp, From: c.SMTPFrom, RootCAs: c.SMTPRootCAs, Timeout: timeout})
}

// validAddr reports whether addr is host:port with a numeric port.
func validAddr(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	_, err = net.LookupPort("tcp", port)
	return err == nil
}

// validURL reports whether s parses as a URL. The parse error itself is
// not shown: it would echo a password.
func validURL(s string) bool {
	_, err := url.Parse(s)
	return err == nil
}
