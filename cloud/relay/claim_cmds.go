package relay

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
)

// The claim subcommands (issue 28): claims register gateways without a
// console (fleet-agent --claim TOKEN --serial SN, docs/agent.md
// "Claiming").

// claimJSON is how claims are printed; Token is set only by claim create.
type claimJSON struct {
	ID        string   `json:"id"`
	Token     string   `json:"token,omitempty"`
	OrgID     string   `json:"orgId"`
	Model     string   `json:"model"`
	Tags      []string `json:"tags"`
	Uses      int      `json:"uses"`
	Used      int      `json:"used"`
	State     string   `json:"state"`
	ExpiresAt *string  `json:"expiresAt"`
	RevokedAt *string  `json:"revokedAt"`
	CreatedAt *string  `json:"createdAt"`
}

func newClaimJSON(c cloud.Claim, now time.Time) claimJSON {
	return claimJSON{ID: c.ID, OrgID: c.OrgID, Model: c.Model, Tags: c.Tags, Uses: c.Uses, Used: c.Used, State: c.State(now),
		ExpiresAt: jsonTime(deref(c.ExpiresAt)), RevokedAt: jsonTime(deref(c.RevokedAt)), CreatedAt: jsonTime(c.CreatedAt)}
}

// deref is *t, or the zero time for nil.
func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// parseClaimExpiry parses --expires of claim create: "" or "never" (0),
// "<n>d", or a Go duration ("12h"), up to 365 days.
func parseClaimExpiry(s string) (time.Duration, error) {
	if s == "" || s == "never" {
		return 0, nil
	}
	d, err := parseDays(s)
	if err != nil {
		return 0, fmt.Errorf("%q: want a number of days (7d), a duration (12h) or never", s)
	}
	if d <= 0 || d > 365*24*time.Hour {
		return 0, fmt.Errorf("%q: want more than nothing and at most 365d", s)
	}
	return d, nil
}

// runClaimCreate is `claim create`: the token is printed once.
func runClaimCreate(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("claim create")
	org := f.String("org", "organization id", true)
	model := f.String("model", "model of the gateways the claim registers (every one gets it)", true)
	tags := f.String("tags", "tags every gateway claimed gets, comma-separated", false)
	uses := f.FS.Int("uses", 1, "how many gateways the claim may register (1 to 100000)")
	expires := f.FS.String("expires", "never", "how long the claim may be used: 7d, 12h, or never")
	nc := cloud.NewClaim{Tags: []string{}}
	f.Check = func() (err error) {
		if nc.ExpiresIn, err = parseClaimExpiry(*expires); err != nil {
			return fmt.Errorf("%w: --expires %v", ErrUsage, err)
		}
		if *uses < 1 || *uses > 100000 {
			return fmt.Errorf("%w: --uses: want 1 to 100000", ErrUsage)
		}
		for _, t := range strings.Split(*tags, ",") {
			if t = strings.TrimSpace(t); t != "" {
				nc.Tags = append(nc.Tags, t)
			}
		}
		return nil
	}
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		nc.OrgID, nc.Model, nc.Uses = *org, *model, *uses
		c, token, err := st.Claims().CreateClaim(ctx, nc)
		if err != nil {
			return output{}, err
		}
		out := newClaimJSON(c, st.Now())
		out.Token = token
		return output{out, func(w io.Writer) {
			fmt.Fprintf(w, "Claim created. Copy its token now: it is shown only this once.\n\n  %s\n\n", token)
			fmt.Fprintf(w, "  id:      %s\n  model:   %s\n  tags:    %s\n  uses:    %d\n  expires: %s\n", c.ID, c.Model, strings.Join(c.Tags, ","), c.Uses, humanTime(deref(c.ExpiresAt), "never"))
			fmt.Fprintf(w, "\nPut it in the gateways' /etc/fleet-agent/agent.yaml (claim: TOKEN) with their serial numbers (serial:); see docs/agent.md \"Claiming\".\n")
		}}, nil
	})
}

// runClaimList is `claim list`: never the tokens.
func runClaimList(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("claim list")
	return f.runInOrg(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores, org string) (output, error) {
		claims, err := st.Claims().ListClaims(ctx, org)
		if err != nil {
			return output{}, err
		}
		now := st.Now()
		out := make([]claimJSON, 0, len(claims))
		for _, c := range claims {
			out = append(out, newClaimJSON(c, now))
		}
		return output{out, func(w io.Writer) {
			printTable(w, "ID\tMODEL\tTAGS\tUSED\tSTATE\tEXPIRES\tCREATED", func(tw io.Writer) {
				for _, c := range claims {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", c.ID, c.Model, strings.Join(c.Tags, ","), c.Used, c.Uses, c.State(now),
						humanTime(deref(c.ExpiresAt), "never"), humanTime(c.CreatedAt, ""))
				}
			})
		}}, nil
	})
}

// runClaimRevoke is `claim revoke`: the claim registers nothing from then
// on; the gateways it registered keep their tokens.
func runClaimRevoke(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("claim revoke")
	id := f.String("id", "claim id", true)
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		org, err := st.ClaimOrg(ctx, *id)
		if err != nil {
			return output{}, err
		}
		c, err := st.Claims().RevokeClaim(ctx, org, *id)
		if err != nil {
			return output{}, err
		}
		return output{revokedJSON{c.ID, jsonTime(deref(c.RevokedAt))}, func(w io.Writer) {
			fmt.Fprintf(w, "Claim %s revoked at %s; it registers no gateway from now on (those it registered keep their tokens).\n", c.ID, humanTime(deref(c.RevokedAt), ""))
		}}, nil
	})
}
