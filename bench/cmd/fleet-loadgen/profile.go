package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
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

// idleMem is where the relay's memory goes with every agent connected and
// idle, from runtime.MemStats (the end of /debug/pprof/heap?debug=1) and the
// goroutine count (/debug/pprof/goroutine?debug=1).
type idleMem struct {
	heapInuse, stackInuse, sys, other int64
	goroutines                        int64
}

// idleMemory reads the relay's idleMem.
func (p *relayProc) idleMemory() (idleMem, error) {
	var m idleMem
	err := p.read("/debug/pprof/heap?debug=1", func(body io.Reader) error {
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			for prefix, v := range map[string]*int64{"# HeapInuse = ": &m.heapInuse, "# Stack = ": &m.stackInuse, "# Sys = ": &m.sys, "# OtherSys = ": &m.other} {
				if s, ok := strings.CutPrefix(sc.Text(), prefix); ok {
					fmt.Sscan(s, v)
				}
			}
		}
		return sc.Err()
	})
	if err != nil {
		return m, err
	}
	err = p.read("/debug/pprof/goroutine?debug=1", func(body io.Reader) error {
		sc := bufio.NewScanner(body)
		if sc.Scan() {
			_, err := fmt.Sscanf(sc.Text(), "goroutine profile: total %d", &m.goroutines)
			return err
		}
		return sc.Err()
	})
	return m, err
}

// saveIdleProfiles writes the relay's heap profile (after a collection),
// its goroutine stacks and its MemStats to dir, as relay.heap.pprof,
// relay.goroutine.txt and relay.heap.txt: where the bytes of idle
// connections go.
func saveIdleProfiles(dir string, relay *relayProc) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for file, path := range map[string]string{
		"relay.heap.pprof":    "/debug/pprof/heap?gc=1",
		"relay.heap.txt":      "/debug/pprof/heap?debug=1",
		"relay.goroutine.txt": "/debug/pprof/goroutine?debug=1",
	} {
		err := relay.read(path, func(body io.Reader) error {
			f, err := os.Create(filepath.Join(dir, file))
			if err != nil {
				return err
			}
			_, err = io.Copy(f, body)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}
