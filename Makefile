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

LISTEN ?= 127.0.0.1:8080

run: build ## demo relay with simulated gateways; prints an API key and a curl line (deploy/demo/run.sh)
	BIN=$(BIN) DATA=$(DATA) LISTEN=$(LISTEN) ./deploy/demo/run.sh

clean:
	rm -rf $(BIN) $(DATA)
