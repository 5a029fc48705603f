package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/shared/resource"
)

// channelJSON is how the notify commands print a notification channel:
// its API resource and its organization.
type channelJSON struct {
	resource.NotificationChannel
	OrgID string `json:"orgId"`
}

func toChannelJSON(orgID string, c resource.NotificationChannel) channelJSON {
	return channelJSON{NotificationChannel: c, OrgID: orgID}
}

var channelKinds = []string{resource.ChannelEmail, resource.ChannelSlack, resource.ChannelWebhook}

// runNotifyAdd creates a notification channel (DESIGN.md "Alert rules
// and notifications").
func runNotifyAdd(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("notify add")
	org := f.String("org", "organization id", true)
	name := f.String("name", "channel name", true)
	kind := f.String("kind", "email, slack or webhook", true)
	target := f.String("target", "email: addresses, comma-separated; slack: the incoming webhook's https URL; webhook: an https URL (signed alert webhook body)", true)
	minSev := f.FS.String("min-severity", string(resource.SeverityInfo), "alerts below this severity are not sent: INFO, WARNING, ERROR or CRITICAL")
	allRules := f.FS.Bool("all-rules", false, "add the channel to every rule of the organization")
	f.Check = func() error {
		if !slices.Contains(channelKinds, *kind) {
			return fmt.Errorf("%w: --kind must be email, slack or webhook", ErrUsage)
		}
		if !resource.Severity(*minSev).Valid() {
			return fmt.Errorf("%w: --min-severity must be INFO, WARNING, ERROR or CRITICAL", ErrUsage)
		}
		return nil
	}
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		c, err := st.Rules().CreateChannel(ctx, cloud.NewChannel{OrgID: *org, Name: *name, Kind: *kind, Target: *target,
			MinSeverity: resource.Severity(*minSev), AllRules: *allRules})
		if err != nil {
			return output{}, err
		}
		return output{toChannelJSON(*org, c), func(w io.Writer) {
			fmt.Fprintf(w, "Notification channel created.\n  id:           %s\n  name:         %s\n  kind:         %s\n  target:       %s\n  min severity: %s\n",
				c.ID, c.Name, c.Kind, c.Target, c.MinSeverity)
			if *allRules {
				fmt.Fprintln(w, "Every rule of the organization now notifies it.")
			} else {
				fmt.Fprintln(w, "Rules notify it once their notify list names it (panel Alerts → Rules, or PATCH /alert-rules/{id}).")
			}
			fmt.Fprintf(w, "Try it: fleet-relay notify test --id %s\n", c.ID)
		}}, nil
	})
}

// runNotifyList lists an organization's notification channels.
func runNotifyList(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("notify list")
	return f.runInOrg(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores, org string) (output, error) {
		cs, err := st.Rules().ListChannels(ctx, org)
		if err != nil {
			return output{}, err
		}
		out := make([]channelJSON, 0, len(cs))
		for _, c := range cs {
			out = append(out, toChannelJSON(org, c))
		}
		return output{out, func(w io.Writer) {
			if len(cs) == 0 {
				fmt.Fprintln(w, "No notification channels.")
				return
			}
			printTable(w, "ID\tNAME\tKIND\tMIN SEVERITY\tTARGET\tCREATED", func(tw io.Writer) {
				for _, c := range out {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, c.Name, c.Kind, c.MinSeverity, c.Target, humanTime(c.CreatedAt.Time, ""))
				}
			})
		}}, nil
	})
}

// runNotifyRemove deletes a notification channel; rules stop naming it.
func runNotifyRemove(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("notify remove")
	id := f.String("id", "channel id", true)
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		org, c, err := st.Rules().Channel(ctx, *id)
		if err != nil {
			return output{}, err
		}
		if err := st.Rules().DeleteChannel(ctx, org, *id); err != nil {
			return output{}, err
		}
		out := struct {
			ID      string `json:"id"`
			Removed bool   `json:"removed"`
		}{*id, true}
		return output{out, func(w io.Writer) {
			fmt.Fprintf(w, "Notification channel %s (%s) removed; no rule notifies it any more.\n", c.ID, c.Name)
		}}, nil
	})
}

// testOutcome is what notify test prints.
type testOutcome struct {
	ID         string `json:"id"`
	DeliveryID string `json:"deliveryId"`
	State      string `json:"state"`
	SentBy     string `json:"sentBy"` // "relay" or "cli"
	StatusCode int    `json:"statusCode,omitempty"`
	Error      string `json:"error,omitempty"`
}

// notifyTestFlags are notify test's flags beside --db and --json: how long
// to wait for a running relay, and how to send without one.
type notifyTestFlags struct {
	id      *string
	wait    *time.Duration
	notify  NotifyConfig
	webhook WebhookConfig
}

func newNotifyTestFlags(f *adminFlags) *notifyTestFlags {
	t := &notifyTestFlags{webhook: defaultWebhookConfig()}
	t.id = f.String("id", "channel id", true)
	t.wait = f.FS.Duration("wait", 5*time.Second, "how long a running relay has to send the message before this command sends it itself (0 to 1m)")
	t.notify.flags(f.FS)
	f.FS.BoolVar(&t.webhook.AllowPrivate, "webhook-allow-private", false, "when sending itself: allow slack and webhook targets on loopback and private addresses")
	f.FS.StringVar(&t.webhook.CAFile, "webhook-ca", "", "when sending itself: PEM file of extra CA certificates for slack and webhook targets")
	return t
}

// runNotifyTest queues a test message to a channel through the outbox
// (RuleService.TestChannel). A running relay sends it; when none did
// within --wait, the command sends it itself with its own --smtp-url,
// --public-url and webhook flags (the serve flags' FLEET_ variables, so
// one environment file serves both), records the attempt, and prints the
// outcome. It exits 1 when the message was not delivered.
func runNotifyTest(ctx context.Context, args []string, stdout io.Writer) error {
	scratch := newAdminFlags("notify test")
	if err := refuseArgvPassword(args, scratch.FS, &newNotifyTestFlags(scratch).notify.SMTPURL); err != nil {
		return err
	}
	f := newAdminFlags("notify test")
	tf := newNotifyTestFlags(f)
	f.Check = func() error {
		if *tf.wait < 0 || *tf.wait > time.Minute {
			return fmt.Errorf("%w: --wait must be 0 to 1m", ErrUsage)
		}
		return tf.notify.validate(DefaultConfig().Listen, false)
	}
	var out testOutcome
	err := f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		org, _, err := st.Rules().Channel(ctx, *tf.id)
		if err != nil {
			return output{}, err
		}
		did, err := st.Rules().TestChannel(ctx, org, *tf.id)
		if err != nil {
			return output{}, err
		}
		out = testOutcome{ID: *tf.id, DeliveryID: did, SentBy: "relay"}
		if err := waitForRelay(ctx, st, org, did, *tf.wait, &out); err != nil {
			return output{}, err
		}
		if out.State == "" {
			out.SentBy = "cli"
			if err := tf.sendItself(ctx, st, did, &out); err != nil {
				return output{}, err
			}
		}
		return output{out, func(w io.Writer) {
			by := "a running relay"
			if out.SentBy == "cli" {
				by = "this command (no relay sent it within --wait)"
			}
			switch {
			case out.State == string(cloud.DeliveryDelivered):
				fmt.Fprintf(w, "Test message delivered (delivery %s, status %d), sent by %s.\n", did, out.StatusCode, by)
			case out.Error != "":
				fmt.Fprintf(w, "Test message not delivered (delivery %s, %s), sent by %s: %s\n", did, out.State, by, out.Error)
			default:
				fmt.Fprintf(w, "Test message not delivered (delivery %s, %s), sent by %s: status %d\n", did, out.State, by, out.StatusCode)
			}
		}}, nil
	})
	if err != nil {
		return err
	}
	if out.State != string(cloud.DeliveryDelivered) {
		return errors.New("the test message was not delivered")
	}
	return nil
}

// waitForRelay waits up to wait for the delivery's first attempt and sets
// out from it; out.State stays "" when no attempt was made.
func waitForRelay(ctx context.Context, st *cloud.Stores, org, id string, wait time.Duration, out *testOutcome) error {
	deadline := time.Now().Add(wait)
	for {
		ds, err := st.WebhookDeliveries(ctx, org, 100)
		if err != nil {
			return err
		}
		for _, d := range ds {
			if d.ID != id || len(d.Attempts) == 0 {
				continue
			}
			a := d.Attempts[len(d.Attempts)-1]
			out.State, out.StatusCode, out.Error = d.State, a.StatusCode, a.Error
			return nil
		}
		if !time.Now().Before(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// sendItself makes the delivery's attempt from this process, as a relay's
// dispatcher would, and records it in the outbox.
func (tf *notifyTestFlags) sendItself(ctx context.Context, st *cloud.Stores, id string, out *testOutcome) error {
	dl, err := pendingDelivery(ctx, st.Outbox, id)
	if err != nil {
		return err
	}
	hc, err := tf.webhook.client()
	if err != nil {
		return fmt.Errorf("--webhook-ca: %w", err)
	}
	mail, err := tf.notify.sender(webhook.DefaultTimeout)
	if err != nil {
		return fmt.Errorf("--smtp-url: %w", err)
	}
	d, err := webhook.New(webhook.Config{Store: st.Outbox, Client: hc, Mail: mail, PublicURL: tf.notify.PublicURL, Now: st.Now})
	if err != nil {
		return err
	}
	defer d.Close()
	rec := d.SendNow(ctx, dl)
	if err := st.Outbox.WriteOutbox(ctx, nil, []cloud.OutboxAttempt{rec}); err != nil {
		return fmt.Errorf("record the attempt: %w", err)
	}
	out.State, out.StatusCode, out.Error = string(rec.State), rec.StatusCode, rec.Error
	return nil
}

// pendingDelivery finds a pending delivery of the outbox by id.
func pendingDelivery(ctx context.Context, ob cloud.Outbox, id string) (*cloud.OutboxDelivery, error) {
	var after int64
	for {
		page, _, err := ob.Pending(ctx, after, 1000)
		if err != nil {
			return nil, err
		}
		for _, dl := range page {
			if dl.ID == id {
				return dl, nil
			}
			after = dl.Seq
		}
		if len(page) < 1000 {
			return nil, fmt.Errorf("delivery %s is no longer pending (a relay took it meanwhile: see fleet-relay webhook deliveries)", id)
		}
	}
}
