package sqlstore

import (
	"context"
	"io"

	"github.com/fleet/fleet/cloud"
)

// Releases (issue 28, lane releases): cloud.ReleaseService on
// ReleaseTables, written once for both stores. CONTRACT STUB: the releases
// lane replaces it.

// ReleaseTables are the release queries.
type ReleaseTables interface{}

// ReleaseService implements cloud.ReleaseService.
type ReleaseService struct{ Tables Tables }

// AddRelease implements cloud.ReleaseService.
func (s *ReleaseService) AddRelease(ctx context.Context, nr cloud.NewRelease, body io.Reader) (cloud.Release, error) {
	return cloud.Release{}, errStub
}

// ListReleases implements cloud.ReleaseService.
func (s *ReleaseService) ListReleases(ctx context.Context, orgID string) ([]cloud.Release, error) {
	return nil, errStub
}

// Release implements cloud.ReleaseService.
func (s *ReleaseService) Release(ctx context.Context, orgID, id string) (cloud.Release, error) {
	return cloud.Release{}, errStub
}

// ReadRelease implements cloud.ReleaseService.
func (s *ReleaseService) ReadRelease(ctx context.Context, orgID, id string, p []byte, off int64) (int, error) {
	return 0, errStub
}
