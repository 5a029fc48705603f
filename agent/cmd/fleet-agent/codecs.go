//go:build !fleet_json_only

package main

// jsonOnly is false: the agent offers CBOR in its hello (see jsononly.go).
const jsonOnly = false
