# Public API (cloud/api): end-to-end benchmark of GET /devices and GET /alerts
# on loopback against a real SQLite file (10,000 devices, 16 clients).
.PHONY: bench-api
BENCH_TARGETS += bench-api

APIBENCH_FLAGS ?=

bench-api:
	$(GO) build -o $(BIN)/fleet-apibench ./cloud/cmd/fleet-apibench
	$(BIN)/fleet-apibench $(APIBENCH_FLAGS)
