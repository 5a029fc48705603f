package relay

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/protocol"
)

// releaseJSON is how the release commands print a release.
type releaseJSON struct {
	ID        string    `json:"id"`
	OrgID     string    `json:"orgId"`
	Version   string    `json:"version"`
	Arch      string    `json:"arch"`
	Size      int64     `json:"size"`
	SHA256    string    `json:"sha256"`
	Signature string    `json:"signature"`
	CreatedAt time.Time `json:"createdAt"`
}

func toReleaseJSON(r cloud.Release) releaseJSON {
	return releaseJSON{ID: r.ID, OrgID: r.OrgID, Version: r.Version, Arch: r.Arch, Size: r.Size, SHA256: r.SHA256,
		Signature: r.Signature, CreatedAt: r.CreatedAt}
}

// runReleaseAdd stores a signed agent binary as a release of an
// organization (DESIGN.md "Fleet operations"): agents of the organization
// download it from any relay once a rollout names its version.
func runReleaseAdd(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("release add")
	org := f.String("org", "organization id", true)
	version := f.String("version", "the version the binary reports (fleet-agent --version)", true)
	arch := f.String("arch", "the binary's architecture: amd64, arm64 or armv7", true)
	file := f.String("file", "the fleet-agent binary (at most 64 MiB)", true)
	sigFile := f.String("sig", "its minisign signature (minisign -S writes FILE.minisig)", true)
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		sig, err := readSignature(*sigFile)
		if err != nil {
			return output{}, err
		}
		bin, err := os.Open(*file)
		if err != nil {
			return output{}, err
		}
		defer bin.Close()
		r, err := st.Releases().AddRelease(ctx, cloud.NewRelease{OrgID: *org, Version: *version, Arch: *arch, Signature: sig}, bin)
		if err != nil {
			return output{}, err
		}
		return output{toReleaseJSON(r), func(w io.Writer) {
			fmt.Fprintf(w, "Release added.\n  id:      %s\n  version: %s\n  arch:    %s\n  size:    %d bytes\n  sha256:  %s\n",
				r.ID, r.Version, r.Arch, r.Size, r.SHA256)
			fmt.Fprintf(w, "Agents verify its signature against their --update-key before running it.\n")
		}}, nil
	})
}

// readSignature reads a minisign signature file, at most
// protocol.MaxCommandSignature bytes (AddRelease checks what it holds).
func readSignature(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, protocol.MaxCommandSignature+1))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > protocol.MaxCommandSignature {
		return "", cloud.Errorf(cloud.EINVALID, "signature: %s is larger than %d bytes; is it a minisign signature file?", path, protocol.MaxCommandSignature)
	}
	return string(b), nil
}

// runReleaseList lists an organization's releases, oldest first.
func runReleaseList(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("release list")
	return f.runInOrg(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores, org string) (output, error) {
		rs, err := st.Releases().ListReleases(ctx, org)
		if err != nil {
			return output{}, err
		}
		out := make([]releaseJSON, 0, len(rs))
		for _, r := range rs {
			out = append(out, toReleaseJSON(r))
		}
		return output{out, func(w io.Writer) {
			if len(rs) == 0 {
				fmt.Fprintln(w, "No releases.")
				return
			}
			printTable(w, "ID\tVERSION\tARCH\tSIZE\tSHA256\tCREATED", func(tw io.Writer) {
				for _, r := range rs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.Version, r.Arch, r.Size, r.SHA256, humanTime(r.CreatedAt, ""))
				}
			})
		}}, nil
	})
}
