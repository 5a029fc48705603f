# Relay: `make run` starts the demo (deploy/demo/run.sh): a relay on
# $(DATA)/relay.db with a demo organization, an API key with every scope and
# three simulated gateways (two IG-500, one IG-100). Override the address
# with LISTEN=host:port.

LISTEN ?= 127.0.0.1:8080
# The `run` rule itself is in the top Makefile.
