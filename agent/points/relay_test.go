//go:build cgo

// The relay side of this test is the relay's SQLite store, which needs cgo;
// the gateway cross builds (make test-cross, CGO_ENABLED=0) leave it out.

package points_test

import (
	"context"
	"log/slog"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/agent"
	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/test/rig/linktest"
	"github.com/fleet/fleet/test/rig/sqlitetest"
	"github.com/fleet/fleet/test/rig/testwait"
)

// recordsSeen is the relay's SQLite agent store, keeping the records the
// endpoint handed it.
type recordsSeen struct {
	cloud.AgentStoreCloser
	mu    sync.Mutex
	items []protocol.Record
}

func (s *recordsSeen) Records(ctx context.Context, in agentlink.RecordsIn) (agentlink.RecordsOut, error) {
	out, err := s.AgentStoreCloser.Records(ctx, in)
	if err == nil {
		s.mu.Lock()
		s.items = append(s.items, in.Items...)
		s.mu.Unlock()
	}
	return out, err
}

func (s *recordsSeen) samples() []protocol.PointSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []protocol.PointSample
	for _, r := range s.items {
		if r.Points != nil {
			out = append(out, r.Points.Samples...)
		}
	}
	return out
}

// TestAgentRecordsPointsToARelay: fleet-agent on the simulator (--hw sim)
// samples its gpio inputs' levels; the relay's agent endpoint (cloud/agentlink over
// loopback, a SQLite store) takes the point records it sends, with the
// points' ids, each level change once.
func TestAgentRecordsPointsToARelay(t *testing.T) {
	db := sqlitetest.Open(t)
	inner, err := sqlite.NewAgentStore(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	store := &recordsSeen{AgentStoreCloser: inner}
	_, base := linktest.Serve(t, agentlink.Config{Store: store, SweepInterval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	org := sqlitetest.Org(t, db, "acme")
	_, token := sqlitetest.Device(t, db, cloud.NewDevice{OrgID: org.ID, Name: "gw", SerialNumber: "SN-1", Model: "IG-500"})

	cfg, err := agent.ParseConfig([]string{"--relay", base, "--token", token, "--hw", "sim", "--model", "IG-500",
		"--state-dir", t.TempDir(), "--heartbeat", "1s", "--metrics-interval", "1h",
		"--proc-root", "../metrics/testdata/normal/proc", "--sys-root", "../metrics/testdata/normal/sys",
		"--dev-root", "none", "--passthrough-listen", "none"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	// The simulator's inputs toggle every second, read each second (the
	// level's interval).
	testwait.For(t, "four samples of each gpio input's level", 40*time.Second, func() bool {
		n := map[string]int{}
		for _, s := range store.samples() {
			n[s.Point]++
		}
		return n["gpio-1.level"] >= 4 && n["gpio-2.level"] >= 4 && n["gpio-3.level"] >= 4 && n["gpio-4.level"] >= 4
	})
	byPoint := map[string][]protocol.PointSample{}
	for _, s := range store.samples() {
		byPoint[s.Point] = append(byPoint[s.Point], s)
	}
	var ids []string
	for id := range byPoint {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if len(ids) != 4 || ids[0] != "gpio-1.level" || ids[3] != "gpio-4.level" {
		t.Fatalf("point ids %v, want gpio-1.level .. gpio-4.level", ids)
	}
	for id, ss := range byPoint {
		for i, s := range ss {
			if s.Error != "" || (s.Value != 0 && s.Value != 1) {
				t.Fatalf("%s: sample %+v", id, s)
			}
			// A level that toggles each period is recorded at each change,
			// once: every sample differs from the one before it.
			if i > 0 && (s.Value == ss[i-1].Value || !s.At.After(ss[i-1].At.Time)) {
				t.Fatalf("%s: sample %d %+v after %+v", id, i, s, ss[i-1])
			}
		}
	}
}
