# Relay: `make run` starts the demo (deploy/demo/run.sh): a relay on
# $(DATA)/relay.db with a demo organization, an API key with every scope and
# three simulated gateways (two IG-500, one IG-100). Override the address
# with LISTEN=host:port, the relay's Prometheus metrics listener with
# METRICS_LISTEN=host:port (or none, or api: --metrics-listen's values);
# make run stops with the address named when one of them is taken.

LISTEN ?= 127.0.0.1:8080
METRICS_LISTEN ?= 127.0.0.1:9464
# The `run` rule itself is in the top Makefile.
