# Public API (cloud/api): end-to-end benchmark of GET /devices and GET /alerts
# on loopback against a real SQLite file (10,000 devices, 16 clients).
# bench-api-micro: the in-process Go benchmarks of the store, the handler
# and the request metrics (BenchmarkListDevices25, BenchmarkAuthenticateCached,
# BenchmarkHandler, BenchmarkRouteLabel, BenchmarkObserveRequest), for
# information beside the end-to-end figures.
.PHONY: bench-api bench-api-micro
BENCH_TARGETS += bench-api bench-api-micro

APIBENCH_FLAGS ?=

bench-api: ## GET /devices and GET /alerts on loopback, 10,000 devices, 16 clients
	$(GO) build -o $(BIN)/fleet-apibench ./bench/cmd/fleet-apibench
	$(BIN)/fleet-apibench $(APIBENCH_FLAGS)

bench-api-micro: bench-tool ## the in-process Go benchmarks of the store, the handler and the request metrics
	$(BENCHREPORT) gotest --set api-micro -- $(GO) test -run '^$$' -bench '^(BenchmarkListDevices25|BenchmarkAuthenticateCached)$$' -benchtime 1s ./cloud/sqlite/
	$(BENCHREPORT) gotest --set api-micro-handler -- $(GO) test -run '^$$' -bench '^BenchmarkHandler$$/^(devices|alerts)$$' -benchtime 1s ./cloud/api/
	$(BENCHREPORT) gotest --set api-routelabel -- $(GO) test -run '^$$' -bench '^BenchmarkRouteLabel$$' -benchtime 1s ./cloud/api/
	$(BENCHREPORT) gotest --set relay-metrics -- $(GO) test -run '^$$' -bench '^BenchmarkObserveRequest$$' -benchtime 1s ./cloud/relaymetrics/
