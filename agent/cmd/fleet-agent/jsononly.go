//go:build fleet_json_only

package main

// jsonOnly: built with -tags fleet_json_only, the agent behaves as agents
// from before CBOR (it offers no codec in its hello and speaks JSON), so
// that end-to-end tests run such an old agent against the current relay.
// No release is built with the tag.
const jsonOnly = true
