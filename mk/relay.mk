# Relay: `make run` starts the demo (deploy/demo/run.sh): a relay on
# $(DATA)/relay.db with a demo organization, an API key with every scope and
# four simulated gateways. Override the address with LISTEN=host:port.

LISTEN ?= 127.0.0.1:8080
# The `run` rule itself is in the top Makefile.
