package relay

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet/fleet/test/rig/testnet"
)

// TestServeRefusesBadFlags: a flag value the relay cannot run with stops
// serve before anything opens: exit 2, the flag named on stderr, no
// database file made, nothing listening on --listen.
func TestServeRefusesBadFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		env  string // NAME=value, or ""
		flag string // named in the error
	}{
		{args: []string{"--rate-limit", "0"}, flag: "rate-limit"},
		{args: []string{"--rate-limit", "ten"}, flag: "rate-limit"},
		{args: []string{"--retention", "30m"}, flag: "retention"},
		{args: []string{"--retention-interval", "10ms"}, flag: "retention-interval"},
		{args: []string{"--point-retention", "30m"}, flag: "point-retention"},
		{args: []string{"--shutdown-timeout", "0s"}, flag: "shutdown-timeout"},
		{args: []string{"--drain-delay", "-1s"}, flag: "drain-delay"},
		{args: []string{"--listen", "8080"}, flag: "listen"},
		{args: []string{"--metrics-listen", "everywhere"}, flag: "metrics-listen"},
		{args: []string{"--log-level", "loud"}, flag: "log-level"},
		{args: []string{"--trusted-proxies", "haproxy"}, flag: "trusted-proxies"},
		{args: []string{"--redis", "mysql://cache:6379"}, flag: "redis"},
		{args: []string{"--tls-cert", "relay.pem"}, flag: "tls-key"},
		{args: []string{"--tls-cert", filepath.Join(dir, "no.pem"), "--tls-key", filepath.Join(dir, "no.key")}, flag: "tls-cert"},
		{args: []string{"--agent-orphan-window", "-5s"}, flag: "agent-orphan-window"},
		{args: []string{"--agent-default-heartbeat", "2h"}, flag: "agent-default-heartbeat"},
		{args: []string{"--webhook-backoff", "1s,soon"}, flag: "webhook-backoff"},
		{args: []string{"--webhook-timeout", "0s"}, flag: "webhook-timeout"},
		{args: []string{"--webhook-timeout", "10m"}, flag: "webhook-timeout"},
		{args: []string{"--webhook-concurrency", "0"}, flag: "webhook-concurrency"},
		{args: []string{"--webhook-queue-limit", "1"}, flag: "webhook-queue-limit"},
		{args: []string{"--webhook-lease", "500ms"}, flag: "webhook-lease"},
		{args: []string{"--webhook-retention", "10m"}, flag: "webhook-retention"},
		{args: []string{"--webhook-ca", filepath.Join(dir, "no-ca.pem")}, flag: "webhook-ca"},
		{args: []string{"--panel-idle-timeout", "30s"}, flag: "panel-idle-timeout"},
		{args: []string{"--panel-session-lifetime", "10m"}, flag: "panel-session-lifetime"},
		{args: []string{"--panel-signin-failures", "0"}, flag: "panel-signin-failures"},
		{args: []string{"--panel-signin-failures-per-address", "0"}, flag: "panel-signin-failures-per-address"},
		{args: []string{"--smtp-url", "http://mail.example.com"}, flag: "smtp-url"},
		{args: []string{"--smtp-url", "smtp+insecure://mail.example.com:25"}, flag: "smtp-url"},
		{args: []string{"--smtp-url", "smtp://fleet:s3cret@mail.example.com"}, flag: "smtp-url"},
		{args: []string{"--smtp-url", "smtp://mail.example.com", "--smtp-from", "Fleet <fleet@example.com>"}, flag: "smtp-from"},
		{args: []string{"--smtp-url", "smtp://mail.example.com", "--public-url", "http://[::1]:8080"}, flag: "smtp-from"},
		{args: []string{"--public-url", "fleet.example.com"}, flag: "public-url"},
		{args: []string{"--device-ingest-limit", "-1"}, flag: "device-ingest-limit"},
		{args: []string{"--device-ingest-bytes", "-1"}, flag: "device-ingest-bytes"},
		{args: []string{"--public-url", "ftp://fleet.example.com"}, flag: "public-url"},
		{args: []string{"--public-url", "https://fleet.example.com/?x=1"}, flag: "public-url"},
		{args: []string{"--public-url", "https://fleet.example.com/#top"}, flag: "public-url"},
		{args: []string{"--public-url", "/panel"}, flag: "public-url"},
		{env: "FLEET_SMTP_URL=smtps://mail.example.com:x", flag: "smtp-url"},
		{env: "FLEET_WEBHOOK_TIMEOUT=0s", flag: "webhook-timeout"},
		{env: "FLEET_RETENTION=1m", flag: "retention"},
		{env: "FLEET_POINT_RETENTION=1m", flag: "point-retention"},
		{args: []string{"--memory-limit", "lots"}, flag: "memory-limit"},
		{env: "FLEET_MEMORY_LIMIT=12KiB", flag: "memory-limit"},
	} {
		name := strings.Join(tc.args, " ") + tc.env
		t.Run(name, func(t *testing.T) {
			if k, v, ok := strings.Cut(tc.env, "="); ok {
				t.Setenv(k, v)
			}
			db := filepath.Join(t.TempDir(), "relay.db")
			addr := testnet.FreeAddr(t)
			args := append([]string{"serve", "--db", db, "--listen", addr, "--metrics-listen", "none"}, tc.args...)
			_, errOut, code := cli(t, args...)
			if code != 2 || !strings.Contains(errOut, "-"+tc.flag) {
				t.Errorf("exit %d, stderr %q; want exit 2 naming -%s", code, errOut, tc.flag)
			}
			if _, err := os.Stat(db); err == nil {
				t.Errorf("the database was made")
			}
			if c, err := net.Dial("tcp", addr); err == nil {
				c.Close()
				t.Errorf("something listens on --listen %s", addr)
			}
		})
	}
}

// TestServeRefusesBadDBWithoutEchoingIt: a malformed PostgreSQL URL is
// refused when parsed, and its password is not shown.
func TestServeRefusesBadDBWithoutEchoingIt(t *testing.T) {
	_, errOut, code := cli(t, "serve", "--db", "postgres://fleet:s3cret-pw@db:port/fleet", "--listen", "127.0.0.1:0")
	if code != 2 || !strings.Contains(errOut, "--db") || strings.Contains(errOut, "s3cret-pw") {
		t.Errorf("exit %d, stderr %q; want exit 2 naming --db without the password", code, errOut)
	}
}
