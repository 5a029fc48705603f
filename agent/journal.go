package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fleet/fleet/shared/protocol"
)

// commandsFile is the command journal in the state dir.
const commandsFile = "commands.json"

// maxJournal bounds the commands the journal keeps (the newest).
const maxJournal = 256

// journalEntry is one command the agent took and its last status.
type journalEntry struct {
	ID     string                 `json:"id"`
	Kind   string                 `json:"kind"`
	Status protocol.CommandStatus `json:"status"`
	At     time.Time              `json:"at"`
}

// commandJournal keeps the ids of the commands the agent took, each with
// its last status, in StateDir/commands.json (written whole, atomically,
// with fsync before a command runs), so that a command is executed at
// most once across reconnects, restarts, updates and reboots: a command
// sent again is answered with its journaled status.
type commandJournal struct {
	path string
	mu   sync.Mutex
	list []journalEntry // oldest first
}

// openJournal reads the journal in stateDir. An unreadable one is kept
// aside (commands.json.bad) and the journal starts empty: the error says
// so.
func openJournal(stateDir string) (*commandJournal, error) {
	j := &commandJournal{path: filepath.Join(stateDir, commandsFile)}
	b, err := os.ReadFile(j.path)
	if os.IsNotExist(err) {
		return j, nil
	}
	if err == nil {
		err = json.Unmarshal(b, &j.list)
	}
	if err != nil {
		j.list = nil
		bad := j.path + ".bad"
		if rerr := os.Rename(j.path, bad); rerr != nil {
			return j, fmt.Errorf("command journal unreadable (%w) and not set aside: %v", err, rerr)
		}
		return j, fmt.Errorf("command journal unreadable, kept as %s; starting empty: %w", bad, err)
	}
	return j, nil
}

// lookup returns the journaled entry of id.
func (j *commandJournal) lookup(id string) (journalEntry, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, e := range j.list {
		if e.ID == id {
			return e, true
		}
	}
	return journalEntry{}, false
}

// take journals a command not seen before with its first status and
// reports true; for a command already journaled it changes nothing and
// returns false with the journaled entry. The journal is on disk when it
// returns true.
func (j *commandJournal) take(cmd protocol.Command, st protocol.CommandStatus, at time.Time) (journalEntry, bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, e := range j.list {
		if e.ID == cmd.ID {
			return e, false, nil
		}
	}
	e := journalEntry{ID: cmd.ID, Kind: cmd.Kind, Status: st, At: at}
	j.list = append(j.list, e)
	return e, true, j.writeLocked()
}

// set journals st as the last status of its command (adding the command
// when the journal lost it).
func (j *commandJournal) set(kind string, st protocol.CommandStatus, at time.Time) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := range j.list {
		if j.list[i].ID == st.ID {
			j.list[i].Status, j.list[i].At = st, at
			return j.writeLocked()
		}
	}
	j.list = append(j.list, journalEntry{ID: st.ID, Kind: kind, Status: st, At: at})
	return j.writeLocked()
}

// unfinished returns the entries of kind whose last status does not end
// them.
func (j *commandJournal) unfinished(kind string) []journalEntry {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []journalEntry
	for _, e := range j.list {
		if e.Kind == kind && !protocol.CommandFinished(e.Status.State) {
			out = append(out, e)
		}
	}
	return out
}

// writeLocked writes the newest maxJournal entries to a temporary file,
// fsyncs it, renames it over the journal and fsyncs the directory.
func (j *commandJournal) writeLocked() error {
	if len(j.list) > maxJournal {
		j.list = append(j.list[:0:0], j.list[len(j.list)-maxJournal:]...)
	}
	b, err := json.Marshal(j.list)
	if err != nil {
		return err
	}
	tmp := j.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("command journal: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, j.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("command journal: %w", err)
	}
	if d, err := os.Open(filepath.Dir(j.path)); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return fmt.Errorf("command journal: sync dir: %w", err)
		}
	}
	return nil
}
