package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/tick"
)

// relayStats is what the relay process serves at /stats.
type relayStats struct {
	Link  agentlink.Stats    `json:"link"`
	Store sqlite.IngestStats `json:"store"`
}

// runRelay runs the agent endpoint on db until ctx ends, wired as
// fleet-relay serve wires it: store, endpoint, sweeper, the point
// compactor every 30 s (cloud/relay's pointCompactEvery, with the default
// compaction); shutdown closes the
// agents, then the store, then the database. It prints "listening ADDR" on
// stdout once it accepts connections.
func runRelay(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	dbPath := fs.String("db", "", "SQLite database file")
	listen := fs.String("listen", "127.0.0.1:0", "listen address")
	logPath := fs.String("log", "", "log file (default: stderr, warnings only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if _, err := raiseNoFile(); err != nil {
		return fmt.Errorf("raise RLIMIT_NOFILE: %w", err)
	}
	logOut := os.Stderr
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		logOut = f
	}
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	db, err := sqlite.Open(ctx, *dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := sqlite.NewAgentStore(db, log)
	if err != nil {
		return err
	}
	defer store.Close()
	link := agentlink.New(agentlink.Config{Store: store, Logger: log})
	mux := http.NewServeMux()
	mux.Handle(protocol.Path, link.Handler())
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(relayStats{Link: link.Stats(), Store: store.Stats()})
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go link.Run(runCtx)
	go tick.NowAndEvery(runCtx, 30*time.Second, func() {
		if _, err := db.CompactPoints(runCtx, cloud.DefaultPointCompaction(time.Now())); err != nil && runCtx.Err() == nil {
			log.Error("point compaction failed", "err", err)
		}
	})
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	fmt.Printf("listening %s\n", ln.Addr())
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer scancel()
	hs.Shutdown(sctx)
	if err := link.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
