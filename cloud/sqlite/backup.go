package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
)

// ErrBackupExists is returned by Backup when the output file already exists:
// a backup never overwrites a file.
var ErrBackupExists = errors.New("backup file already exists")

// BackupResult describes a finished backup.
type BackupResult struct {
	// Path is the backup file.
	Path string
	// Bytes is its size.
	Bytes int64
}

// Backup writes a consistent copy of the database file src to out with
// VACUUM INTO, on a read-only connection of its own: the copy is the
// database as of one read transaction (everything committed before it
// began, nothing after), taken while a relay keeps writing. The WAL is read
// too, so the copy holds commits not yet checkpointed. The copy is written
// to a temporary file (mode 0600) beside out and then linked to out, which
// fails with ErrBackupExists when out exists: nothing is ever overwritten,
// and out never holds a half-written copy. src must exist.
func Backup(ctx context.Context, src, out string) (BackupResult, error) {
	if src == "" || out == "" {
		return BackupResult{}, errors.New("sqlite: backup needs a source and an output path")
	}
	if _, err := os.Stat(src); err != nil {
		return BackupResult{}, fmt.Errorf("sqlite: backup source: %w", err)
	}
	if _, err := os.Lstat(out); err == nil {
		return BackupResult{}, fmt.Errorf("sqlite: %s: %w", out, ErrBackupExists)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return BackupResult{}, fmt.Errorf("sqlite: backup output: %w", err)
	}
	// VACUUM INTO writes into an empty existing file, keeping its mode:
	// CreateTemp makes it 0600, so the copy (it holds token and key
	// hashes and webhook secrets) is never readable by others, not even
	// while it is written.
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-*")
	if err != nil {
		return BackupResult{}, fmt.Errorf("sqlite: backup output: %w", err)
	}
	tmpPath := tmp.Name()
	tmp.Close()
	defer os.Remove(tmpPath)

	q := url.Values{}
	q.Set("mode", "ro")
	q.Set("_busy_timeout", "10000")
	db, err := sql.Open("sqlite3", "file:"+src+"?"+q.Encode())
	if err != nil {
		return BackupResult{}, fmt.Errorf("sqlite: backup open %s: %w", src, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, tmpPath); err != nil {
		return BackupResult{}, fmt.Errorf("sqlite: backup %s: %w", src, err)
	}
	if err := syncFile(tmpPath); err != nil {
		return BackupResult{}, err
	}
	// link(2) refuses an existing target: the check above was only for a
	// clear early error, this is the one that holds under a race.
	if err := os.Link(tmpPath, out); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return BackupResult{}, fmt.Errorf("sqlite: %s: %w", out, ErrBackupExists)
		}
		return BackupResult{}, fmt.Errorf("sqlite: backup output: %w", err)
	}
	st, err := os.Stat(out)
	if err != nil {
		return BackupResult{}, fmt.Errorf("sqlite: backup output: %w", err)
	}
	if err := syncFile(filepath.Dir(out)); err != nil {
		return BackupResult{}, err
	}
	return BackupResult{Path: out, Bytes: st.Size()}, nil
}

// syncFile fsyncs a file or directory.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sqlite: sync %s: %w", path, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sqlite: sync %s: %w", path, err)
	}
	return nil
}
