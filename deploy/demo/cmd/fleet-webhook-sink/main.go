// Command fleet-webhook-sink is the demo's local HTTPS webhook receiver: it
// verifies the signatures of the relay's webhooks with the organization's
// secret (from FLEET_WEBHOOK_SECRET) and prints one line per delivery. The
// logic is in deploy/demo/webhooksink; see docs/demo.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/fleet/fleet/deploy/demo/webhooksink"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := webhooksink.Run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
