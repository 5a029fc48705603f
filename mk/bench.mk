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
