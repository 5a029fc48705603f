# Fleet: build, run, test, bench. `make help` lists every target.
#
# `make test` and the suites it runs are all defined here; the areas'
# other targets (benchmarks, packaging, the panel's front end, fuzzing,
# cross builds, the kernel rig) and the tools the suites install are in
# mk/*.mk. Each benchmark target appends itself to BENCH_TARGETS there.

GO        ?= go
BIN       := bin
DATA      ?= .fleet-demo
# AGENT_VERSION is the version fleet-agent reports (--version, hello,
# agentVersion); stamped at link time. `make build AGENT_VERSION=1.4.2`.
AGENT_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
AGENT_LDFLAGS := -s -w -X github.com/fleet/fleet/agent.Version=$(AGENT_VERSION)
export CGO_ENABLED ?= 1

.DEFAULT_GOAL := all

BENCH_TARGETS :=

include $(sort $(wildcard mk/*.mk))

.PHONY: all help build run vet test test-unit test-e2e test-cluster test-binaries test-deploy test-demo test-soak bench clean

all: build

help: ## this list: every target with a description (Makefile, then mk/*.mk)
	@for f in $(MAKEFILE_LIST); do \
		grep -E '^[a-z][a-z0-9-]*:.*## ' $$f | sed -E 's/^([a-z0-9-]+):.*## /\1\t/' | \
			awk -F'\t' -v f=$$f 'NR == 1 && f != "Makefile" { printf "\n%s\n", f } { printf "  %-26s %s\n", $$1, $$2 }'; \
	done

build: panel-assets ## bin/fleet-relay (cgo, SQLite) and bin/fleet-agent (static)
	$(GO) build -o $(BIN)/fleet-relay ./cloud/cmd/fleet-relay
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='$(AGENT_LDFLAGS)' -o $(BIN)/fleet-agent ./agent/cmd/fleet-agent

vet: ## go vet ./...
	$(GO) vet ./...

# ---- make test: every suite, in the order they run --------------------------

test: vet test-unit test-cross test-fuzz test-e2e ## everything that keeps Fleet true (.ci/run): vet, unit tests, cross builds, fuzzing, the end-to-end suites

test-e2e: test-cluster test-binaries test-deploy test-demo test-soak test-browser test-kernel ## the end-to-end suites, one after the other

# The end-to-end suites are whole packages, and a few tests of the relay's
# package (RELAY_PKG, cloud/relay) that run
# several relays on one PostgreSQL or the real binaries as processes.
# test-unit runs every other package and test.
MODULE           := github.com/fleet/fleet
E2E_PKGS         := test/cluster test/e2e test/browser deploy deploy/demo bench/soak
RELAY_PKG        := ./cloud/relay/
RELAY_CLUSTER    := ^TestCluster
RELAY_BINARIES   := ^(TestRealAgentSignalsAndAlerts|TestWebhooksThroughTheRelayKilledAndRestarted|TestAgentMetricsWithTheRelay)$$
E2E_TIMEOUT      := 20m

test-unit: panel-assets node-tools test-tools modbus-tools mailpit minisign ## the packages' own tests, without the end-to-end suites (real files, loopback servers, throwaway PostgreSQL)
	$(GO) test -count=1 -timeout 20m -skip '$(RELAY_CLUSTER)|$(RELAY_BINARIES)' \
		$$($(GO) list ./... | grep -vxF $(addprefix -e $(MODULE)/,$(E2E_PKGS)))

test-cluster: minisign ## several relays on one store: in process on PostgreSQL (TestCluster*), and as processes behind HAProxy with agents, kill -9 (also mid-rollout) and PostgreSQL stopped (test/cluster)
	$(GO) test -count=1 -timeout $(E2E_TIMEOUT) -run '$(RELAY_CLUSTER)' $(RELAY_PKG)
	$(GO) test -count=1 -timeout $(E2E_TIMEOUT) ./test/cluster/

test-binaries: modbus-tools mailpit minisign ## the real fleet-relay and fleet-agent as processes: kill -9 of either side, webhooks across a relay restart, PostgreSQL taken away, a libmodbus slave on a pty, gateways claimed, agents updated by rollouts (bad releases rolled back), a reboot through a fake logind (test/e2e and the relay's)
	$(GO) test -count=1 -timeout $(E2E_TIMEOUT) -run '$(RELAY_BINARIES)' $(RELAY_PKG)
	$(GO) test -count=1 -timeout $(E2E_TIMEOUT) ./test/e2e/

test-deploy: minisign ## the .deb packages built, installed and run under systemd in systemd-nspawn, the units, the container image (deploy/; docs/deploy.md)
	$(GO) test -count=1 -timeout $(E2E_TIMEOUT) ./deploy/

test-demo: test-tools ## make run in a fresh clone: the API with the printed key, a webhook at the sink, nothing left after SIGINT (deploy/demo)
	$(GO) test -count=1 -timeout $(E2E_TIMEOUT) ./deploy/demo/

test-soak: ## the short soak under faults: 100 agents through toxiproxy, kill -9 of the relay, nothing lost (bench/soak; make soak for a long one)
	$(GO) test -count=1 -timeout $(E2E_TIMEOUT) ./bench/soak/

# -----------------------------------------------------------------------------

bench: build bench-tool ## every BENCH_TARGETS benchmark, then one table to the console and bench/results.md (mk/bench.mk)
	$(BENCHREPORT) run --make '$(MAKE)' --md bench/results.md $(BENCH_TARGETS)

LISTEN      ?= 127.0.0.1:8080
SINK_LISTEN ?= 127.0.0.1:9443

# exec: run.sh is make's own child, so make's SIGTERM reaches it, and it stops
# the demo when make is gone (see docs/demo.md).
run: build ## demo: relay, 3 simulated gateways, HTTPS webhook sink; prints an API key and curl lines (deploy/demo/run.sh); variables LISTEN, SINK_LISTEN, METRICS_LISTEN (the relay's metrics, 127.0.0.1:9464), DATA
	$(GO) build -o $(BIN)/fleet-webhook-sink ./deploy/demo/cmd/fleet-webhook-sink
	@exec env BIN=$(BIN) DATA=$(DATA) LISTEN=$(LISTEN) SINK_LISTEN=$(SINK_LISTEN) METRICS_LISTEN=$(METRICS_LISTEN) ./deploy/demo/run.sh

clean: ## remove bin/ and the demo's data
	rm -rf $(BIN) $(DATA)
