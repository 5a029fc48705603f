package relay

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/fleet/fleet/cloud"
)

// Single sign-on (docs/identity.md): org set-oidc and org show-oidc. The
// client secret comes from standard input (--client-secret-stdin) or
// FLEET_OIDC_CLIENT_SECRET, never from the command line, where ps would
// show it; nothing prints it back.

// OIDCSecretEnv names the environment variable set-oidc reads the client
// secret from.
const OIDCSecretEnv = "FLEET_OIDC_CLIENT_SECRET"

// oidcJSON is how a configuration is printed: the secret only as whether
// it is set.
type oidcJSON struct {
	OrgID           string            `json:"orgId"`
	Issuer          string            `json:"issuer"`
	ClientID        string            `json:"clientId"`
	ClientSecretSet bool              `json:"clientSecretSet"`
	Domains         []string          `json:"domains"`
	DefaultRole     string            `json:"defaultRole"`
	RoleClaim       string            `json:"roleClaim"`
	RoleMap         map[string]string `json:"roleMap"`
	Enabled         bool              `json:"enabled"`
	UpdatedAt       *string           `json:"updatedAt"`
	SignInPath      string            `json:"signInPath"`
	RedirectPath    string            `json:"redirectPath"`
}

func oidcOut(c cloud.OIDCConfig) (oidcJSON, func(w io.Writer)) {
	j := oidcJSON{OrgID: c.OrgID, Issuer: c.Issuer, ClientID: c.ClientID, ClientSecretSet: c.SecretSet(), Domains: c.Domains,
		DefaultRole: string(c.DefaultRole), RoleClaim: c.RoleClaim, RoleMap: map[string]string{}, Enabled: c.Enabled,
		UpdatedAt: jsonTime(c.UpdatedAt), SignInPath: "/panel/login?org=" + c.OrgID, RedirectPath: "/panel/sso/callback"}
	if j.Domains == nil {
		j.Domains = []string{}
	}
	for k, v := range c.RoleMap {
		j.RoleMap[k] = string(v)
	}
	return j, func(w io.Writer) {
		state, secret := "off", "not set"
		if c.Enabled {
			state = "on"
		}
		if c.SecretSet() {
			secret = "set"
		}
		fmt.Fprintf(w, "Single sign-on of %s: %s\n  issuer:        %s\n  client id:     %s\n  client secret: %s\n  domains:       %s\n  default role:  %s\n",
			c.OrgID, state, c.Issuer, c.ClientID, secret, strings.Join(c.Domains, ", "), c.DefaultRole)
		if c.RoleClaim != "" {
			fmt.Fprintf(w, "  role claim:    %s\n  role map:      %s\n", c.RoleClaim, cloud.FormatRoleMap(c.RoleMap))
		}
		fmt.Fprintf(w, "Register <public URL>/panel/sso/callback as the redirect URI at the provider; people sign in at <public URL>/panel/login?org=%s or by their email's domain.\n", c.OrgID)
	}
}

// readSecret reads a client secret from r: its first line, trimmed.
func readSecret(r io.Reader) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(r, cloud.MaxOIDCField+3)).ReadString('\n')
	if err != nil && err != io.EOF {
		return "", fmt.Errorf("read the client secret from stdin: %w", err)
	}
	s := strings.TrimSpace(line)
	if s == "" {
		return "", fmt.Errorf("%w: --client-secret-stdin: standard input is empty (pipe the secret in)", ErrUsage)
	}
	return s, nil
}

func (a *app) runOrgSetOIDC(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("org set-oidc")
	org := f.String("org", "organization id", true)
	issuer := f.String("issuer", "the provider's issuer URL, e.g. https://login.example.com/realms/acme", false)
	clientID := f.String("client-id", "the client id the relay is registered as at the provider", false)
	domains := f.String("domains", "allowed email domains, comma-separated (each belongs to one organization)", false)
	defRole := f.FS.String("default-role", "VIEWER", "role of a member made at their first sign-in")
	roleClaim := f.String("role-claim", "claim of the ID token whose value --role-map maps to a role at a member's first sign-in (e.g. groups)", false)
	roleMap := f.String("role-map", "claim value=ROLE pairs, comma-separated (e.g. fleet-admins=ADMIN,fleet-ops=MEMBER)", false)
	secretStdin := f.FS.Bool("client-secret-stdin", false, "read the client secret from standard input (else "+OIDCSecretEnv+"; the secret is never a flag)")
	disable := f.FS.Bool("disable", false, "turn single sign-on off (alone: keep the rest of the configuration)")
	var c cloud.OIDCConfig
	onlyDisable := false
	f.Check = func() error {
		set := map[string]bool{}
		f.FS.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
		onlyDisable = *disable && !set["issuer"] && !set["client-id"] && !set["domains"] && !set["default-role"] && !set["role-claim"] && !set["role-map"]
		if onlyDisable {
			return nil
		}
		for _, name := range []string{"issuer", "client-id", "domains"} {
			if err := required(name, f.FS.Lookup(name).Value.String()); err != nil {
				return err
			}
		}
		role, err := cloud.ParseRole(*defRole)
		if err != nil {
			return fmt.Errorf("%w: --default-role: %s", ErrUsage, cloud.ErrorMessage(err))
		}
		m, err := cloud.ParseRoleMap(*roleMap)
		if err != nil {
			return fmt.Errorf("%w: --role-map: %s", ErrUsage, cloud.ErrorMessage(err))
		}
		c = cloud.OIDCConfig{OrgID: *org, Issuer: *issuer, ClientID: *clientID, Domains: strings.Split(*domains, ","),
			DefaultRole: role, RoleClaim: *roleClaim, RoleMap: m, Enabled: !*disable}
		if *secretStdin {
			c.ClientSecret, err = readSecret(a.stdin)
			return err
		}
		c.ClientSecret = strings.TrimSpace(os.Getenv(OIDCSecretEnv)) // "" keeps the stored secret
		return nil
	}
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		if onlyDisable {
			old, err := st.Panel.OrgOIDC(ctx, *org)
			if err != nil {
				return output{}, err
			}
			old.ClientSecret, old.Enabled = "", false // "": keep the stored secret
			c = old
		}
		saved, err := st.Panel.SetOrgOIDC(ctx, c)
		if err != nil {
			return output{}, err
		}
		j, human := oidcOut(saved)
		return output{j, human}, nil
	})
}

func runOrgShowOIDC(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("org show-oidc")
	return f.runInOrg(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores, org string) (output, error) {
		c, err := st.Panel.OrgOIDC(ctx, org)
		if err != nil {
			return output{}, err
		}
		j, human := oidcOut(c)
		return output{j, human}, nil
	})
}
