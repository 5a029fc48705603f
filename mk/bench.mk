# The benchmark report (issue 7): `make bench` (top Makefile) runs every
# target in BENCH_TARGETS one after the other through bin/fleet-benchreport,
# which carries on past a failing one, then prints one table (area, figure,
# target, measured, pass/MISS/info) headed by the machine and writes it to
# bench/results.md; it exits non-zero when a benchmark failed to run. Each
# benchmark records its rows into the file named by FLEET_BENCH_RESULTS
# (package bench/benchreport); run alone, a bench target only prints.

BENCHREPORT := $(BIN)/fleet-benchreport

.PHONY: bench-tool

bench-tool: ## bin/fleet-benchreport
	@$(GO) build -o $(BENCHREPORT) ./bench/cmd/fleet-benchreport

# Points (issue 26): point samples stored end to end. bench-points-ingest
# runs fleet-loadgen with POINTS_AGENTS (2,000) agents speaking CBOR, each
# sending a batch of POINTS (50) samples every POINTS_INTERVAL (990 ms:
# 1 % above the 100,000/s target, as bench-agentlink offers heartbeats)
# and a heartbeat every 30 s, to one relay on SQLite; it records the
# samples the relay acknowledged per second (it acks a batch after its
# commit) over POINTS_DURATION (6 min: the steady state, with the head of
# point history grown and the compactor's first folds, which wait 5 min;
# a 30 s window measures the ingest alone), the batches' send-to-ack p99
# and the relay's CPU per sample, and reads every 100th agent's samples
# back through the store. The
# cluster's figure (≥ 50,000/s across three relays on PostgreSQL) is step
# 5 of bench-cluster (mk/cluster.mk); alone:
# make bench-cluster CLUSTERBENCH_FLAGS='--only-points --devices 2000 --agents 2000'.
# Point history's storage figures are bench-points (mk/points.mk).
# bench-points-micro reports the samples route in process (cloud/api) and
# the CAN signal decoder (hw/canfd) for information.

POINTS_AGENTS   ?= 2000
POINTS          ?= 50
POINTS_INTERVAL ?= 990ms
POINTS_DURATION ?= 6m

.PHONY: bench-points-ingest bench-points-micro
BENCH_TARGETS += bench-points-ingest bench-points-micro

bench-points-ingest: ## POINTS_AGENTS (2,000) agents × POINTS (50) point samples a second on one relay on SQLite: samples stored/s, ack p99
	$(GO) build -o $(BIN)/fleet-loadgen ./bench/cmd/fleet-loadgen
	$(BIN)/fleet-loadgen --agents $(POINTS_AGENTS) --points $(POINTS) --points-interval $(POINTS_INTERVAL) --duration $(POINTS_DURATION) --codec cbor $(LOADGEN_FLAGS)

bench-points-micro: bench-tool ## the samples route in process (raw, CSV, buckets; page encoding) and the CAN signal decoder
	$(BENCHREPORT) gotest --set points-api -- $(GO) test -run '^$$' -bench '^BenchmarkPointSamples' -benchtime 200x ./cloud/api/
	$(BENCHREPORT) gotest --set points-canfd -- $(GO) test -run '^$$' -bench '^BenchmarkSignalDecode$$' -benchtime 1s ./hw/canfd/

# Rules (issue 27): bench-rules-micro reports the alert engine's cost per
# sample evaluated with 1,000 rules in one organization (cloud/alert
# BenchmarkRules1000: MetricsStored and PointsStored on samples that decide
# nothing, the rules and the device's state cached); target ≤ 2 µs.

.PHONY: bench-rules-micro
BENCH_TARGETS += bench-rules-micro

bench-rules-micro: bench-tool ## the alert engine's cost per sample with 1,000 rules (target ≤ 2 µs)
	$(BENCHREPORT) gotest --set rules-engine -- $(GO) test -run '^$$' -bench '^BenchmarkRules1000$$' -benchtime 20000x ./cloud/alert/
