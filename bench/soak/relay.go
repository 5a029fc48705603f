package soak

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// relay runs the fleet-relay process and restarts it whenever it ends:
// after a kill -9 of the soak's, or on its own (counted as unexpected).
type relay struct {
	bin, db, listen, metrics, caFile string
	log                              io.Writer

	mu         sync.Mutex
	cmd        *exec.Cmd
	generation int
	killed     bool // the current process was kill -9'ed by the soak
	kills      int
	restarts   int
	unexpected int
	exited     chan struct{} // closed when the current process ended
	stopping   bool
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// start starts the relay and waits until it is ready (/readyz: its store
// is open and migrated).
func (r *relay) start(ctx context.Context) error {
	r.mu.Lock()
	cmd := exec.Command(r.bin, "serve", "--db", r.db, "--listen", r.listen, "--metrics-listen", r.metrics,
		"--rate-limit", "1000000", "--webhook-allow-private", "--webhook-ca", r.caFile,
		"--webhook-backoff", "200ms,500ms,1s,2s,3s", "--webhook-timeout", "3s",
		"--agent-default-heartbeat", "10s", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = r.log, r.log
	if err := cmd.Start(); err != nil {
		r.mu.Unlock()
		return fmt.Errorf("start relay: %w", err)
	}
	r.cmd, r.killed = cmd, false
	exited := make(chan struct{})
	r.exited = exited
	r.mu.Unlock()
	go func() {
		cmd.Wait()
		close(exited)
	}()
	return waitHTTP(ctx, "http://"+r.listen+"/readyz", exited)
}

// supervise restarts the relay whenever it ends, until ctx ends.
func (r *relay) supervise(ctx context.Context, logf func(string, ...any)) {
	for {
		r.mu.Lock()
		exited := r.exited
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-exited:
		}
		r.mu.Lock()
		if r.stopping {
			r.mu.Unlock()
			return
		}
		if !r.killed {
			r.unexpected++
			logf("relay exited on its own (%v); restarting", r.cmd.ProcessState)
		}
		r.generation++
		r.restarts++
		r.mu.Unlock()
		for ctx.Err() == nil {
			if err := r.start(ctx); err == nil {
				break
			} else {
				logf("relay restart: %v", err)
				time.Sleep(time.Second)
			}
		}
	}
}

// kill9 kills the relay process with SIGKILL; supervise restarts it.
func (r *relay) kill9() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	r.killed = true
	r.kills++
	r.cmd.Process.Signal(syscall.SIGKILL)
}

// stop ends the relay with SIGTERM (a clean shutdown) and waits.
func (r *relay) stop() {
	r.mu.Lock()
	r.stopping = true
	cmd, exited := r.cmd, r.exited
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(45 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
}

// sample reads the current relay process's RSS and goroutines.
func (r *relay) sample() (gen int, rss int64, goroutines int, ok bool) {
	r.mu.Lock()
	cmd, gen := r.cmd, r.generation
	r.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return 0, 0, 0, false
	}
	p, err := procfs.NewProc(cmd.Process.Pid)
	if err != nil {
		return 0, 0, 0, false
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, 0, 0, false
	}
	goroutines, err = scrapeGauge("http://"+r.metrics+"/metrics", "go_goroutines")
	if err != nil {
		return 0, 0, 0, false
	}
	return gen, int64(st.VmRSS), goroutines, true
}

func scrapeGauge(url, name string) (int, error) {
	client := &http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("%s: no %s", url, name)
}

// waitHTTP waits until url answers 200, the process ends, or 60 s pass.
func waitHTTP(ctx context.Context, url string, exited <-chan struct{}) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("relay exited before answering %s", url)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("relay did not answer %s within 60 s", url)
}

// writeFile writes data to path, mode 0600.
func writeFile(path string, data []byte) error { return os.WriteFile(path, data, 0o600) }
