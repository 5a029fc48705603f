package relay

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/apikey"
)

func runOrgCreate(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("org create")
	f.Create = true
	name := f.String("name", "organization name", true)
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		org, err := st.CreateOrg(ctx, *name)
		if err != nil {
			return output{}, err
		}
		out := struct {
			ID            string `json:"id"`
			Name          string `json:"name"`
			WebhookSecret string `json:"webhookSecret"`
		}{org.ID, org.Name, org.WebhookSecret}
		return output{out, func(w io.Writer) {
			fmt.Fprintf(w, "Organization created.\n  id:             %s\n  name:           %s\n  webhook secret: %s\n", org.ID, org.Name, org.WebhookSecret)
			fmt.Fprintf(w, "Webhooks to this organization are signed with the secret above (X-Service-Signature).\n")
		}}, nil
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
	// Set by key list: who made it in the panel ("" for the CLI) and
	// when it last authenticated a request (to within a minute).
	CreatedBy  string  `json:"createdBy,omitempty"`
	LastUsedAt *string `json:"lastUsedAt,omitempty"`
}

func runKeyCreate(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("key create")
	org := f.String("org", "organization id", true)
	name := f.String("name", "descriptive name", true)
	scopes := f.String("scopes", "comma-separated scopes: "+strings.Join(cloud.AllScopes, ","), true)
	expires := f.FS.String("expires", "90d", "expiry: 1d..365d, or never")
	var ttl time.Duration
	var sc []string
	f.Check = func() (err error) {
		if ttl, err = apikey.ParseExpiry(*expires); err != nil {
			return fmt.Errorf("%w: --expires: %v", ErrUsage, err)
		}
		if sc, err = apikey.ValidScopes(strings.Split(*scopes, ",")); err != nil {
			return fmt.Errorf("%w: --scopes: %v", ErrUsage, err)
		}
		return nil
	}
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		k, key, err := st.CreateKey(ctx, *org, *name, sc, ttl)
		if err != nil {
			return output{}, err
		}
		out := keyJSON{ID: k.ID, Key: key, OrgID: k.OrgID, Name: k.Name, Scopes: k.Scopes, ExpiresAt: jsonTime(k.ExpiresAt), CreatedAt: jsonTime(k.CreatedAt)}
		return output{out, func(w io.Writer) {
			fmt.Fprintf(w, "API key created. Copy it now: it is shown only this once.\n\n  %s\n\n", key)
			fmt.Fprintf(w, "  id:      %s\n  name:    %s\n  scopes:  %s\n  expires: %s\n", k.ID, k.Name, strings.Join(k.Scopes, ","), humanTime(k.ExpiresAt, "never"))
		}}, nil
	})
}

func runKeyList(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("key list")
	return f.runInOrg(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores, org string) (output, error) {
		keys, err := st.Panel.OrgKeys(ctx, org)
		if err != nil {
			return output{}, err
		}
		slices.Reverse(keys) // oldest first
		out := make([]keyJSON, 0, len(keys))
		for _, k := range keys {
			out = append(out, keyJSON{ID: k.ID, OrgID: k.OrgID, Name: k.Name, Scopes: k.Scopes, ExpiresAt: jsonTime(k.ExpiresAt), RevokedAt: jsonTime(k.RevokedAt),
				CreatedAt: jsonTime(k.CreatedAt), CreatedBy: k.CreatedByEmail, LastUsedAt: jsonTime(k.LastUsedAt)})
		}
		now := st.Now()
		return output{out, func(w io.Writer) {
			printTable(w, "ID\tNAME\tSCOPES\tSTATUS\tEXPIRES\tCREATED\tLAST USED", func(tw io.Writer) {
				for _, k := range keys {
					status := "active"
					switch {
					case !k.RevokedAt.IsZero():
						status = "revoked"
					case !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt):
						status = "expired"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, strings.Join(k.Scopes, ","), status, humanTime(k.ExpiresAt, "never"), humanTime(k.CreatedAt, ""), humanTime(k.LastUsedAt, "never"))
				}
			})
		}}, nil
	})
}

// revokedJSON is how key revoke and device revoke print what they revoked.
type revokedJSON struct {
	ID        string  `json:"id"`
	RevokedAt *string `json:"revokedAt"`
}

func runKeyRevoke(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("key revoke")
	id := f.String("id", "key id", true)
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		k, err := st.RevokeKey(ctx, *id)
		if err != nil {
			return output{}, err
		}
		return output{revokedJSON{k.ID, jsonTime(k.RevokedAt)}, func(w io.Writer) {
			fmt.Fprintf(w, "API key %s revoked at %s; it is refused from its next request.\n", k.ID, humanTime(k.RevokedAt, ""))
		}}, nil
	})
}

func runDeviceAdd(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("device add")
	org := f.String("org", "organization id", true)
	name := f.String("name", "device name", true)
	serial := f.String("serial", "serial number, unique in the organization", true)
	model := f.String("model", "hardware model from the catalog, e.g. IG-500", true)
	location := f.String("location", "location", false)
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		d, token, err := st.AddDevice(ctx, cloud.NewDevice{OrgID: *org, Name: *name, SerialNumber: *serial, Model: *model, Location: *location})
		if err != nil {
			return output{}, err
		}
		out := struct {
			ID    string `json:"id"`
			Token string `json:"token"`
		}{d.ID, token}
		return output{out, func(w io.Writer) {
			fmt.Fprintf(w, "Device registered. Give this token to its agent now: it is shown only this once.\n\n  %s\n\n", token)
			fmt.Fprintf(w, "  id:     %s\n  name:   %s\n  serial: %s\n  model:  %s\n", d.ID, d.Name, d.SerialNumber, d.Model)
			fmt.Fprintf(w, "Agent: fleet-agent --relay wss://RELAY --token %s --hw linux --model %s\n", token, d.Model)
		}}, nil
	})
}

func runDeviceRevoke(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("device revoke")
	id := f.String("id", "device id", true)
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		at, err := st.RevokeDevice(ctx, *id)
		if err != nil {
			return output{}, err
		}
		return output{revokedJSON{*id, jsonTime(at)}, func(w io.Writer) {
			fmt.Fprintf(w, "Device %s: token revoked; its agent is refused from its next connection.\n", *id)
		}}, nil
	})
}
