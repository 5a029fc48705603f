// Package loadgenproc runs `fleet-loadgen agents` (simulated agents against
// relays run by someone else, bench/cmd/fleet-loadgen) as a process and
// drives it through its stdin, for the benchmarks that start their own
// relays: fleet-clusterbench and fleet-alertbench.
package loadgenproc

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Swarm is a fleet-loadgen agents process, driven through its stdin.
type Swarm struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan map[string]any
	done  chan struct{}
}

// Start runs fleet-loadgen agents with one agent per token against
// url (ws://...) offering rate heartbeats a second (and extra flags of
// fleet-loadgen agents), and waits until every agent is connected.
func Start(bin, url, tokensFile string, rate float64, extra ...string) (*Swarm, error) {
	cmd := exec.Command(bin, append([]string{"agents", "--url", url, "--tokens", tokensFile, "--rate", fmt.Sprint(rate)}, extra...)...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Swarm{cmd: cmd, in: in, lines: make(chan map[string]any, 16), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				s.lines <- m
			}
		}
		cmd.Wait()
		close(s.done)
	}()
	m, err := s.Next(5 * time.Minute)
	if err == nil && m["event"] != "connected" {
		err = fmt.Errorf("fleet-loadgen agents: %v", m)
	}
	if err != nil {
		s.Kill()
		return nil, err
	}
	return s, nil
}

// Kill stops the load generator at once.
func (s *Swarm) Kill() {
	s.cmd.Process.Kill()
	<-s.done
}

// Next returns the load generator's next line.
func (s *Swarm) Next(d time.Duration) (map[string]any, error) {
	select {
	case m := <-s.lines:
		return m, nil
	case <-s.done:
		return nil, fmt.Errorf("fleet-loadgen agents exited: %v", s.cmd.ProcessState)
	case <-time.After(d):
		return nil, fmt.Errorf("fleet-loadgen agents: no answer within %s", d)
	}
}

// Do sends a command (mark, report, status, stop) and decodes the
// answer into v.
func (s *Swarm) Do(cmd string, v any) error {
	if _, err := io.WriteString(s.in, cmd+"\n"); err != nil {
		return fmt.Errorf("fleet-loadgen agents: %w", err)
	}
	m, err := s.Next(3 * time.Minute)
	if err != nil {
		return err
	}
	raw, _ := json.Marshal(m)
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("fleet-loadgen agents: %s: %w", raw, err)
	}
	return nil
}

// Pid is the process's id.
func (s *Swarm) Pid() int { return s.cmd.Process.Pid }
