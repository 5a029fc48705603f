//go:build cgo

// The relay side of this test is a relay on SQLite, which needs cgo; the
// gateway cross builds (make test-cross, CGO_ENABLED=0) leave it out.

package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/agent"
	"github.com/fleet/fleet/cloud/relay"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/logbuf"
	"github.com/fleet/fleet/test/rig/testwait"
)

// relayCLI runs a fleet-relay admin command on db with --json and decodes
// what it prints into v.
func relayCLI(t *testing.T, v any, args ...string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := relay.Run(context.Background(), append(args, "--json"), strings.NewReader(""), &out, &errOut); err != nil {
		t.Fatalf("fleet-relay %q: %v: %s", args, err, errOut.String())
	}
	if err := json.Unmarshal(out.Bytes(), v); err != nil {
		t.Fatalf("fleet-relay %q: %v in %q", args, err, out.String())
	}
}

// TestClaimThenConnect: a gateway whose configuration file holds a claim
// token and its serial number as a file to read (one file for a whole
// batch) registers itself at a real relay (the first relay listed is down:
// it moves to the next with its backoff), keeps the device token in its
// state directory (0600), connects with it and is ONLINE under its serial
// number with the claim's tags; started again after the claim was revoked
// it uses the kept token and claims nothing; a second gateway is refused
// with the relay's reason and keeps nothing; --token wins over both; no
// token is in the agent's log.
func TestClaimThenConnect(t *testing.T) {
	db := filepath.Join(t.TempDir(), "relay.db")
	m := relay.NewMain(io.Discard)
	if err := m.ParseFlags([]string{"--db", db, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	var org struct{ ID string }
	relayCLI(t, &org, "org", "create", "--db", db, "--name", "Acme")
	var claim struct{ ID, Token string }
	relayCLI(t, &claim, "claim", "create", "--db", db, "--org", org.ID, "--model", "IG-500", "--tags", "line-3")

	dir := t.TempDir()
	serialFile := filepath.Join(dir, "serial-number")
	if err := os.WriteFile(serialFile, []byte("GW-0042\x00\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "agent.yaml")
	yaml := "relay:\n  - http://127.0.0.1:1\n  - http://" + m.Addr() + "\nclaim: " + claim.Token + "\nserial: file:" + serialFile + "\n"
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	config := func(stateDir string, extra ...string) agent.Config {
		t.Helper()
		cfg, err := agent.ParseConfig(append([]string{"--config", conf, "--hw", "sim", "--model", "IG-500", "--state-dir", stateDir,
			"--heartbeat", "1s", "--metrics-interval", "1h", "--backoff-min", "10ms", "--backoff-max", "50ms",
			"--proc-root", "metrics/testdata/normal/proc", "--sys-root", "metrics/testdata/normal/sys",
			"--dev-root", "none", "--passthrough-listen", "none"}, extra...), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	var logs logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	status := func() (resource.Device, bool) {
		var ds []resource.Device
		relayCLI(t, &ds, "device", "list", "--db", db, "--org", org.ID)
		for _, d := range ds {
			if d.SerialNumber == "GW-0042" {
				return d, true
			}
		}
		return resource.Device{}, false
	}
	run := func(cfg agent.Config, want resource.DeviceStatus) {
		t.Helper()
		a, err := agent.New(cfg, log, agent.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		testwait.For(t, "the claimed gateway "+string(want), 20*time.Second, func() bool {
			d, ok := status()
			return ok && d.Status == want
		})
	}

	state := filepath.Join(dir, "state")
	cfg := config(state)
	if agent.HasStoredToken(state) || cfg.Token != "" {
		t.Fatalf("a fresh gateway holds a token")
	}
	if err := agent.Provision(context.Background(), &cfg, log); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(state, agent.DeviceTokenFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("device token file: %v %v", fi, err)
	}
	kept, err := agent.StoredToken(state)
	if err != nil || kept != cfg.Token || !strings.HasPrefix(kept, "fleet_dt_") || !agent.HasStoredToken(state) {
		t.Fatalf("kept %q, using %q: %v", kept, cfg.Token, err)
	}
	if entries, _ := os.ReadDir(state); len(entries) != 1 {
		t.Errorf("the state directory holds %v, want the token file alone", entries)
	}
	run(cfg, resource.StatusOnline)
	d, _ := status()
	if d.Name != "GW-0042" || d.Model != "IG-500" || strings.Join(d.Tags, ",") != "line-3" {
		t.Errorf("claimed device %+v", d)
	}

	// Started again once the claim is revoked: the kept token, no claim.
	relayCLI(t, &struct{}{}, "claim", "revoke", "--db", db, "--id", claim.ID)
	testwait.For(t, "the gateway offline after its agent stopped", 20*time.Second, func() bool {
		d, _ := status()
		return d.Status == resource.StatusOffline
	})
	cfg = config(state)
	if err := agent.Provision(context.Background(), &cfg, log); err != nil || cfg.Token != kept {
		t.Fatalf("restart: %v, token kept %v", err, cfg.Token == kept)
	}
	run(cfg, resource.StatusOnline)

	// Another gateway of the batch, after the revocation: refused with the
	// relay's reason, nothing kept.
	other := filepath.Join(dir, "other")
	cfg = config(other)
	err = agent.Provision(context.Background(), &cfg, log)
	var refused *agent.ClaimRefusedError
	if !errors.As(err, &refused) || refused.Status != 401 || !strings.Contains(err.Error(), "revoked") || cfg.Token != "" || agent.HasStoredToken(other) {
		t.Errorf("claim through a revoked claim: %v (token %q)", err, cfg.Token)
	}

	// --token wins.
	cfg = config(state, "--token", "fleet_dt_given")
	if err := agent.Provision(context.Background(), &cfg, log); err != nil || cfg.Token != "fleet_dt_given" {
		t.Errorf("--token given: %v, %q", err, cfg.Token)
	}

	for _, secret := range []string{strings.TrimPrefix(claim.Token, "fleet_ct_"), strings.TrimPrefix(kept, "fleet_dt_")} {
		if strings.Contains(logs.String(), secret) {
			t.Fatal("a token is in the agent's log")
		}
	}
	if !strings.Contains(logs.String(), "claim not redeemed; retrying") || !strings.Contains(logs.String(), "gateway claimed") {
		t.Errorf("the log does not show the retry and the claim:\n%s", logs.String())
	}
}
