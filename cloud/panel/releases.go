package panel

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/fleet/fleet/cloud"
)

// Rollouts → Releases: the agent binaries the relay stores, which rollouts
// send; they are added with `fleet-relay release add` (signed with
// minisign), never through the panel.

type releaseRow struct {
	cloud.Release
	Size, Short string
}

type releasesData struct {
	Releases []releaseRow
	OrgID    string
	Archs    string
}

// releasesPage lists the organization's releases, newest first, and the
// command that adds one.
func (s *Server) releasesPage(w http.ResponseWriter, r *http.Request, rq *request) {
	rels, err := s.cfg.Releases.ListReleases(r.Context(), rq.User.OrgID)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	slices.SortStableFunc(rels, func(a, b cloud.Release) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(a.Arch, b.Arch))
	})
	d := releasesData{OrgID: rq.User.OrgID, Archs: strings.Join(cloud.ReleaseArchs, "|")}
	for _, rel := range rels {
		d.Releases = append(d.Releases, releaseRow{Release: rel, Size: byteSize(rel.Size), Short: rel.SHA256[:min(12, len(rel.SHA256))]})
	}
	s.render(w, r, rq, http.StatusOK, "releases", "Releases", d)
}

// byteSize says n bytes for people: "812 B", "14.2 MiB".
func byteSize(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
