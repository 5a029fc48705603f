package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/cloud/sqlite"
)

func runOrgCreate(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("org create")
	f.Create = true
	name := f.FS.String("name", "", "organization name (required)")
	if err := f.parse(args); err != nil {
		return err
	}
	if err := required("name", *name); err != nil {
		return err
	}
	db, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	org, err := db.CreateOrg(ctx, *name)
	if err != nil {
		return err
	}
	out := struct {
		ID            string `json:"id"`
		Name          string `json:"name"`
		WebhookSecret string `json:"webhookSecret"`
	}{org.ID, org.Name, org.WebhookSecret}
	return f.print(stdout, out, func(w io.Writer) {
		fmt.Fprintf(w, "Organization created.\n  id:             %s\n  name:           %s\n  webhook secret: %s\n", org.ID, org.Name, org.WebhookSecret)
		fmt.Fprintf(w, "Webhooks to this organization are signed with the secret above (X-Service-Signature).\n")
	})
}

// keyJSON is how keys are printed; Key is set only by key create.
type keyJSON struct {
	ID        string   `json:"id"`
	Key       string   `json:"key,omitempty"`
	OrgID     string   `json:"orgId"`
	Name      string   `json:"name"`
	Scopes    []string `json:"scopes"`
	ExpiresAt *string  `json:"expiresAt"`
	RevokedAt *string  `json:"revokedAt"`
	CreatedAt *string  `json:"createdAt"`
}

func runKeyCreate(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("key create")
	org := f.FS.String("org", "", "organization id (required)")
	name := f.FS.String("name", "", "descriptive name (required)")
	scopes := f.FS.String("scopes", "", "comma-separated scopes (required): "+strings.Join(cloud.AllScopes, ","))
	expires := f.FS.String("expires", "90d", "expiry: 1d..365d, or never")
	if err := f.parse(args); err != nil {
		return err
	}
	if err := required("org", *org, "name", *name, "scopes", *scopes); err != nil {
		return err
	}
	ttl, err := apikey.ParseExpiry(*expires)
	if err != nil {
		return fmt.Errorf("%w: --expires: %v", errUsage, err)
	}
	sc, err := apikey.ValidScopes(strings.Split(*scopes, ","))
	if err != nil {
		return fmt.Errorf("%w: --scopes: %v", errUsage, err)
	}
	db, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	k, key, err := db.CreateKey(ctx, *org, *name, sc, ttl)
	if err != nil {
		return err
	}
	out := keyJSON{ID: k.ID, Key: key, OrgID: k.OrgID, Name: k.Name, Scopes: k.Scopes, ExpiresAt: jsonTime(k.ExpiresAt), CreatedAt: jsonTime(k.CreatedAt)}
	return f.print(stdout, out, func(w io.Writer) {
		fmt.Fprintf(w, "API key created. Copy it now: it is shown only this once.\n\n  %s\n\n", key)
		fmt.Fprintf(w, "  id:      %s\n  name:    %s\n  scopes:  %s\n  expires: %s\n", k.ID, k.Name, strings.Join(k.Scopes, ","), humanTime(k.ExpiresAt, "never"))
	})
}

func runKeyList(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("key list")
	org := f.FS.String("org", "", "organization id (required)")
	if err := f.parse(args); err != nil {
		return err
	}
	if err := required("org", *org); err != nil {
		return err
	}
	db, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.Org(ctx, *org); err != nil {
		return err
	}
	keys, err := db.ListKeys(ctx, *org)
	if err != nil {
		return err
	}
	out := make([]keyJSON, 0, len(keys))
	for _, k := range keys {
		out = append(out, keyJSON{ID: k.ID, OrgID: k.OrgID, Name: k.Name, Scopes: k.Scopes, ExpiresAt: jsonTime(k.ExpiresAt), RevokedAt: jsonTime(k.RevokedAt), CreatedAt: jsonTime(k.CreatedAt)})
	}
	now := db.Now()
	return f.print(stdout, out, func(w io.Writer) {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tSCOPES\tSTATUS\tEXPIRES\tCREATED")
		for _, k := range keys {
			status := "active"
			switch {
			case !k.RevokedAt.IsZero():
				status = "revoked"
			case !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt):
				status = "expired"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, strings.Join(k.Scopes, ","), status, humanTime(k.ExpiresAt, "never"), humanTime(k.CreatedAt, ""))
		}
		tw.Flush()
	})
}

func runKeyRevoke(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("key revoke")
	id := f.FS.String("id", "", "key id (required)")
	if err := f.parse(args); err != nil {
		return err
	}
	if err := required("id", *id); err != nil {
		return err
	}
	db, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	k, err := db.RevokeKey(ctx, *id)
	if err != nil {
		return err
	}
	out := struct {
		ID        string  `json:"id"`
		RevokedAt *string `json:"revokedAt"`
	}{k.ID, jsonTime(k.RevokedAt)}
	return f.print(stdout, out, func(w io.Writer) {
		fmt.Fprintf(w, "API key %s revoked at %s; it is refused from its next request.\n", k.ID, humanTime(k.RevokedAt, ""))
	})
}

func runDeviceAdd(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("device add")
	org := f.FS.String("org", "", "organization id (required)")
	name := f.FS.String("name", "", "device name (required)")
	serial := f.FS.String("serial", "", "serial number, unique in the organization (required)")
	model := f.FS.String("model", "", "hardware model from the catalog, e.g. IG-500 (required)")
	location := f.FS.String("location", "", "location")
	if err := f.parse(args); err != nil {
		return err
	}
	if err := required("org", *org, "name", *name, "serial", *serial, "model", *model); err != nil {
		return err
	}
	db, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	d, token, err := db.AddDevice(ctx, sqlite.NewDevice{OrgID: *org, Name: *name, SerialNumber: *serial, Model: *model, Location: *location})
	if err != nil {
		return err
	}
	out := struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}{d.ID, token}
	return f.print(stdout, out, func(w io.Writer) {
		fmt.Fprintf(w, "Device registered. Give this token to its agent now: it is shown only this once.\n\n  %s\n\n", token)
		fmt.Fprintf(w, "  id:     %s\n  name:   %s\n  serial: %s\n  model:  %s\n", d.ID, d.Name, d.SerialNumber, d.Model)
		fmt.Fprintf(w, "Agent: fleet-agent --relay wss://RELAY --token %s --hw linux --model %s\n", token, d.Model)
	})
}

func runDeviceRevoke(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("device revoke")
	id := f.FS.String("id", "", "device id (required)")
	if err := f.parse(args); err != nil {
		return err
	}
	if err := required("id", *id); err != nil {
		return err
	}
	db, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	at, err := db.RevokeDevice(ctx, *id)
	if err != nil {
		return err
	}
	out := struct {
		ID        string  `json:"id"`
		RevokedAt *string `json:"revokedAt"`
	}{*id, jsonTime(at)}
	return f.print(stdout, out, func(w io.Writer) {
		fmt.Fprintf(w, "Device %s: token revoked; its agent is refused from its next connection.\n", *id)
	})
}
