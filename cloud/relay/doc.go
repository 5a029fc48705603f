// Package relay is the fleet-relay program as a library: the command line
// (serve and the admin subcommands), the relay process Main that wires the
// store, the public API, the agents' endpoint, the panel, the webhook
// sender, the alert engine and the metrics together, and its shutdown.
// cloud/cmd/fleet-relay only hands it the signals and the process's
// standard streams. See docs/relay.md.
package relay
