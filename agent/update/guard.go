package update

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// GuardEnv, set in a process's environment, makes it the guard of a
// trial: the old binary started as a child just before the agent
// executes the new one (the guard outlives the exec, its parent PID stays
// the agent's). It watches the trial so that the old binary runs again
// even with no supervisor at all: when the agent process dies (the new
// binary crashed, exited at once, was killed) while the journal still
// holds an update, the guard executes the binary path (the old binary
// until the commit) with the agent's arguments and environment, and that
// process's Boot finishes or undoes the update; when the new binary gives
// no verdict within healthFor and a margin (it hangs), the guard journals
// a rollback and kills it. The guard ends once the journal is cleared.
// Under systemd the unit's control group holds the guard too: when the
// agent dies systemd stops the guard and starts the binary path itself.
const GuardEnv = "FLEET_UPDATE_GUARD"

// hangMargin is how long after healthFor the guard waits for a verdict.
const hangMargin = 20 * time.Second

// guardPoll is how often the guard looks at its parent and the journal.
const guardPoll = 100 * time.Millisecond

// RunGuardIfAsked turns this process into a trial's guard when GuardEnv
// is set, and then never returns; otherwise it returns at once. The agent
// calls it first thing in main, before anything with side effects (Boot
// calls it too).
func RunGuardIfAsked() {
	dir := os.Getenv(GuardEnv)
	if dir == "" {
		return
	}
	// The agent's PID comes from the environment: the agent may be gone
	// already (reparented, Getppid would name another process).
	parent, err := strconv.Atoi(os.Getenv(guardPIDEnv))
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleet-agent update guard: %s: %v\n", guardPIDEnv, err)
		os.Exit(1)
	}
	os.Exit(guard(files{dir: dir}, parent))
}

// guardPIDEnv passes the agent's PID to its guard.
const guardPIDEnv = "FLEET_UPDATE_GUARD_PID"

func guard(f files, parent int) int {
	fmt.Fprintf(os.Stderr, "fleet-agent update guard: watching process %d\n", parent)
	var hangAt time.Time
	for {
		time.Sleep(guardPoll)
		j, err := f.readJournal()
		if err != nil {
			fmt.Fprintf(os.Stderr, "fleet-agent update guard: %v\n", err)
			return 1
		}
		if j == nil {
			return 0 // decided: the journal is cleared
		}
		if os.Getppid() != parent {
			// The agent died during the update: start the binary path
			// (Boot of that process finishes or undoes the update).
			fmt.Fprintf(os.Stderr, "fleet-agent update guard: process %d ended during the update (step %s); starting %s\n", parent, j.Step, j.Binary)
			env := withoutEnv(withoutEnv(os.Environ(), GuardEnv), guardPIDEnv)
			err := syscall.Exec(j.Binary, os.Args, env)
			fmt.Fprintf(os.Stderr, "fleet-agent update guard: exec %s: %v\n", j.Binary, err)
			return 1
		}
		if j.Step != stepTrial {
			hangAt = time.Time{}
			continue
		}
		if hangAt.IsZero() {
			hangAt = time.Now().Add(healthFor(j.order()) + hangMargin)
		}
		if time.Now().After(hangAt) {
			j.Step, j.Reason = stepRolledBack, fmt.Sprintf("version %s gave no verdict within healthFor %s and %s (it hangs)", j.order().Version, healthFor(j.order()), hangMargin)
			if err := f.writeJournal(j); err != nil {
				fmt.Fprintf(os.Stderr, "fleet-agent update guard: %v\n", err)
			}
			fmt.Fprintf(os.Stderr, "fleet-agent update guard: %s; killing process %d\n", j.Reason, parent)
			syscall.Kill(parent, syscall.SIGKILL)
			hangAt = time.Now().Add(time.Hour)
		}
	}
}

// startGuard starts the guard: binary (the old one) with this process's
// arguments and GuardEnv set. It returns the guard's PID.
func startGuard(binary string, f files) (int, error) {
	cmd := exec.Command(binary, os.Args[1:]...)
	cmd.Args[0] = os.Args[0]
	cmd.Env = append(withoutEnv(withoutEnv(os.Environ(), GuardEnv), guardPIDEnv),
		GuardEnv+"="+f.dir, guardPIDEnv+"="+strconv.Itoa(os.Getpid()))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("update guard: %w", err)
	}
	return cmd.Process.Pid, nil
}

// reap waits for a guard that is this process's child (after an exec the
// new program inherits it), so that it leaves no zombie.
func reap(pid int) {
	if pid <= 0 {
		return
	}
	go func() {
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
	}()
}

func withoutEnv(env []string, name string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, name+"=") {
			out = append(out, e)
		}
	}
	return out
}

// resolve returns path with symlinks resolved (path itself on error).
func resolve(path string) string {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		return p
	}
	return path
}
