// Package cluster holds the end-to-end tests of Fleet's relay cluster:
// the real fleet-relay and fleet-agent binaries as processes, several
// relays on one store, agents failing over between them on their own
// (--relay repeated) or through a real HAProxy running the shipped
// deploy/haproxy configuration, relays drained with SIGTERM and killed
// with SIGKILL. What a customer checks is asserted: every device ONLINE
// again, every sample stored exactly once, the API answering throughout.
package cluster
