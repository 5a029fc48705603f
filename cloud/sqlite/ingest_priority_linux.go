package sqlite

import (
	"fmt"
	"runtime"
	"syscall"
)

// writerNice is the nice value the ingest writer's thread asks for: the
// writer is the one serial stage of the agent endpoint, and under CPU
// contention the thousands of connection goroutines (and anything else on
// the machine) would otherwise take most of the CPU it needs to keep up.
const writerNice = -10

// raiseWriterPriority locks the calling goroutine to its OS thread (for
// good: the thread ends with the goroutine) and gives that thread a
// higher scheduling priority, which its calls into SQLite run with. Linux
// allows it with CAP_SYS_NICE (or a matching RLIMIT_NICE); without, the
// writer keeps the default priority, the error says so, and the goroutine
// is unlocked again: a locked goroutine costs a hand-over of its thread's
// P each time it waits and resumes, worth paying only for the priority.
func raiseWriterPriority() error {
	runtime.LockOSThread()
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), writerNice); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("sqlite: writer thread priority (nice %d): %w", writerNice, err)
	}
	return nil
}
