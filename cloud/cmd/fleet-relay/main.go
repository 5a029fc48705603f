// Command fleet-relay is the cloud side of Fleet: `serve` runs the public
// REST API and the agents' endpoint on a SQLite file; the admin subcommands
// (org, key, device, ...) work on the same file, even while a relay runs.
// See docs/relay.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
