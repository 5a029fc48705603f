package relay

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"time"

	"github.com/fleet/fleet/cloud/webhook"
)

// WebhookConfig is the webhook sender's part of Config.
type WebhookConfig struct {
	Backoff      []time.Duration // waits between attempts (--webhook-backoff)
	Timeout      time.Duration   // one attempt's time limit
	AllowPrivate bool            // deliveries may reach private addresses
	CAFile       string          // extra CA certificates (PEM)
	Concurrency  int             // concurrent attempts per endpoint
	Retention    time.Duration   // how long ended deliveries are kept
	Lease        time.Duration   // how long a relay holds the deliveries it sends
	QueueLimit   int             // deliveries held per device and kind
}

func defaultWebhookConfig() WebhookConfig {
	return WebhookConfig{Backoff: webhook.DefaultBackoff(), Timeout: webhook.DefaultTimeout, Concurrency: webhook.DefaultPerEndpoint,
		Retention: webhook.DefaultRetention, Lease: webhook.MaxLease, QueueLimit: webhook.DefaultMaxQueue}
}

func (c *WebhookConfig) flags(fs *flag.FlagSet) {
	fs.Func("webhook-backoff", "webhook retry schedule: 1 to 5 waits, each ±20% jitter (default "+webhook.DefaultBackoffFlag+")", func(s string) error {
		b, err := webhook.ParseBackoff(s)
		if err != nil {
			return err
		}
		c.Backoff = b
		return nil
	})
	fs.DurationVar(&c.Timeout, "webhook-timeout", c.Timeout, "time limit of one webhook attempt (connect, TLS, request, response)")
	fs.BoolVar(&c.AllowPrivate, "webhook-allow-private", c.AllowPrivate, "allow webhooks to loopback, private, link-local, CGNAT and metadata addresses")
	fs.StringVar(&c.CAFile, "webhook-ca", c.CAFile, "PEM file of extra CA certificates trusted for webhook receivers")
	fs.IntVar(&c.Concurrency, "webhook-concurrency", c.Concurrency, "concurrent webhook attempts per endpoint (URL host)")
	fs.DurationVar(&c.Retention, "webhook-retention", c.Retention, "how long ended webhook deliveries (and their attempts) are kept")
	fs.DurationVar(&c.Lease, "webhook-lease", c.Lease, "on a store shared by several relays (PostgreSQL): how long a relay holds the deliveries it sends before another may take them (1s to 30s; renewed while it runs)")
	fs.IntVar(&c.QueueLimit, "webhook-queue-limit", c.QueueLimit, "deliveries held per device and kind behind a failing endpoint; beyond it the oldest waiting are dropped")
}

func (c *WebhookConfig) validate() error {
	return firstBad(
		check{c.Timeout <= 0 || c.Timeout > 5*time.Minute, "--webhook-timeout must be in (0, 5m]"},
		check{c.Concurrency < 1 || c.Concurrency > 1024, "--webhook-concurrency must be 1..1024"},
		check{c.QueueLimit < 2 || c.QueueLimit > 1000000, "--webhook-queue-limit must be 2..1000000"},
		check{c.Lease < time.Second || c.Lease > webhook.MaxLease, fmt.Sprintf("--webhook-lease must be 1s to %s", webhook.MaxLease)},
		check{c.Retention < time.Hour, "--webhook-retention must be at least 1h"},
	)
}

// client returns the HTTP client of the webhook sender: --webhook-ca read,
// private addresses refused unless --webhook-allow-private.
func (c *WebhookConfig) client() (*http.Client, error) {
	return webhook.NewClient(webhook.ClientConfig{AllowPrivate: c.AllowPrivate, CAFile: c.CAFile, MaxConnsPerHost: c.Concurrency})
}

// startWebhooks runs the webhook sender: the dispatcher that sends the
// outbox's deliveries (signed, retried, in order per device) and the
// notifier that turns alert changes (Main.AlertObservers) and changed
// signals (the agent endpoint) into deliveries. It starts before the alert
// engine and the agent endpoint, so that it stops after them: no alert or
// report reaches a closed dispatcher.
func (m *Main) startWebhooks(ctx context.Context, _ *http.ServeMux) (func(context.Context) error, error) {
	c := m.Config.Webhook
	hc, err := c.client()
	if err != nil {
		return nil, err
	}
	log := m.Logger.With("component", "webhook")
	n := m.Config.Notify
	mail, err := n.sender(c.Timeout)
	if err != nil {
		return nil, fmt.Errorf("smtp: %w", err)
	}
	disp, err := webhook.New(webhook.Config{Store: m.DB.Outbox, Client: hc, Backoff: c.Backoff, Timeout: c.Timeout, Mail: mail, PublicURL: n.PublicURL,
		PerEndpoint: c.Concurrency, MaxQueue: c.QueueLimit, Retention: c.Retention, Lease: c.Lease, PollInterval: min(time.Second, c.Lease/3),
		Logger: log, Now: m.DB.Now, Observer: m.Metrics.Webhooks()})
	if err != nil {
		return nil, err
	}
	if err := m.Metrics.WatchWebhooks(disp); err != nil {
		return nil, fmt.Errorf("webhook metrics: %w", err)
	}
	if err := disp.Start(ctx); err != nil {
		return nil, err
	}
	m.notifier = webhook.NewNotifier(disp)
	m.Cluster.Outbox = append(m.Cluster.Outbox, disp.Poke)
	// The notifier keeps each device's forwarding: changes through
	// this relay and through the others make it read it again.
	m.ConfigObservers = append(m.ConfigObservers, m.notifier)
	m.Cluster.Config = append(m.Cluster.Config, m.notifier.DesiredConfigChanged)
	m.Cluster.Resync = append(m.Cluster.Resync, func(context.Context) error { m.notifier.ForgetForwarding(); return nil })
	m.AlertObservers = append(m.AlertObservers, m.notifier)
	log.Info("webhooks started", "backoff", fmt.Sprint(c.Backoff), "timeout", c.Timeout.String(), "allow_private", c.AllowPrivate, "per_endpoint", c.Concurrency,
		"public_url", n.PublicURL)
	if mail != nil {
		log.Info("e-mail notifications through SMTP", "smtp", mail.Server().String(), "from", mail.From()) // the password hidden
	} else {
		log.Info("no e-mail notifications: --smtp-url is not set")
	}
	return disp.Shutdown, nil // attempts in flight may finish within the shutdown timeout
}
