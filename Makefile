# Fleet: build, run, test, bench.
# Each area adds its own targets in mk/*.mk and appends to TEST_TARGETS and
# BENCH_TARGETS; the fragments are read before the rules below use them.

GO        ?= go
BIN       := bin
DATA      ?= .fleet-demo
export CGO_ENABLED ?= 1

.DEFAULT_GOAL := all

TEST_TARGETS  :=
BENCH_TARGETS :=

include $(sort $(wildcard mk/*.mk))

.PHONY: all build run test test-unit vet bench clean

all: build

build: ## bin/fleet-relay (cgo, SQLite) and bin/fleet-agent (static)
	$(GO) build -o $(BIN)/fleet-relay ./cloud/cmd/fleet-relay
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/fleet-agent ./agent/cmd/fleet-agent

vet:
	$(GO) vet ./...

test-unit:
	$(GO) test -count=1 -timeout 20m ./...

test: vet test-unit $(TEST_TARGETS)

bench: build bench-tool ## every BENCH_TARGETS benchmark, then one table to the console and bench/results.md (mk/bench.mk)
	$(BENCHREPORT) run --make '$(MAKE)' --md bench/results.md $(BENCH_TARGETS)

LISTEN      ?= 127.0.0.1:8080
SINK_LISTEN ?= 127.0.0.1:9443

# exec: run.sh is make's own child, so make's SIGTERM reaches it, and it stops
# the demo when make is gone (see docs/demo.md).
run: build ## demo: relay, 3 simulated gateways, HTTPS webhook sink; prints an API key and curl lines (deploy/demo/run.sh)
	$(GO) build -o $(BIN)/fleet-webhook-sink ./deploy/demo/cmd/fleet-webhook-sink
	@exec env BIN=$(BIN) DATA=$(DATA) LISTEN=$(LISTEN) SINK_LISTEN=$(SINK_LISTEN) ./deploy/demo/run.sh

clean:
	rm -rf $(BIN) $(DATA)
