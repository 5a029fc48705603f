package relay

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/fleet/fleet/cloud"
)

// The audit subcommand (issue 30, docs/audit.md): reads an organization's
// audit log, newest first. Nothing writes or deletes a record here.

// defaultAuditList is how many records `audit list` prints without
// --limit.
const defaultAuditList = 100

// maxAuditFilter bounds the free-text filters (--actor, --target ...).
const maxAuditFilter = 200

// parseDays parses a duration as Go does ("36h", "90m") or as a whole
// number of days ("90d").
func parseDays(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || n == "" || n[0] == '+' || n[0] == '-' || days > 100*365 {
			return 0, fmt.Errorf("%q: want a number of days (90d) or a duration (12h)", s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q: want a number of days (90d) or a duration (12h)", s)
	}
	return d, nil
}

// parseAuditTime parses --since or --until: "" (none), a duration back from
// now ("24h", "7d"), a date ("2026-11-27", midnight UTC) or an RFC 3339
// time.
func parseAuditTime(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	d, err := parseDays(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("%q: want a time back from now (24h, 7d), a date (2026-11-27) or an RFC 3339 time", s)
	}
	return now.Add(-d), nil
}

// runAuditList is `audit list`: the organization's records, newest first,
// page after page up to --limit.
func runAuditList(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("audit list")
	since := f.FS.String("since", "", "only records from then on: 24h or 7d back from now, a date (2026-11-27, UTC) or an RFC 3339 time")
	until := f.FS.String("until", "", "only records before then (same forms as --since)")
	action := f.FS.String("action", "", "only this action (key.created), or every action of a kind (key.)")
	actorKind := f.FS.String("actor-kind", "", "only changes made through this door: user, api_key or cli")
	actor := f.FS.String("actor", "", "only changes of this actor id (a user's or a key's id, an OS user)")
	targetKind := f.FS.String("target-kind", "", "only changes to this kind of target (api_key, device, member ...)")
	target := f.FS.String("target", "", "only changes to this target id")
	limit := f.FS.Int("limit", defaultAuditList, "at most this many records, newest first (0: all)")
	var filter cloud.AuditFilter
	f.Check = func() (err error) {
		now := time.Now()
		if filter.Since, err = parseAuditTime(*since, now); err != nil {
			return fmt.Errorf("%w: --since %v", ErrUsage, err)
		}
		if filter.Until, err = parseAuditTime(*until, now); err != nil {
			return fmt.Errorf("%w: --until %v", ErrUsage, err)
		}
		if !filter.Since.IsZero() && !filter.Until.IsZero() && !filter.Until.After(filter.Since) {
			return fmt.Errorf("%w: --until must be after --since", ErrUsage)
		}
		if !cloud.ValidAuditAction(*action) {
			return fmt.Errorf("%w: --action %q: want an action such as key.created or a kind such as key. (docs/audit.md lists them)", ErrUsage, *action)
		}
		if !cloud.ValidActorKind(cloud.ActorKind(*actorKind)) {
			return fmt.Errorf("%w: --actor-kind %q: want user, api_key or cli", ErrUsage, *actorKind)
		}
		for name, v := range map[string]string{"actor": *actor, "target-kind": *targetKind, "target": *target} {
			if len(v) > maxAuditFilter {
				return fmt.Errorf("%w: --%s: at most %d characters", ErrUsage, name, maxAuditFilter)
			}
		}
		if *limit < 0 {
			return fmt.Errorf("%w: --limit must be 0 (all) or more", ErrUsage)
		}
		filter.Action, filter.ActorKind, filter.ActorID = *action, cloud.ActorKind(*actorKind), *actor
		filter.TargetKind, filter.TargetID = *targetKind, *target
		return nil
	}
	return f.runInOrg(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores, org string) (output, error) {
		recs := []cloud.AuditRecord{}
		for {
			q := filter
			q.Limit = cloud.MaxAuditPage
			if *limit > 0 {
				q.Limit = min(cloud.MaxAuditPage, *limit-len(recs))
			}
			page, err := st.Audit().ListAudit(ctx, org, q)
			if err != nil {
				return output{}, err
			}
			recs = append(recs, page.Records...)
			if page.Next == "" || (*limit > 0 && len(recs) >= *limit) {
				break
			}
			filter.Cursor = page.Next
		}
		return output{recs, func(w io.Writer) { printAudit(w, recs) }}, nil
	})
}

// printAudit writes records as a table for people: control characters of
// names and details are shown as '?', never sent to the terminal.
func printAudit(w io.Writer, recs []cloud.AuditRecord) {
	if len(recs) == 0 {
		fmt.Fprintln(w, "No audit records.")
		return
	}
	printTable(w, "AT\tACTOR\tACTION\tTARGET\tIP\tDETAILS", func(tw io.Writer) {
		for _, r := range recs {
			target := r.Target.Kind
			if r.Target.ID != "" {
				target += " " + r.Target.ID
			}
			ip := r.IP
			if ip == "" {
				ip = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.AuditTime(), printable(string(r.Actor.Kind)+" "+r.Actor.Name),
				printable(r.Action), printable(target), printable(ip), printable(r.DetailsText()))
		}
	})
}

// printable replaces control characters (tabs and escapes too) with '?'.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
}
