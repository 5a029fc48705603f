// Command fleet-agent runs on a gateway: it keeps one websocket to the relay
// and streams heartbeats, metrics and events, applying the serial
// configuration it receives. See docs/agent.md. SIGTERM or SIGINT stop it
// gracefully; SIGUSR1 re-reads the status file and sends a heartbeat.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/fleet/fleet/agent"
	"github.com/fleet/fleet/agent/update"
)

func main() {
	// A trial's guard (agent/update, docs/updates.md) is this binary
	// started again with FLEET_UPDATE_GUARD set: it must do nothing else.
	update.RunGuardIfAsked()
	// --version alone answers before anything is read (the updater and
	// its tests ask every binary they handle).
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-version") {
		fmt.Println(agent.Version)
		return
	}
	cfg, err := agent.ParseConfig(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if errors.Is(err, agent.ErrVersion) {
		fmt.Println(agent.Version)
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet-agent:", err)
		os.Exit(2)
	}
	log := newLogger(cfg.LogLevel, cfg.LogFormat)
	if cfg.TokenOnCommandLine {
		log.Warn(agent.TokenWarning)
	}
	// The updater boots first: it finishes or undoes an update that was
	// interrupted, which may execute another binary in place of this one.
	updates := agent.NewUpdates(cfg)
	bin, err := os.Executable()
	if err == nil {
		bin, err = filepath.EvalSymlinks(bin)
	}
	if err != nil {
		log.Error("fleet-agent cannot find its own binary; updates will fail", "err", err)
	}
	updater, err := update.Boot(updates.Options(bin, log.With("component", "update")))
	if err != nil {
		log.Error("updater boot", "err", err)
	}
	if updater != nil {
		updates.Updater = updater
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// A gateway with no device token claims one (--claim) before anything
	// runs; refused for good, it stops with the relay's reason.
	if err := agent.Provision(ctx, &cfg, log); err != nil {
		if ctx.Err() != nil {
			return
		}
		log.Error("fleet-agent cannot register", "err", err)
		var refused *agent.ClaimRefusedError
		if errors.As(err, &refused) {
			os.Exit(agent.ExitClaimRefused)
		}
		os.Exit(1)
	}
	a, err := agent.New(cfg, log, agent.Options{JSONOnly: jsonOnly, Updates: updates})
	if err != nil {
		log.Error("fleet-agent cannot start", "err", err)
		os.Exit(1)
	}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			a.ReloadStatus()
		}
	}()
	if err := a.Run(ctx); err != nil {
		log.Error("fleet-agent failed", "err", err)
		os.Exit(1)
	}
}

func newLogger(level, format string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: l}
	if strings.EqualFold(format, "json") {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}
