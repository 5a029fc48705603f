package relay

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/fleet/fleet/cloud"
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
			return fmt.Errorf("%w: --grace must be 0 to %s", ErrUsage, cloud.MaxSecretGrace)
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
			return fmt.Errorf("%w: --limit must be 1..1000", ErrUsage)
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
