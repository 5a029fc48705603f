package panelbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// FreeAddr returns a loopback address no one listens on now.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// StartRelay runs `relay serve --db db --listen addr --log-level warn`
// with args, its output appended to dir/relay.log, and waits until its
// /readyz answers 200. stop interrupts it and waits for it to end.
func StartRelay(ctx context.Context, relay, addr, db, dir string, args ...string) (pid int, stop func(), err error) {
	logf, err := os.OpenFile(filepath.Join(dir, "relay.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, nil, err
	}
	cmd := exec.CommandContext(ctx, relay, append([]string{"serve", "--db", db, "--listen", addr, "--log-level", "warn"}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return 0, nil, fmt.Errorf("start %s: %w", relay, err)
	}
	stop = func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
	}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return cmd.Process.Pid, stop, nil
			}
		}
		if time.Now().After(end) {
			stop()
			return 0, nil, errors.New("the relay was not ready (/readyz) within 30 s")
		}
	}
}

// SignIn signs email in to the panel at base with password as a new
// session (its own cookie jar) over tr (nil: http.DefaultTransport).
func SignIn(tr http.RoundTripper, base, email, password string) (*http.Client, error) {
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Transport: tr, Timeout: 10 * time.Second}
	resp, err := c.PostForm(base+"/panel/login", url.Values{"email": {email}, "password": {password}})
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/panel/" {
		return nil, fmt.Errorf("sign in: %d at %s", resp.StatusCode, resp.Request.URL)
	}
	return c, nil
}
