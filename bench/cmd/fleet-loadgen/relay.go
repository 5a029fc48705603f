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
	"runtime/metrics"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/relaygc"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/tick"
)

// relayStats is what the relay process serves at /stats.
type relayStats struct {
	Link  agentlink.Stats    `json:"link"`
	Store sqlite.IngestStats `json:"store"`
	// Checkpoints are the background checkpointer's counts.
	Checkpoints sqlite.CheckpointStats `json:"checkpoints"`
	Runtime     runtimeStats           `json:"runtime"`
}

// runtimeStats are the relay's garbage collector counters (runtime/metrics:
// reading them stops nothing), and its policy.
type runtimeStats struct {
	GCCycles   uint64  `json:"gcCycles"`   // collections completed so far
	GCCPU      float64 `json:"gcCPU"`      // seconds of CPU the collector used so far (mark and pauses)
	AssistCPU  float64 `json:"assistCPU"`  // of which mark assists, paid by allocating goroutines
	Allocated  uint64  `json:"allocated"`  // bytes allocated on the heap so far
	HeapGoal   uint64  `json:"heapGoal"`   // the heap size at which the next collection ends
	LiveHeap   uint64  `json:"liveHeap"`   // the heap marked live by the last collection
	StackBytes uint64  `json:"stackBytes"` // goroutine stacks
	Policy     string  `json:"policy"`
}

// runtimeSamples are the runtime/metrics runtimeStats reads, in order.
var runtimeSamples = []string{"/gc/cycles/total:gc-cycles", "/cpu/classes/gc/total:cpu-seconds", "/cpu/classes/gc/mark/assist:cpu-seconds",
	"/gc/heap/allocs:bytes", "/gc/heap/goal:bytes", "/gc/heap/live:bytes", "/memory/classes/heap/stacks:bytes"}

func readRuntime(policy string) runtimeStats {
	s := make([]metrics.Sample, len(runtimeSamples))
	for i, name := range runtimeSamples {
		s[i].Name = name
	}
	metrics.Read(s)
	u := func(i int) uint64 {
		if s[i].Value.Kind() == metrics.KindUint64 {
			return s[i].Value.Uint64()
		}
		return 0
	}
	f := func(i int) float64 {
		if s[i].Value.Kind() == metrics.KindFloat64 {
			return s[i].Value.Float64()
		}
		return 0
	}
	return runtimeStats{GCCycles: u(0), GCCPU: f(1), AssistCPU: f(2), Allocated: u(3), HeapGoal: u(4), LiveHeap: u(5), StackBytes: u(6), Policy: policy}
}

// runRelay runs the agent endpoint on db until ctx ends, wired as
// fleet-relay serve wires it: the garbage collector's policy
// (cloud/relaygc, the same flags), store, endpoint, sweeper, the point
// compactor every 30 s (cloud/relay's pointCompactEvery, with the default
// compaction); shutdown closes the
// agents, then the store, then the database. It prints "listening ADDR" on
// stdout once it accepts connections.
func runRelay(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	dbPath := fs.String("db", "", "SQLite database file")
	listen := fs.String("listen", "127.0.0.1:0", "listen address")
	logPath := fs.String("log", "", "log file (default: stderr, warnings only)")
	memLimit := fs.String("memory-limit", relaygc.Auto, "the soft memory limit, as fleet-relay serve's --memory-limit")
	gcPercent := fs.Int("gc-percent", 0, "GOGC, as fleet-relay serve's --gc-percent")
	if err := fs.Parse(args); err != nil {
		return err
	}
	gc, err := relaygc.Resolve(*memLimit, *gcPercent)
	if err != nil {
		return err
	}
	gc.Apply()
	policy := gc.String()
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
		json.NewEncoder(w).Encode(relayStats{Link: link.Stats(), Store: store.Stats(), Checkpoints: db.CheckpointStats(), Runtime: readRuntime(policy)})
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
