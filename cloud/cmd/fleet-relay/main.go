// Command fleet-relay is the cloud side of Fleet: `serve` runs the public
// REST API and the agents' endpoint on a SQLite file or PostgreSQL; the
// admin subcommands (org, key, device, ...) work on the same database,
// even while a relay runs. The program lives in cloud/relay; this main
// hands it the signals and maps its outcome to the exit status. See
// docs/relay.md.
package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/fleet/fleet/cloud/relay"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := relay.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err))
}

// exitCode is the exit status for relay.Run's outcome, which Run has
// already reported on stderr: 0 success, 2 a mistake in the command line
// (relay.ErrUsage), 1 any other failure.
func exitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, relay.ErrUsage):
		return 2
	default:
		return 1
	}
}
