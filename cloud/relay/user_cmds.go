package relay

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/password"
)

// The panel's users (docs/panel.md): user create, list, set-role, disable,
// reset-password, reset-2fa. Passwords come from standard input only, never from the
// command line, where ps would show them.

// userJSON is how users are printed.
type userJSON struct {
	ID         string  `json:"id"`
	Email      string  `json:"email"`
	Role       string  `json:"role"`
	OrgID      string  `json:"orgId,omitempty"`
	DisabledAt *string `json:"disabledAt,omitempty"`
	CreatedAt  *string `json:"createdAt,omitempty"`
	// MustChangePassword: a temporary password not yet replaced.
	MustChangePassword bool `json:"mustChangePassword,omitempty"`
}

func userOut(u cloud.User) userJSON {
	return userJSON{ID: u.ID, Email: u.Email, Role: string(u.Role), MustChangePassword: u.MustChangePassword}
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
		return "", fmt.Errorf("%w: --password-stdin: standard input is empty (pipe the password in)", ErrUsage)
	}
	if err := password.Validate(pw); err != nil {
		return "", fmt.Errorf("%w: --password-stdin: %v", ErrUsage, err)
	}
	return pw, nil
}

// passwordFromStdin registers --password-stdin on f and, in f's Check,
// requires it, reads the password from stdin and hashes it into *hash.
func passwordFromStdin(ctx context.Context, f *adminFlags, stdin io.Reader, hash *string, check func() error) {
	set := f.FS.Bool("password-stdin", false, "read the password from standard input (required; one trailing newline is dropped)")
	f.Check = func() error {
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		if !*set {
			return fmt.Errorf("%w: --password-stdin is required (the password is never taken from the command line)", ErrUsage)
		}
		pw, err := readPassword(stdin)
		if err != nil {
			return err
		}
		*hash, err = password.NewHasher(password.Default, 1).Hash(ctx, pw)
		return err
	}
}

// roleFlag registers --role and returns a function that parses it (call
// it in f's Check).
func roleFlag(f *adminFlags) func(*cloud.Role) error {
	s := f.String("role", "OWNER, ADMIN, MEMBER or VIEWER", true)
	return func(r *cloud.Role) error {
		var err error
		if *r, err = cloud.ParseRole(*s); err != nil {
			return fmt.Errorf("%w: --role: %s", ErrUsage, cloud.ErrorMessage(err))
		}
		return nil
	}
}

// temporaryFlag registers --temporary: the password given is the user's
// only until their next sign-in, where the panel has them choose their own.
func temporaryFlag(f *adminFlags) *bool {
	return f.FS.Bool("temporary", false, "the password is temporary: the user must choose their own at their next panel sign-in")
}

// mustChangeNote says, for a temporary password, that the user replaces it.
func mustChangeNote(u cloud.User) string {
	if !u.MustChangePassword {
		return ""
	}
	return "; the password is temporary: they choose their own at their next sign-in"
}

func (a *app) runUserCreate(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("user create")
	org := f.String("org", "organization id", true)
	email := f.String("email", "email address, used to sign in", true)
	parseRole := roleFlag(f)
	temporary := temporaryFlag(f)
	var role cloud.Role
	var hash string
	passwordFromStdin(ctx, f, a.stdin, &hash, func() error { return parseRole(&role) })
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		u, err := st.Panel.CreateUser(ctx, cloud.NewUser{OrgID: *org, Email: *email, Role: role, PasswordHash: hash, MustChangePassword: *temporary})
		if err != nil {
			return output{}, err
		}
		return output{userOut(u), func(w io.Writer) {
			fmt.Fprintf(w, "User created.\n  id:    %s\n  email: %s\n  role:  %s\nThey sign in to the panel at /panel/login with this email and the password given%s.\n", u.ID, u.Email, u.Role, mustChangeNote(u))
		}}, nil
	})
}

func runUserList(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("user list")
	return f.runInOrg(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores, org string) (output, error) {
		users, err := st.Panel.ListUsers(ctx, org)
		if err != nil {
			return output{}, err
		}
		out := make([]userJSON, 0, len(users))
		for _, u := range users {
			j := userOut(u)
			j.OrgID, j.DisabledAt, j.CreatedAt = u.OrgID, jsonTime(u.DisabledAt), jsonTime(u.CreatedAt)
			out = append(out, j)
		}
		return output{out, func(w io.Writer) {
			printTable(w, "ID\tEMAIL\tROLE\tSTATUS\tCREATED", func(tw io.Writer) {
				for _, u := range users {
					status := "active"
					if u.Disabled() {
						status = "disabled " + humanTime(u.DisabledAt, "")
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", u.ID, u.Email, u.Role, status, humanTime(u.CreatedAt, ""))
				}
			})
		}}, nil
	})
}

// changeUser runs f on the store: it finds user id (in any organization),
// applies change within the user's organization and prints the result
// with message.
func changeUser(ctx context.Context, f *adminFlags, args []string, stdout io.Writer, id *string,
	change func(st cloud.PanelStore, u cloud.User) (cloud.User, error), message func(u cloud.User) string) error {
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		u, err := st.Panel.UserByID(ctx, *id)
		if err != nil {
			return output{}, err
		}
		if u, err = change(st.Panel, u); err != nil {
			return output{}, err
		}
		out := userOut(u)
		out.DisabledAt = jsonTime(u.DisabledAt)
		return output{out, func(w io.Writer) { fmt.Fprintln(w, message(u)) }}, nil
	})
}

func runUserSetRole(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("user set-role")
	id := f.String("id", "user id", true)
	parseRole := roleFlag(f)
	var role cloud.Role
	f.Check = func() error { return parseRole(&role) }
	return changeUser(ctx, f, args, stdout, id, func(st cloud.PanelStore, u cloud.User) (cloud.User, error) {
		return st.SetUserRole(ctx, u.OrgID, u.ID, role)
	}, func(u cloud.User) string {
		return fmt.Sprintf("%s is now %s (from their next request).", u.Email, u.Role)
	})
}

func runUserDisable(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("user disable")
	id := f.String("id", "user id", true)
	return changeUser(ctx, f, args, stdout, id, func(st cloud.PanelStore, u cloud.User) (cloud.User, error) {
		return st.DisableUser(ctx, u.OrgID, u.ID)
	}, func(u cloud.User) string {
		return u.Email + " is disabled: they cannot sign in, and an open session ends on its next request."
	})
}

func (a *app) runUserResetPassword(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("user reset-password")
	id := f.String("id", "user id", true)
	temporary := temporaryFlag(f)
	var hash string
	passwordFromStdin(ctx, f, a.stdin, &hash, nil)
	return changeUser(ctx, f, args, stdout, id, func(st cloud.PanelStore, u cloud.User) (cloud.User, error) {
		if *temporary {
			return st.SetTemporaryPassword(ctx, u.OrgID, u.ID, hash)
		}
		return st.SetUserPassword(ctx, u.OrgID, u.ID, hash)
	}, func(u cloud.User) string {
		return "Password of " + u.Email + " changed; their open sessions end on their next request" + mustChangeNote(u) + "."
	})
}

func runUserReset2FA(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("user reset-2fa")
	id := f.String("id", "user id", true)
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		u, err := st.Panel.UserByID(ctx, *id)
		if err != nil {
			return output{}, err
		}
		was, err := st.Panel.ResetTwoFactor(ctx, u.OrgID, u.ID)
		if err != nil {
			return output{}, err
		}
		out := struct {
			userJSON
			Reset bool `json:"reset"`
		}{userOut(u), was}
		return output{out, func(w io.Writer) {
			if !was {
				fmt.Fprintf(w, "%s has no two-factor sign-in; nothing changed.\n", u.Email)
				return
			}
			fmt.Fprintf(w, "Two-factor sign-in of %s is reset: their key and recovery codes are deleted. They sign in with their password%s.\n",
				u.Email, " and, if their organization requires it, enrol again at once")
		}}, nil
	})
}
