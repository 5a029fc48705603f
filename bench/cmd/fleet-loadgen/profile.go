package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"
)

// startProfiles starts CPU profiles of this process and of the relay (its
// /debug/pprof/profile endpoint) for about d, written to dir as
// loadgen.cpu.pprof and relay.cpu.pprof; stop ends this process's profile
// and waits for the relay's. An empty dir profiles nothing.
func startProfiles(dir string, relay *relayProc, d time.Duration) (stop func() error, err error) {
	if dir == "" {
		return func() error { return nil }, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	own, err := os.Create(filepath.Join(dir, "loadgen.cpu.pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(own); err != nil {
		own.Close()
		return nil, err
	}
	secs := max(1, int(d.Seconds()))
	relayDone := make(chan error, 1)
	go func() {
		c := http.Client{Timeout: d + 30*time.Second}
		resp, err := c.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", relay.addr, secs))
		if err != nil {
			relayDone <- err
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(filepath.Join(dir, "relay.cpu.pprof"))
		if err != nil {
			relayDone <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		relayDone <- err
	}()
	return func() error {
		pprof.StopCPUProfile()
		if err := own.Close(); err != nil {
			return err
		}
		return <-relayDone
	}, nil
}
