package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/cloud/webhook"
)

// runOrgSetAlertWebhook sets (or with --url "" clears) an organization's
// alert webhook URL.
func runOrgSetAlertWebhook(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("org set-alert-webhook")
	org := f.String("org", "organization id", true)
	url := f.String("url", `https URL that receives alert.opened, alert.acknowledged and alert.resolved ("" clears it)`, false)
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		if err := st.SetOrgAlertWebhook(ctx, *org, *url); err != nil {
			return output{}, err
		}
		out := struct {
			ID              string `json:"id"`
			AlertWebhookURL string `json:"alertWebhookUrl"`
		}{*org, *url}
		return output{out, func(w io.Writer) {
			if *url == "" {
				fmt.Fprintf(w, "Alert webhook of %s cleared.\n", *org)
				return
			}
			fmt.Fprintf(w, "Alert webhooks of %s go to %s.\n", *org, *url)
		}}, nil
	})
}

// runOrgRotateSecret gives an organization a fresh webhook signing secret.
func runOrgRotateSecret(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("org rotate-secret")
	org := f.String("org", "organization id", true)
	grace := f.FS.Duration("grace", 24*time.Hour, "how long the old secret also signs webhook-signature (0 to 168h)")
	f.Check = func() error {
		if *grace < 0 || *grace > cloud.MaxSecretGrace {
			return fmt.Errorf("%w: --grace must be 0 to %s", errUsage, cloud.MaxSecretGrace)
		}
		return nil
	}
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		secret, err := st.RotateOrgSecret(ctx, *org, *grace)
		if err != nil {
			return output{}, err
		}
		out := struct {
			ID                 string  `json:"id"`
			WebhookSecret      string  `json:"webhookSecret"`
			PreviousValidUntil *string `json:"previousValidUntil"`
		}{*org, secret, nil}
		if *grace > 0 {
			out.PreviousValidUntil = jsonTime(time.Now().Add(*grace))
		}
		return output{out, func(w io.Writer) {
			fmt.Fprintf(w, "New webhook signing secret of %s:\n  %s\n", *org, secret)
			fmt.Fprintf(w, "Every attempt from now on (retries included) is signed with it (X-Service-Signature and webhook-signature).\n")
			if *grace > 0 {
				fmt.Fprintf(w, "Until %s the old secret also signs webhook-signature.\n", *out.PreviousValidUntil)
			} else {
				fmt.Fprintf(w, "The old secret no longer verifies.\n")
			}
		}}, nil
	})
}

// runWebhookDeliveries lists an organization's recent deliveries with each
// attempt's status and time.
func runWebhookDeliveries(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("webhook deliveries")
	org := f.String("org", "organization id", true)
	limit := f.FS.Int("limit", 20, "how many deliveries, newest first (1..1000)")
	f.Check = func() error {
		if *limit < 1 || *limit > 1000 {
			return fmt.Errorf("%w: --limit must be 1..1000", errUsage)
		}
		return nil
	}
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		ds, err := st.WebhookDeliveries(ctx, *org, *limit)
		if err != nil {
			return output{}, err
		}
		if ds == nil {
			ds = []cloud.DeliveryInfo{}
		}
		return output{ds, func(w io.Writer) {
			if len(ds) == 0 {
				fmt.Fprintln(w, "No deliveries.")
				return
			}
			printTable(w, "DELIVERY\tEVENT\tDEVICE\tSTATE\tCREATED\tURL", func(tw io.Writer) {
				for _, d := range ds {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", d.ID, d.Event, d.DeviceID, d.State, humanTime(d.CreatedAt, "-"), d.URL)
					for _, a := range d.Attempts {
						res := fmt.Sprint(a.StatusCode)
						if a.StatusCode == 0 {
							res = a.Error
						}
						fmt.Fprintf(tw, "  attempt %d\t%s\t%dms\t\t%s\t\n", a.Attempt, res, a.DurationMs, humanTime(a.At, "-"))
					}
					if d.NextAttemptAt != nil {
						fmt.Fprintf(tw, "  next attempt\t\t\t\t%s\t\n", humanTime(*d.NextAttemptAt, "-"))
					}
					if len(d.Attempts) == 0 && d.LastError != "" {
						fmt.Fprintf(tw, "  %s\t\t\t\t\t\n", d.LastError)
					}
				}
			})
		}}, nil
	})
}

// runWebhookRedeliver queues a delivery again, under a new delivery id.
func runWebhookRedeliver(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("webhook redeliver")
	id := f.String("id", "delivery id, as webhook deliveries shows it", true)
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		newID, err := st.RedeliverWebhook(ctx, *id)
		if err != nil {
			return output{}, err
		}
		out := struct {
			ID           string `json:"id"`
			RedeliveryOf string `json:"redeliveryOf"`
		}{newID, *id}
		return output{out, func(w io.Writer) {
			fmt.Fprintf(w, "Queued as delivery %s (a copy of %s); a running relay sends it within a second.\n", newID, *id)
		}}, nil
	})
}

// webhookExtension runs the alert engine and the webhook dispatcher inside
// serve. Its flags: --webhook-backoff, --webhook-timeout,
// --webhook-allow-private, --webhook-ca, --webhook-concurrency,
// --webhook-retention, --webhook-queue-limit. It must be
// listed before the agent endpoint so that it stops after it (stops run in
// reverse order): no observer call reaches a closed dispatcher.
func webhookExtension() extension {
	backoff := webhook.DefaultBackoff()
	var client webhook.ClientConfig
	timeout := webhook.DefaultTimeout
	perEndpoint := 16
	retention := 7 * 24 * time.Hour
	maxQueue := 1000
	lease := webhook.MaxLease
	return extension{
		name: "webhooks",
		flags: func(fs *flag.FlagSet) {
			fs.Func("webhook-backoff", "webhook retry schedule: 1 to 5 waits, each ±20% jitter (default "+webhook.DefaultBackoffFlag+")", func(s string) error {
				b, err := webhook.ParseBackoff(s)
				if err != nil {
					return err
				}
				backoff = b
				return nil
			})
			fs.DurationVar(&timeout, "webhook-timeout", timeout, "time limit of one webhook attempt (connect, TLS, request, response)")
			fs.BoolVar(&client.AllowPrivate, "webhook-allow-private", false, "allow webhooks to loopback, private, link-local, CGNAT and metadata addresses")
			fs.StringVar(&client.CAFile, "webhook-ca", "", "PEM file of extra CA certificates trusted for webhook receivers")
			fs.IntVar(&perEndpoint, "webhook-concurrency", perEndpoint, "concurrent webhook attempts per endpoint (URL host)")
			fs.DurationVar(&retention, "webhook-retention", retention, "how long ended webhook deliveries (and their attempts) are kept")
			fs.DurationVar(&lease, "webhook-lease", lease, "on a store shared by several relays (PostgreSQL): how long a relay holds the deliveries it sends before another may take them (1s to 30s; renewed while it runs)")
			fs.IntVar(&maxQueue, "webhook-queue-limit", maxQueue, "deliveries held per device and kind behind a failing endpoint; beyond it the oldest waiting are dropped")
		},
		start: func(ctx context.Context, m *Main, _ *http.ServeMux) (func(context.Context) error, error) {
			if timeout <= 0 || timeout > 5*time.Minute {
				return nil, fmt.Errorf("%w: --webhook-timeout must be in (0, 5m]", errUsage)
			}
			if perEndpoint < 1 || perEndpoint > 1024 {
				return nil, fmt.Errorf("%w: --webhook-concurrency must be 1..1024", errUsage)
			}
			if maxQueue < 2 || maxQueue > 1000000 {
				return nil, fmt.Errorf("%w: --webhook-queue-limit must be 2..1000000", errUsage)
			}
			if lease < time.Second || lease > webhook.MaxLease {
				return nil, fmt.Errorf("%w: --webhook-lease must be 1s to %s", errUsage, webhook.MaxLease)
			}
			if retention < time.Hour {
				return nil, fmt.Errorf("%w: --webhook-retention must be at least 1h", errUsage)
			}
			client.MaxConnsPerHost = perEndpoint
			hc, err := webhook.NewClient(client)
			if err != nil {
				return nil, err
			}
			log := m.Logger.With("component", "webhook")
			disp, err := webhook.New(webhook.Config{Store: m.DB.Outbox, Client: hc, Backoff: backoff, Timeout: timeout,
				PerEndpoint: perEndpoint, MaxQueue: maxQueue, Retention: retention, Lease: lease, PollInterval: min(time.Second, lease/3), Logger: log, Now: m.DB.Now,
				Observer: m.Metrics.Webhooks()})
			if err != nil {
				return nil, err
			}
			if err := m.Metrics.WatchWebhooks(disp); err != nil {
				return nil, fmt.Errorf("webhook metrics: %w", err)
			}
			if err := disp.Start(ctx); err != nil {
				return nil, err
			}
			notifier := webhook.NewNotifier(disp)
			m.Cluster.Outbox = append(m.Cluster.Outbox, disp.Poke)
			// The notifier keeps each device's forwarding: changes through
			// this relay and through the others make it read it again.
			m.ConfigObservers = append(m.ConfigObservers, notifier)
			m.Cluster.Config = append(m.Cluster.Config, notifier.DesiredConfigChanged)
			m.Cluster.Resync = append(m.Cluster.Resync, func(context.Context) error { notifier.ForgetForwarding(); return nil })
			engine := alert.New(alert.Config{Store: m.DB.Engine, Observer: &m.AlertObservers,
				Logger: m.Logger.With("component", "alert"), Now: m.DB.Now,
				Leader: leaseHolder(m.DB, "alert-sweep", 15*time.Second, log)})
			m.Observers = append(m.Observers, engine, notifier)
			m.AlertObservers = append(m.AlertObservers, notifier)
			sweepCtx, stopSweep := context.WithCancel(ctx)
			swept := make(chan struct{})
			go func() {
				defer close(swept)
				engine.Run(sweepCtx) // device_offline for devices silent for three heartbeat intervals
			}()
			log.Info("webhooks started", "backoff", fmt.Sprint(backoff), "timeout", timeout.String(), "allow_private", client.AllowPrivate, "per_endpoint", perEndpoint)
			return func(sctx context.Context) error {
				stopSweep()
				<-swept
				return disp.Shutdown(sctx) // attempts in flight may finish within the shutdown timeout
			}, nil
		},
	}
}
