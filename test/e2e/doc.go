// Package e2e holds the end-to-end tests of the relay and the agent: they
// build fleet-relay and fleet-agent, run them as processes over loopback on
// a temporary SQLite file, kill either side with SIGKILL, and check through
// the public API and the store what a customer would. See e2e_test.go.
package e2e
