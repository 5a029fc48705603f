// Package mailpit runs a throwaway Mailpit (github.com/axllent/mailpit), a
// real SMTP server whose HTTP API lists what it received, for the tests of
// e-mail notifications: on its own loopback ports, with its database in a
// temporary directory, stopped when the test ends. Stop and Restart keep the
// ports, so a test can take the mail server away and bring it back.
//
// The binary is built with `go install` (pinned Version) into a cache
// directory the first time it is needed (`make mailpit` does it ahead of
// the suites), so a fresh machine runs the same tests as a prepared one.
package mailpit

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleet/fleet/test/rig/fleetproc"
	"github.com/fleet/fleet/test/rig/testnet"
)

// Version is the Mailpit the tests run.
const Version = "v1.33.1"

// Options configure a Server.
type Options struct {
	// CertFile and KeyFile, when set, make the server offer STARTTLS with
	// that certificate; RequireTLS then refuses mail without it.
	CertFile, KeyFile string
	RequireTLS        bool
}

// Server is one mailpit process.
type Server struct {
	tb        testing.TB
	bin       string
	dir       string
	opts      Options
	smtp, api int
	proc      *fleetproc.Proc
}

// Start starts mailpit on free loopback ports; it is stopped when the test
// ends.
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	bin, err := Binary()
	if err != nil {
		tb.Fatal(err)
	}
	s := &Server{tb: tb, bin: bin, dir: tb.TempDir(), opts: opts}
	for attempt := 0; ; attempt++ {
		s.smtp, s.api = testnet.FreePort(tb), testnet.FreePort(tb)
		err := s.start()
		if err == nil {
			break
		}
		if attempt == 4 {
			tb.Fatalf("mailpit: %v", err)
		}
	}
	tb.Cleanup(s.Stop)
	return s
}

// SMTPAddr is the SMTP server's host:port.
func (s *Server) SMTPAddr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.smtp)) }

// APIURL is the base URL of its HTTP API.
func (s *Server) APIURL() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.api))
}

// Restart starts the server again on the same ports after Stop; the
// messages received before are kept.
func (s *Server) Restart() {
	s.tb.Helper()
	if err := s.start(); err != nil {
		s.tb.Fatalf("mailpit restart: %v", err)
	}
}

func (s *Server) start() error {
	log := filepath.Join(s.dir, "mailpit.log")
	args := []string{"--smtp", s.SMTPAddr(), "--listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.api)),
		"--database", filepath.Join(s.dir, "mailpit.db"), "--smtp-auth-accept-any",
		"--smtp-disable-rdns", "--disable-version-check"}
	switch {
	case s.opts.CertFile != "":
		args = append(args, "--smtp-tls-cert", s.opts.CertFile, "--smtp-tls-key", s.opts.KeyFile)
		if s.opts.RequireTLS {
			args = append(args, "--smtp-require-starttls")
		} else {
			args = append(args, "--smtp-auth-allow-insecure")
		}
	default:
		args = append(args, "--smtp-auth-allow-insecure")
	}
	proc, err := fleetproc.Run("mailpit", log, nil, s.bin, args...)
	if err != nil {
		return err
	}
	s.proc = proc
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if proc.Exited() {
			b, _ := os.ReadFile(log)
			return fmt.Errorf("exited: %s", tail(b))
		}
		if _, err := s.messages(); err == nil {
			if c, err := net.DialTimeout("tcp", s.SMTPAddr(), time.Second); err == nil {
				c.Close()
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	proc.Kill()
	return fmt.Errorf("no API on %s within 20s", s.APIURL())
}

// Stop stops the server (SIGTERM, then SIGKILL after 5s) and waits.
func (s *Server) Stop() {
	if s.proc != nil {
		s.proc.Shutdown(5 * time.Second)
	}
}

// Address is a mailbox in a message.
type Address struct {
	Name    string `json:"Name"`
	Address string `json:"Address"`
}

// Message is a received message as the API lists it, with its text body
// (filled by Messages).
type Message struct {
	ID        string    `json:"ID"`
	MessageID string    `json:"MessageID"`
	From      Address   `json:"From"`
	To        []Address `json:"To"`
	Subject   string    `json:"Subject"`
	Created   time.Time `json:"Created"`
	Text      string    `json:"-"`
}

// Messages returns every message received, oldest first, with its text.
func (s *Server) Messages() ([]Message, error) {
	ms, err := s.messages()
	if err != nil {
		return nil, err
	}
	for i := range ms {
		var full struct {
			Text string `json:"Text"`
		}
		if err := getJSON(s.APIURL()+"/api/v1/message/"+url.PathEscape(ms[i].ID), &full); err != nil {
			return nil, err
		}
		ms[i].Text = full.Text
	}
	return ms, nil
}

func (s *Server) messages() ([]Message, error) {
	var page struct {
		Messages []Message `json:"messages"`
	}
	if err := getJSON(s.APIURL()+"/api/v1/messages?limit=1000", &page); err != nil {
		return nil, err
	}
	// The API lists newest first.
	for i, j := 0, len(page.Messages)-1; i < j; i, j = i+1, j-1 {
		page.Messages[i], page.Messages[j] = page.Messages[j], page.Messages[i]
	}
	return page.Messages, nil
}

var client = &http.Client{Timeout: 5 * time.Second}

func getJSON(u string, v any) error {
	resp, err := client.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

var binMu sync.Mutex

// Binary returns the path of mailpit Version: MAILPIT when set, else the
// one in the cache directory (os.UserCacheDir()/fleet-tools/mailpit-
// Version), built there with `go install` when missing (under a file lock:
// test binaries of several packages may ask at once).
func Binary() (string, error) {
	if p := os.Getenv("MAILPIT"); p != "" {
		return p, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "fleet-tools", "mailpit-"+Version)
	bin := filepath.Join(dir, "mailpit")
	binMu.Lock()
	defer binMu.Unlock()
	if st, err := os.Stat(bin); err == nil && st.Mode()&0o111 != 0 {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if st, err := os.Stat(bin); err == nil && st.Mode()&0o111 != 0 {
		return bin, nil
	}
	cmd := exec.Command("go", "install", "github.com/axllent/mailpit@"+Version)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install mailpit %s: %v\n%s", Version, err, tail(out))
	}
	return bin, nil
}
