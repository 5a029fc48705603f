// Command fleet-relay is the cloud side of Fleet: `serve` runs the public
// REST API and the agents' endpoint on a SQLite file; the admin subcommands
// (org, key, device, ...) work on the same file, even while a relay runs.
// The program lives in cloud/relay; see docs/relay.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/fleet/fleet/cloud/relay"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := relay.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
