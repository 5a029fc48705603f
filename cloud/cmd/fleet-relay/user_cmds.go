package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/password"
	"github.com/fleet/fleet/cloud/sqlite"
)

// The panel's users (docs/panel.md): user create, list, set-role, disable,
// reset-password. Passwords come from standard input only, never from the
// command line, where ps would show them.

// userJSON is how users are printed.
type userJSON struct {
	ID         string  `json:"id"`
	Email      string  `json:"email"`
	Role       string  `json:"role"`
	OrgID      string  `json:"orgId,omitempty"`
	DisabledAt *string `json:"disabledAt,omitempty"`
	CreatedAt  *string `json:"createdAt,omitempty"`
}

func userOut(u cloud.User) userJSON {
	return userJSON{ID: u.ID, Email: u.Email, Role: string(u.Role)}
}

// readPassword reads a new password from r: all of it, less one trailing
// newline (as docker login --password-stdin), then password.Validate.
func readPassword(r io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(bufio.NewReader(r), password.MaxBytes+3))
	if err != nil {
		return "", fmt.Errorf("read password from stdin: %w", err)
	}
	pw := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if pw == "" {
		return "", fmt.Errorf("%w: --password-stdin: standard input is empty (pipe the password in)", errUsage)
	}
	if err := password.Validate(pw); err != nil {
		return "", fmt.Errorf("%w: --password-stdin: %v", errUsage, err)
	}
	return pw, nil
}

// hashStdin reads a new password from r (readPassword) and hashes it.
func hashStdin(ctx context.Context, r io.Reader) (string, error) {
	pw, err := readPassword(r)
	if err != nil {
		return "", err
	}
	return password.NewHasher(password.Default, 1).Hash(ctx, pw)
}

// passwordStdin registers --password-stdin, which must be given.
func passwordStdin(f *adminFlags) *bool {
	return f.FS.Bool("password-stdin", false, "read the password from standard input (required; one trailing newline is dropped)")
}

func requirePasswordStdin(set bool) error {
	if !set {
		return fmt.Errorf("%w: --password-stdin is required (the password is never taken from the command line)", errUsage)
	}
	return nil
}

func (a *app) runUserCreate(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("user create")
	org := f.FS.String("org", "", "organization id (required)")
	email := f.FS.String("email", "", "email address, used to sign in (required)")
	role := f.FS.String("role", "", "OWNER, ADMIN, MEMBER or VIEWER (required)")
	stdin := passwordStdin(f)
	if err := f.parse(args); err != nil {
		return err
	}
	if err := required("org", *org, "email", *email, "role", *role); err != nil {
		return err
	}
	r, err := cloud.ParseRole(*role)
	if err != nil {
		return fmt.Errorf("%w: --role: %s", errUsage, cloud.ErrorMessage(err))
	}
	if err := requirePasswordStdin(*stdin); err != nil {
		return err
	}
	hash, err := hashStdin(ctx, a.stdin)
	if err != nil {
		return err
	}
	db, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	u, err := sqlite.NewUserService(db).CreateUser(ctx, cloud.NewUser{OrgID: *org, Email: *email, Role: r, PasswordHash: hash})
	if err != nil {
		return err
	}
	return f.print(stdout, userOut(u), func(w io.Writer) {
		fmt.Fprintf(w, "User created.\n  id:    %s\n  email: %s\n  role:  %s\nThey sign in to the panel at /panel/login with this email and the password given.\n", u.ID, u.Email, u.Role)
	})
}

func runUserList(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("user list")
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
	users, err := sqlite.NewUserService(db).ListUsers(ctx, *org)
	if err != nil {
		return err
	}
	out := make([]userJSON, 0, len(users))
	for _, u := range users {
		j := userOut(u)
		j.OrgID, j.DisabledAt, j.CreatedAt = u.OrgID, jsonTime(u.DisabledAt), jsonTime(u.CreatedAt)
		out = append(out, j)
	}
	return f.print(stdout, out, func(w io.Writer) {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tEMAIL\tROLE\tSTATUS\tCREATED")
		for _, u := range users {
			status := "active"
			if u.Disabled() {
				status = "disabled " + humanTime(u.DisabledAt, "")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", u.ID, u.Email, u.Role, status, humanTime(u.CreatedAt, ""))
		}
		tw.Flush()
	})
}

// changeUser opens the store, finds user id (in any organization) and
// applies change to it within its organization.
func changeUser(ctx context.Context, f *adminFlags, id string, change func(*sqlite.UserService, cloud.User) (cloud.User, error)) (cloud.User, error) {
	db, err := f.open(ctx)
	if err != nil {
		return cloud.User{}, err
	}
	defer db.Close()
	svc := sqlite.NewUserService(db)
	u, err := svc.UserByID(ctx, id)
	if err != nil {
		return cloud.User{}, err
	}
	return change(svc, u)
}

func runUserSetRole(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("user set-role")
	id := f.FS.String("id", "", "user id (required)")
	role := f.FS.String("role", "", "OWNER, ADMIN, MEMBER or VIEWER (required)")
	if err := f.parse(args); err != nil {
		return err
	}
	if err := required("id", *id, "role", *role); err != nil {
		return err
	}
	r, err := cloud.ParseRole(*role)
	if err != nil {
		return fmt.Errorf("%w: --role: %s", errUsage, cloud.ErrorMessage(err))
	}
	u, err := changeUser(ctx, f, *id, func(svc *sqlite.UserService, u cloud.User) (cloud.User, error) {
		return svc.SetUserRole(ctx, u.OrgID, u.ID, r)
	})
	if err != nil {
		return err
	}
	return f.print(stdout, userOut(u), func(w io.Writer) {
		fmt.Fprintf(w, "%s is now %s (from their next request).\n", u.Email, u.Role)
	})
}

func runUserDisable(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("user disable")
	id := f.FS.String("id", "", "user id (required)")
	if err := f.parse(args); err != nil {
		return err
	}
	if err := required("id", *id); err != nil {
		return err
	}
	u, err := changeUser(ctx, f, *id, func(svc *sqlite.UserService, u cloud.User) (cloud.User, error) {
		return svc.DisableUser(ctx, u.OrgID, u.ID)
	})
	if err != nil {
		return err
	}
	out := userOut(u)
	out.DisabledAt = jsonTime(u.DisabledAt)
	return f.print(stdout, out, func(w io.Writer) {
		fmt.Fprintf(w, "%s is disabled: they cannot sign in, and an open session ends on its next request.\n", u.Email)
	})
}

func (a *app) runUserResetPassword(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("user reset-password")
	id := f.FS.String("id", "", "user id (required)")
	stdin := passwordStdin(f)
	if err := f.parse(args); err != nil {
		return err
	}
	if err := required("id", *id); err != nil {
		return err
	}
	if err := requirePasswordStdin(*stdin); err != nil {
		return err
	}
	hash, err := hashStdin(ctx, a.stdin)
	if err != nil {
		return err
	}
	u, err := changeUser(ctx, f, *id, func(svc *sqlite.UserService, u cloud.User) (cloud.User, error) {
		return svc.SetUserPassword(ctx, u.OrgID, u.ID, hash)
	})
	if err != nil {
		return err
	}
	return f.print(stdout, userOut(u), func(w io.Writer) {
		fmt.Fprintf(w, "Password of %s changed; their open sessions end on their next request.\n", u.Email)
	})
}
