# Public API (cloud/api): end-to-end benchmark of GET /devices and GET /alerts
# on loopback against a real SQLite file (10,000 devices, 16 clients), and
# (issue 31) GET /devices?limit=25 against a bare net/http server on
# loopback answering the bytes and headers the API answered, alternated
# (4 rounds of 5 s a side by default; target: the API at >= 0.9 of the
# bare server's requests per second, median of the rounds).
# bench-api-ceiling runs that comparison alone (not part of `make bench`:
# bench-api includes it).
# bench-api-micro: the in-process Go benchmarks of the store, the handler
# and the request metrics (BenchmarkListDevices25, BenchmarkAuthenticateCached,
# BenchmarkHandler, BenchmarkRouteLabel, BenchmarkObserveRequest, and
# cloud/apikey's BenchmarkLockedOut), for
# information beside the end-to-end figures.
.PHONY: bench-api bench-api-ceiling bench-api-micro
BENCH_TARGETS += bench-api bench-api-micro

APIBENCH_FLAGS ?=

bench-api: ## GET /devices and GET /alerts on loopback, 10,000 devices, 16 clients
	$(GO) build -o $(BIN)/fleet-apibench ./bench/cmd/fleet-apibench
	$(BIN)/fleet-apibench $(APIBENCH_FLAGS)

bench-api-ceiling: ## GET /devices (limit 25) against bare net/http answering the same bytes, alternated (only that part of bench-api)
	$(GO) build -o $(BIN)/fleet-apibench ./bench/cmd/fleet-apibench
	$(BIN)/fleet-apibench -ceiling-only $(APIBENCH_FLAGS)

bench-api-micro: bench-tool ## the in-process Go benchmarks of the store, the handler and the request metrics
	$(BENCHREPORT) gotest --set api-micro -- $(GO) test -run '^$$' -bench '^(BenchmarkListDevices25|BenchmarkAuthenticateCached)$$' -benchtime 1s ./cloud/sqlite/
	$(BENCHREPORT) gotest --set api-micro-handler -- $(GO) test -run '^$$' -bench '^BenchmarkHandler$$/^(devices|alerts)$$' -benchtime 1s ./cloud/api/
	$(BENCHREPORT) gotest --set api-routelabel -- $(GO) test -run '^$$' -bench '^BenchmarkRouteLabel$$' -benchtime 1s ./cloud/api/
	$(BENCHREPORT) gotest --set apikey-lockout -- $(GO) test -run '^$$' -bench '^BenchmarkLockedOut$$' -benchtime 1s ./cloud/apikey/
	$(BENCHREPORT) gotest --set relay-metrics -- $(GO) test -run '^$$' -bench '^BenchmarkObserveRequest$$' -benchtime 1s ./cloud/relaymetrics/

# Audit (issue 30): bench-audit reports the audit write cost per API write:
# PUT /serial/channels/{id} through two real servers on one SQLite store,
# with and without the key's actor (so with and without the audit record
# written in the change's transaction), alternating request by request in
# one run (cloud/api BenchmarkAuditPutChannel); target ≤ 5 % of the
# throughput.

.PHONY: bench-audit
BENCH_TARGETS += bench-audit

bench-audit: bench-tool ## audit write cost per API write: PUT /serial/channels/{id} with and without its record, alternating (target ≤ 5 %)
	$(BENCHREPORT) gotest --set audit-ops -- $(GO) test -run '^$$' -bench '^BenchmarkAuditPutChannel$$' -benchtime 3000x ./cloud/api/
