package sqlstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/ids"
)

// Releases (issue 28): cloud.ReleaseService on ReleaseTables, written once
// for both stores. A release is a row of releases and its binary in
// chunks of cloud.ReleaseChunkBytes in release_chunks, written in the one
// transaction that adds it (migration 0015_releases), so that every relay
// sharing the database serves it.

// ReleaseTables are the release queries.
type ReleaseTables interface {
	// InsertRelease stores r and, in the same transaction, the chunks that
	// fill puts (chunk n holds bytes [n, n+1) × cloud.ReleaseChunkBytes);
	// fill returns the binary's size and SHA-256 (hex), stored in r. An
	// organization that has r's version and arch is ECONFLICT, before
	// fill runs; an unknown organization ENOTFOUND.
	InsertRelease(ctx context.Context, r cloud.Release, fill func(put func(n int, data []byte) error) (int64, string, error)) (cloud.Release, error)
	// ReleaseRows lists the organization's releases, oldest first.
	ReleaseRows(ctx context.Context, orgID string) ([]cloud.Release, error)
	// ReleaseRow reads the organization's release id, or ENOTFOUND.
	ReleaseRow(ctx context.Context, orgID, id string) (cloud.Release, error)
	// ReleaseChunks calls each, in order, for chunks first to last of the
	// organization's release id (those that exist).
	ReleaseChunks(ctx context.Context, orgID, id string, first, last int64, each func(n int64, data []byte) error) error
}

// ReleaseService implements cloud.ReleaseService.
type ReleaseService struct{ Tables Tables }

var _ cloud.ReleaseService = (*ReleaseService)(nil)

// AddRelease implements cloud.ReleaseService: the binary is read, hashed
// and stored chunk by chunk while the transaction that adds the release is
// open, so that no more than a chunk of it is in memory.
func (s *ReleaseService) AddRelease(ctx context.Context, nr cloud.NewRelease, body io.Reader) (cloud.Release, error) {
	if err := nr.Check(); err != nil {
		return cloud.Release{}, err
	}
	r := cloud.Release{ID: ids.New(), OrgID: nr.OrgID, Version: nr.Version, Arch: nr.Arch, Signature: nr.Signature,
		CreatedAt: s.Tables.Now().UTC().Truncate(time.Millisecond)}
	return s.Tables.InsertRelease(ctx, r, func(put func(n int, data []byte) error) (int64, string, error) {
		return storeChunks(body, put)
	})
}

// storeChunks reads body (at most cloud.MaxReleaseBytes, not empty) into
// chunks of cloud.ReleaseChunkBytes given to put, and returns its size
// and SHA-256 (hex).
func storeChunks(body io.Reader, put func(n int, data []byte) error) (int64, string, error) {
	h := sha256.New()
	buf := make([]byte, cloud.ReleaseChunkBytes)
	in := io.LimitReader(body, cloud.MaxReleaseBytes+1)
	var size int64
	for n := 0; ; n++ {
		k, err := io.ReadFull(in, buf)
		if k > 0 {
			if size += int64(k); size > cloud.MaxReleaseBytes {
				return 0, "", cloud.Errorf(cloud.EINVALID, "binary: larger than %d MiB", cloud.MaxReleaseBytes>>20)
			}
			h.Write(buf[:k])
			if err := put(n, buf[:k]); err != nil {
				return 0, "", err
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return 0, "", fmt.Errorf("read the binary: %w", err)
		}
	}
	if size == 0 {
		return 0, "", cloud.Errorf(cloud.EINVALID, "binary: empty")
	}
	return size, hex.EncodeToString(h.Sum(nil)), nil
}

// ListReleases implements cloud.ReleaseService.
func (s *ReleaseService) ListReleases(ctx context.Context, orgID string) ([]cloud.Release, error) {
	return s.Tables.ReleaseRows(ctx, orgID)
}

// Release implements cloud.ReleaseService.
func (s *ReleaseService) Release(ctx context.Context, orgID, id string) (cloud.Release, error) {
	return s.Tables.ReleaseRow(ctx, orgID, id)
}

// ReadRelease implements cloud.ReleaseService. It reads the chunks that
// [off, off+len(p)) spans, whole: a caller reading whole chunks at their
// offsets reads each once.
func (s *ReleaseService) ReadRelease(ctx context.Context, orgID, id string, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, cloud.Errorf(cloud.EINVALID, "offset: negative")
	}
	r, err := s.Tables.ReleaseRow(ctx, orgID, id)
	if err != nil {
		return 0, err
	}
	if off >= r.Size {
		return 0, io.EOF
	}
	want := int64(len(p))
	if want > r.Size-off {
		want = r.Size - off
	}
	if want == 0 {
		return 0, nil
	}
	const c = cloud.ReleaseChunkBytes
	first, last := off/c, (off+want-1)/c
	next, got := first, 0
	err = s.Tables.ReleaseChunks(ctx, orgID, id, first, last, func(n int64, data []byte) error {
		if n != next {
			return fmt.Errorf("release %s: chunk %d missing", id, next)
		}
		next++
		lo := max(off-n*c, 0)
		if lo > int64(len(data)) {
			return fmt.Errorf("release %s: chunk %d short", id, n)
		}
		got += copy(p[got:want], data[lo:])
		return nil
	})
	if err == nil && int64(got) < want {
		err = fmt.Errorf("release %s: %d of %d bytes at %d stored", id, got, want, off)
	}
	if err != nil {
		return got, s.Tables.Wrap("read release", err)
	}
	if want < int64(len(p)) {
		return got, io.EOF
	}
	return got, nil
}

// ReleaseNotFound is ENOTFOUND for release id.
func ReleaseNotFound(id string) error {
	return cloud.Errorf(cloud.ENOTFOUND, "release %q not found", id)
}

// ReleaseColumns are the columns ScanRelease reads.
const ReleaseColumns = `id, org_id, version, arch, size, sha256, signature, created_at`

// ScanRelease reads a row of ReleaseColumns.
func ScanRelease(row Row) (cloud.Release, error) {
	var r cloud.Release
	var created int64
	err := row.Scan(&r.ID, &r.OrgID, &r.Version, &r.Arch, &r.Size, &r.SHA256, &r.Signature, &created)
	r.CreatedAt = time.UnixMilli(created).UTC()
	return r, err
}

// InsertRelease implements ReleaseTables.
func (s *Store) InsertRelease(ctx context.Context, r cloud.Release, fill func(put func(n int, data []byte) error) (int64, string, error)) (cloud.Release, error) {
	err := s.Tx(ctx, func(tx Querier) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM orgs WHERE id = ?`, r.OrgID).Scan(&one); errors.Is(err, sql.ErrNoRows) {
			return OrgNotFound(r.OrgID)
		} else if err != nil {
			return err
		}
		var have string
		err := tx.QueryRow(ctx, `SELECT id FROM releases WHERE org_id = ? AND version = ? AND arch = ?`, r.OrgID, r.Version, r.Arch).Scan(&have)
		if err == nil {
			return cloud.Errorf(cloud.ECONFLICT, "release %s for %s exists already (%s)", r.Version, r.Arch, have)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO releases (`+ReleaseColumns+`) VALUES (?, ?, ?, ?, 0, '', ?, ?)`,
			r.ID, r.OrgID, r.Version, r.Arch, r.Signature, r.CreatedAt.UnixMilli()); err != nil {
			if s.IsUnique(err) {
				return cloud.Errorf(cloud.ECONFLICT, "release %s for %s exists already", r.Version, r.Arch)
			}
			return err
		}
		size, sum, err := fill(func(n int, data []byte) error {
			_, err := tx.Exec(ctx, `INSERT INTO release_chunks (release_id, n, data) VALUES (?, ?, ?)`, r.ID, n, data)
			return err
		})
		if err != nil {
			return err
		}
		r.Size, r.SHA256 = size, sum
		if _, err = tx.Exec(ctx, `UPDATE releases SET size = ?, sha256 = ? WHERE id = ?`, size, sum, r.ID); err != nil {
			return err
		}
		return s.audit(ctx, tx, r.OrgID, cloud.ActionReleaseAdded, cloud.AuditTarget{Kind: cloud.TargetRelease, ID: r.ID},
			map[string]any{"version": r.Version, "arch": r.Arch, "size": r.Size, "sha256": r.SHA256})
	})
	if err != nil {
		return cloud.Release{}, s.Wrap("add release", err)
	}
	return r, nil
}

// ReleaseRows implements ReleaseTables.
func (s *Store) ReleaseRows(ctx context.Context, orgID string) ([]cloud.Release, error) {
	out, err := Collect(ctx, s.R, ScanRelease, `SELECT `+ReleaseColumns+` FROM releases WHERE org_id = ? ORDER BY created_at, id`, orgID)
	return out, s.Wrap("releases", err)
}

// ReleaseRow implements ReleaseTables.
func (s *Store) ReleaseRow(ctx context.Context, orgID, id string) (cloud.Release, error) {
	if !ids.Valid(id) {
		return cloud.Release{}, ReleaseNotFound(id)
	}
	r, err := ScanRelease(s.R.QueryRow(ctx, `SELECT `+ReleaseColumns+` FROM releases WHERE id = ? AND org_id = ?`, id, orgID))
	if errors.Is(err, sql.ErrNoRows) {
		return cloud.Release{}, ReleaseNotFound(id)
	}
	return r, s.Wrap("release", err)
}

// ReleaseChunks implements ReleaseTables.
func (s *Store) ReleaseChunks(ctx context.Context, orgID, id string, first, last int64, each func(n int64, data []byte) error) error {
	return Each(ctx, s.R, `SELECT c.n, c.data FROM release_chunks c JOIN releases r ON r.id = c.release_id
		WHERE c.release_id = ? AND r.org_id = ? AND c.n BETWEEN ? AND ? ORDER BY c.n`, []any{id, orgID, first, last}, func(row Row) error {
		var n int64
		var data []byte
		if err := row.Scan(&n, &data); err != nil {
			return err
		}
		return each(n, data)
	})
}
