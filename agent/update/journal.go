package update

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/fleet/fleet/shared/protocol"
)

// Journal steps (journal.Step), in the order an update takes them.
const (
	// stepDownloading: the command was taken; the release is being
	// downloaded into StateDir/update/<releaseId>.part.
	stepDownloading = "downloading"
	// stepInstalling: the release verified; the previous binary and
	// <binary>.new are being written. The binary path is untouched.
	stepInstalling = "installing"
	// stepTrial: <binary>.new is running (or about to) on trial; the
	// binary path still holds the old binary.
	stepTrial = "trial"
	// stepCommitting: the trial passed; <binary>.new is being renamed
	// over the binary path.
	stepCommitting = "committing"
	// stepRolledBack: the trial failed; the old binary (still at the
	// binary path) reports it and clears the journal.
	stepRolledBack = "rolled_back"
)

// journal is StateDir/update/journal.json: what an interrupted update
// needs to be finished or undone by the next start.
type journal struct {
	Step    string           `json:"step"`
	Command protocol.Command `json:"command"`
	// Binary is the agent's binary path (the old one until the commit).
	Binary      string `json:"binary"`
	FromVersion string `json:"fromVersion"`
	// FailingBefore are the channels and points that read with an error
	// just before the swap; any other one failing at the end of the trial
	// fails it.
	FailingBefore []string `json:"failingBefore,omitempty"`
	// Attempts counts the starts of the download and install (a restart
	// while downloading or installing starts them again), Trials the
	// starts of the new binary.
	Attempts int `json:"attempts"`
	Trials   int `json:"trials,omitempty"`
	// GuardPID is the guard process watching the trial (guard.go).
	GuardPID int    `json:"guardPid,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

func (j *journal) order() *protocol.UpdateOrder { return j.Command.Update }

// files are the paths of one state directory and binary.
type files struct{ dir string }

func (f files) journal() string              { return filepath.Join(f.dir, "journal.json") }
func (f files) previous() string             { return filepath.Join(f.dir, "previous") }
func (f files) part(releaseID string) string { return filepath.Join(f.dir, releaseID+".part") }

// newPath is where the new binary is written beside binary.
func newPath(binary string) string { return binary + ".new" }

// readJournal returns the journal, nil when there is none.
func (f files) readJournal() (*journal, error) {
	b, err := os.ReadFile(f.journal())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("update journal: %w", err)
	}
	var j journal
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("update journal %s: %w", f.journal(), err)
	}
	if j.Command.Update == nil || j.Binary == "" {
		return nil, fmt.Errorf("update journal %s: no order or binary", f.journal())
	}
	return &j, nil
}

// writeJournal replaces the journal atomically and durably (temp file,
// fsync, rename, fsync of the directory).
func (f files) writeJournal(j *journal) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return fmt.Errorf("update journal: %w", err)
	}
	if err := writeFileSync(f.journal(), b, 0o600); err != nil {
		return fmt.Errorf("update journal: %w", err)
	}
	return nil
}

// clearJournal removes the journal durably.
func (f files) clearJournal() error {
	if err := os.Remove(f.journal()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("update journal: %w", err)
	}
	return syncDir(f.dir)
}

// removeParts removes every download left in the directory.
func (f files) removeParts() {
	m, _ := filepath.Glob(filepath.Join(f.dir, "*.part"))
	for _, p := range m {
		os.Remove(p)
	}
}

// writeFileSync writes b to path atomically: path.tmp written and synced,
// renamed over path, the directory synced.
func writeFileSync(path string, b []byte, mode os.FileMode) error {
	return replaceFile(path, mode, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// copyFileSync copies src over dst atomically (see writeFileSync).
func copyFileSync(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return replaceFile(dst, mode, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

// replaceFile writes path.tmp with fill, syncs it, renames it over path
// and syncs the directory: path is always either its old or its whole new
// content, also after a power cut.
func replaceFile(path string, mode os.FileMode, fill func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	err = fill(f)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}

// renameSync renames src over dst and syncs dst's directory.
func renameSync(src, dst string) error {
	if err := os.Rename(src, dst); err != nil {
		return err
	}
	return syncDir(filepath.Dir(dst))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}

// fileSHA256 returns the hex SHA-256 of a file.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// sameSHA256 reports whether path holds the content of hex digest want.
func sameSHA256(path, want string) bool {
	got, err := fileSHA256(path)
	return err == nil && strings.EqualFold(got, want)
}

// fault kills the process with SIGKILL when FLEET_UPDATE_FAULT names
// step: the tests' way to cut the power at each step of an update.
func fault(step string) {
	if os.Getenv(FaultEnv) == step {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

// FaultEnv is the environment variable naming the step after which the
// updater kills its own process (tests only; see FaultSteps).
const FaultEnv = "FLEET_UPDATE_FAULT"

// FaultSteps are the steps FLEET_UPDATE_FAULT may name, in the order an
// update passes them (docs/updates.md).
func FaultSteps() []string {
	return []string{"downloaded", "verified", "installing", "previous-saved", "new-written",
		"guard-started", "trial-journaled", "trial-started", "committing", "committed", "rolled-back"}
}
