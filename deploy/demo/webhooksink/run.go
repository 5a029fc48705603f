package webhooksink

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"
)

// SecretEnv is the environment variable that holds the signing secret (an
// environment variable rather than a flag, so it does not show in ps).
const SecretEnv = "FLEET_WEBHOOK_SECRET"

// Run is the fleet-webhook-sink program: it parses args, makes or reuses the
// certificate, listens on --listen and serves until ctx ends. It returns the
// exit code: 0 after a clean stop, 1 when it cannot start, 2 for bad usage.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fleet-webhook-sink", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:9443", "address to listen on (host:port; loopback is advised)")
	certFile := fs.String("cert", "sink-cert.pem", "certificate file (PEM); made, self-signed, when missing")
	keyFile := fs.String("key", "sink-key.pem", "private key file (PEM, mode 0600); made with the certificate")
	prefix := fs.String("prefix", "", "text that starts every printed line")
	tolerance := fs.Duration("tolerance", DefaultTolerance, "largest accepted distance between webhook-timestamp and this clock")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s=whsec_... fleet-webhook-sink [flags]\n\n", SecretEnv)
		fmt.Fprintln(stderr, "Receives Fleet's signed webhooks over HTTPS, verifies both signatures and prints one line per delivery.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fleet-webhook-sink: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	secret := getenv(SecretEnv)
	if secret == "" {
		fmt.Fprintf(stderr, "fleet-webhook-sink: set %s to the organization's webhook secret (whsec_...)\n", SecretEnv)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	host, _, err := net.SplitHostPort(*listen)
	if err != nil {
		fmt.Fprintf(stderr, "fleet-webhook-sink: --listen %q: %v\n", *listen, err)
		return 2
	}
	cert, created, err := LoadOrCreateCert(*certFile, *keyFile, hostNames(host), time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "fleet-webhook-sink: %v\n", err)
		return 1
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			fmt.Fprintf(stderr, "fleet-webhook-sink: %s is already in use (another sink or demo running?)\n", *listen)
		} else {
			fmt.Fprintf(stderr, "fleet-webhook-sink: %v\n", err)
		}
		return 1
	}
	h := NewHandler(Config{Secret: secret, Out: stdout, Prefix: *prefix, Tolerance: *tolerance, Log: log})
	srv := NewServer(h, cert, log)
	how := "reused"
	if created {
		how = "made"
	}
	fmt.Fprintf(stdout, "%slistening on https://%s/ (certificate %s, %s); verifying signatures\n", *prefix, ln.Addr(), *certFile, how)
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		fmt.Fprintf(stderr, "fleet-webhook-sink: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		fmt.Fprintf(stderr, "fleet-webhook-sink: shutdown: %v\n", err)
	}
	return 0
}

// NewServer returns an HTTPS server for h with cert, TLS 1.2 or later, and
// timeouts and limits suited to webhook requests.
func NewServer(h http.Handler, cert tls.Certificate, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// hostNames returns the listen host as a name the certificate must cover
// (none for an empty or unspecified host: the loopback names are always there).
func hostNames(host string) []string {
	host = strings.Trim(host, "[]")
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return nil
	}
	return []string{host}
}
