package relay

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/peterbourgon/ff/v3"

	"github.com/fleet/fleet/cloud"
)

// command is one subcommand. path is its words ("key create"); run gets the
// arguments after them and writes its result to stdout.
type command struct {
	path  string
	usage string
	run   func(ctx context.Context, args []string, stdout io.Writer) error
}

// commands is the table of subcommands. Areas add their subcommands in their
// own files and one line each here.
func (a *app) commands() []command {
	return []command{
		{path: "serve", usage: "run the relay: public API, agent endpoint, background work", run: a.runServe},
		{path: "org create", usage: "create an organization (prints its webhook signing secret)", run: runOrgCreate},
		{path: "key create", usage: "create an API key (printed once)", run: runKeyCreate},
		{path: "key list", usage: "list an organization's API keys (never their secrets)", run: runKeyList},
		{path: "key revoke", usage: "revoke an API key (refused from its next request)", run: runKeyRevoke},
		{path: "device add", usage: "register a device (prints its agent token once)", run: runDeviceAdd},
		{path: "device revoke", usage: "revoke a device's token", run: runDeviceRevoke},
		{path: "device set", usage: "change a device's name, location, notes or tags", run: runDeviceSet},
		{path: "org list", usage: "list the organizations", run: runOrgList},
		{path: "device list", usage: "list an organization's devices (never their tokens)", run: runDeviceList},
		{path: "org set-alert-webhook", usage: "set an organization's alert webhook URL", run: runOrgSetAlertWebhook},
		{path: "org set-oidc", usage: "configure an organization's single sign-on (OpenID Connect; client secret from stdin or FLEET_OIDC_CLIENT_SECRET)", run: a.runOrgSetOIDC},
		{path: "org show-oidc", usage: "show an organization's single sign-on (never the client secret)", run: runOrgShowOIDC},
		{path: "org rotate-secret", usage: "give an organization a new webhook signing secret", run: runOrgRotateSecret},
		{path: "webhook deliveries", usage: "list recent webhook deliveries with each attempt", run: runWebhookDeliveries},
		{path: "store copy", usage: "copy a whole SQLite deployment into an empty PostgreSQL database (--from FILE --to URL)", run: runStoreCopy},
		{path: "backup", usage: "write a consistent copy of the database (safe while serve runs)", run: runBackup},
		{path: "healthcheck", usage: "exit 0 when a running relay answers its health URL (container HEALTHCHECK)", run: runHealthcheck},
		{path: "webhook redeliver", usage: "send a webhook delivery again (new delivery id)", run: runWebhookRedeliver},
		{path: "user create", usage: "add a panel user to an organization (password read from stdin)", run: a.runUserCreate},
		{path: "user list", usage: "list an organization's panel users", run: runUserList},
		{path: "user set-role", usage: "change a panel user's role", run: runUserSetRole},
		{path: "user disable", usage: "disable a panel user (signed out on their next request)", run: runUserDisable},
		{path: "channel import-dbc", usage: "turn a DBC file's signals into points of a device's canfd channel", run: runChannelImportDBC},
		{path: "notify add", usage: "add a notification channel (email, slack or webhook) to an organization", run: runNotifyAdd},
		{path: "notify list", usage: "list an organization's notification channels", run: runNotifyList},
		{path: "notify remove", usage: "remove a notification channel (rules stop naming it)", run: runNotifyRemove},
		{path: "notify test", usage: "send a test message to a notification channel and print the outcome", run: runNotifyTest},
		{path: "claim create", usage: "create a claim: its token registers gateways without a console (printed once)", run: runClaimCreate},
		{path: "claim list", usage: "list an organization's claims (never their tokens)", run: runClaimList},
		{path: "claim revoke", usage: "revoke a claim (it registers no gateway from then on)", run: runClaimRevoke},
		{path: "user reset-password", usage: "set a panel user's password (read from stdin); ends their sessions", run: a.runUserResetPassword},
		{path: "user reset-2fa", usage: "turn a panel user's two-factor sign-in off (a lost phone): deletes their key and recovery codes", run: runUserReset2FA},
		{path: "release add", usage: "store a signed fleet-agent binary as a release of an organization", run: runReleaseAdd},
		{path: "release list", usage: "list an organization's releases", run: runReleaseList},
		{path: "audit list", usage: "list an organization's audit log, newest first (who changed what, when, from where)", run: runAuditList},
	}
}

// app is the process: where input comes from and output goes.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

// ErrUsage marks a mistake in the command line: an unknown command, a
// missing or bad flag. The process exits 2 on it (1 on any other error).
var ErrUsage = errors.New("usage")

// Run runs the fleet-relay command line args (the longest matching
// command) with standard input from stdin. It says what went wrong on
// stderr and returns it: nil on success and for -h, an error wrapping
// ErrUsage for a mistake in the command line, any other error for a
// failure.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	cmds := a.commands()
	var match *command
	n := 0
	for i := range cmds {
		words := strings.Fields(cmds[i].path)
		if len(words) > len(args) || len(words) <= n {
			continue
		}
		ok := true
		for j, w := range words {
			if args[j] != w {
				ok = false
				break
			}
		}
		if ok {
			match, n = &cmds[i], len(words)
		}
	}
	if match == nil {
		if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			a.usage(cmds)
			return nil
		}
		err := fmt.Errorf("%w: unknown command %q", ErrUsage, strings.Join(args, " "))
		fmt.Fprintf(stderr, "fleet-relay: unknown command %q\n\n", strings.Join(args, " "))
		a.usage(cmds)
		return err
	}
	if match.path != "serve" {
		// A change made by an admin subcommand is the CLI's: the store
		// writes its audit record (cloud/audit.go). serve's own changes
		// are the system's and carry no actor.
		ctx = cloud.WithActor(ctx, CLIActor())
	}
	err := match.run(ctx, args[n:], stdout)
	var help *helpError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &help):
		fmt.Fprint(stderr, help.text)
		return nil
	case errors.Is(err, flag.ErrHelp):
		return nil
	case errors.Is(err, ErrUsage):
		fmt.Fprintf(stderr, "fleet-relay %s: %v\n", match.path, err)
	default:
		fmt.Fprintf(stderr, "fleet-relay %s: %s\n", match.path, errorText(err))
	}
	return err
}

// helpError carries the flag usage text of a command run with -h.
type helpError struct{ text string }

func (e *helpError) Error() string { return "help requested" }
func (e *helpError) Unwrap() error { return flag.ErrHelp }

// errorText shows a domain error by its message (its code is for the API).
func errorText(err error) string {
	var e *cloud.Error
	if errors.As(err, &e) {
		if e.Err != nil {
			return e.Message + ": " + e.Err.Error()
		}
		return e.Message
	}
	return err.Error()
}

func (a *app) usage(cmds []command) {
	sorted := append([]command(nil), cmds...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].path < sorted[j].path })
	fmt.Fprintln(a.stderr, "usage: fleet-relay <command> [flags]   (every flag also reads FLEET_<FLAG>, e.g. FLEET_DB)")
	fmt.Fprintln(a.stderr, "\ncommands:")
	for _, c := range sorted {
		fmt.Fprintf(a.stderr, "  %-22s %s\n", c.path, c.usage)
	}
	fmt.Fprintln(a.stderr, "\nRun 'fleet-relay <command> -h' for a command's flags.")
}

// adminFlags is the flag set every admin command starts from: --db and
// --json. Commands add their own flags to FS, then call run.
type adminFlags struct {
	FS   *flag.FlagSet
	DB   string
	JSON bool
	// Create lets run create a missing database (org create); other
	// commands refuse a missing SQLite file, so that a mistyped --db does
	// not silently start an empty database.
	Create bool
	// Check, when set, validates the parsed flags before the store opens;
	// return a usage error (ErrUsage) for a bad value.
	Check func() error

	required []string
}

func newAdminFlags(path string) *adminFlags {
	f := &adminFlags{FS: flag.NewFlagSet("fleet-relay "+path, flag.ContinueOnError)}
	f.FS.StringVar(&f.DB, "db", "fleet.db", "SQLite database file, or a postgres:// URL (FLEET_DB keeps a password out of ps)")
	f.FS.BoolVar(&f.JSON, "json", false, "print JSON")
	return f
}

// String adds a string flag; a required one must not be empty.
func (f *adminFlags) String(name, usage string, required bool) *string {
	if required {
		f.required = append(f.required, name)
		usage += " (required)"
	}
	return f.FS.String(name, "", usage)
}

// output is what an admin command prints: v as JSON with --json, else the
// text human writes.
type output struct {
	v     any
	human func(w io.Writer)
}

// run parses args (parse), opens the store, runs do on it and prints its
// output. Every admin command but backup and store copy, which open no
// relay store, ends in it.
func (f *adminFlags) run(ctx context.Context, args []string, stdout io.Writer, do func(ctx context.Context, st *cloud.Stores) (output, error)) error {
	if err := f.parse(args); err != nil {
		return err
	}
	st, err := openStore(ctx, f.DB, storeOptions{Create: f.Create})
	if err != nil {
		return err
	}
	defer st.Close()
	out, err := do(ctx, st)
	if err != nil {
		return err
	}
	return f.print(stdout, out.v, out.human)
}

// runInOrg adds --org and runs do for that organization once it is known
// to exist: listing an unknown organization is not_found, not an empty list.
func (f *adminFlags) runInOrg(ctx context.Context, args []string, stdout io.Writer, do func(ctx context.Context, st *cloud.Stores, org string) (output, error)) error {
	org := f.String("org", "organization id", true)
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		if _, err := st.Org(ctx, *org); err != nil {
			return output{}, err
		}
		return do(ctx, st, *org)
	})
}

// parse parses args, then FLEET_ environment variables for flags not given,
// and checks the required flags and Check.
func (f *adminFlags) parse(args []string) error {
	if err := parseFlags(f.FS, args); err != nil {
		return err
	}
	for _, name := range f.required {
		if err := required(name, f.FS.Lookup(name).Value.String()); err != nil {
			return err
		}
	}
	if f.Check != nil {
		return f.Check()
	}
	return nil
}

// parseFlags parses args into fs with ff: command line first, then FLEET_
// environment variables (flag "rate-limit" reads FLEET_RATE_LIMIT).
// Positional arguments are a usage error.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := ff.Parse(fs, args, ff.WithEnvVarPrefix("FLEET")); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			var b strings.Builder
			fs.SetOutput(&b)
			fs.Usage()
			return &helpError{text: b.String()}
		}
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
	}
	return nil
}

// required returns a usage error naming the first empty flag.
func required(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if strings.TrimSpace(pairs[i+1]) == "" {
			return fmt.Errorf("%w: --%s is required", ErrUsage, pairs[i])
		}
	}
	return nil
}

// print writes v as indented JSON with --json, or calls human otherwise.
func (f *adminFlags) print(w io.Writer, v any, human func(w io.Writer)) error {
	if f.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	human(w)
	return nil
}

// printTable writes header and the rows that rows writes to tw, tab
// separated, as aligned columns.
func printTable(w io.Writer, header string, rows func(tw io.Writer)) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	rows(tw)
	tw.Flush()
}

// jsonTime formats t for JSON output: RFC 3339 UTC with milliseconds, or
// nil for zero.
func jsonTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format("2006-01-02T15:04:05.000Z")
	return &s
}

func humanTime(t time.Time, zero string) string {
	if t.IsZero() {
		return zero
	}
	return t.UTC().Format(time.RFC3339)
}

// CLIActor is the admin CLI as the actor of a change: the OS user who ran
// it, on this host.
func CLIActor() cloud.Actor {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	} else if v := os.Getenv("USER"); v != "" {
		name = v
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	return cloud.Actor{Kind: cloud.ActorCLI, ID: name, Name: name + "@" + host}
}
