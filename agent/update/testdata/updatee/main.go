// Command updatee is the agent as agent/update's tests need it: it boots
// the updater, takes the update command in StateDir/order.json once, runs
// the trial, and appends each reported status to StateDir/reports.jsonl.
// Its version and behaviour are stamped at link time (-X main.version,
// -X main.behavior): good, exit (exits at once), noconnect (never links
// up), newfail (a point that read before reads with an error), hang.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fleet/fleet/agent/update"
	"github.com/fleet/fleet/shared/protocol"
)

var (
	version  = "dev"
	behavior = "good"
)

func main() {
	update.RunGuardIfAsked()
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		fmt.Println(version)
		return
	}
	state := flag.String("state", "", "state directory")
	relay := flag.String("relay", "", "relay URL")
	key := flag.String("key", "", "update key file")
	flag.Parse()
	appendLine(filepath.Join(*state, "starts.log"), fmt.Sprintf("%s %d", version, os.Getpid()))
	switch behavior {
	case "exit":
		os.Exit(3)
	case "hang":
		// Sleep, not select {}: with no other goroutine the runtime
		// would end a bare select as a deadlock (exit 2), which is a
		// crash, not a hang.
		for {
			time.Sleep(time.Hour)
		}
	}
	bin, err := os.Executable()
	if err != nil {
		fail(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("agent", version, "pid", os.Getpid())
	u, err := update.Boot(update.Options{
		StateDir: *state, Binary: bin, KeyFile: *key,
		Relay:  func() string { return *relay },
		Token:  func() string { return os.Getenv("FLEET_TOKEN") },
		Client: http.DefaultClient,
		Health: health,
		Report: func(st protocol.CommandStatus) {
			b, _ := json.Marshal(st)
			appendLine(filepath.Join(*state, "reports.jsonl"), string(b))
		},
		Version: version,
		Log:     log,
	})
	if err != nil {
		fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	order := filepath.Join(*state, "order.json")
	if b, err := os.ReadFile(order); err == nil {
		if err := os.Rename(order, order+".taken"); err != nil {
			fail(err)
		}
		var cmd protocol.Command
		if err := json.Unmarshal(b, &cmd); err != nil {
			fail(err)
		}
		u.Handle(ctx, cmd)
	}
	if err := u.Run(ctx); err != nil {
		fail(err)
	}
}

func health() update.Health {
	h := update.Health{LinkUp: behavior != "noconnect", ConfigApplied: true, Failing: []string{"rs485-2.broken"}}
	if behavior == "newfail" {
		h.Failing = append(h.Failing, "rs485-1.temp")
	}
	return h
}

func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fail(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		fail(err)
	}
	f.Sync()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "updatee:", err)
	os.Exit(1)
}
