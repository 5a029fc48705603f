# Point history (issue 26, DESIGN.md "Points", docs/benchmarks.md): bytes
# per sample on disk in XOR chunks beside the head's one row per sample and
# 16 raw bytes, 7 days of a 1 s point as 1,000 step buckets and a raw page
# of 1,000 samples, on SQLite and on PostgreSQL (a throwaway server,
# test/rig/pgtest); and the agent store alone storing 2,000 devices × 50
# points a round (information: end-to-end ingest is fleet-loadgen's).

.PHONY: bench-points
BENCH_TARGETS += bench-points

bench-points: bench-tool ## point history: bytes per sample, 7-day buckets and raw pages, SQLite and PostgreSQL
	$(BENCHREPORT) gotest --set points-sqlite -- $(GO) test -run '^$$' -bench '^BenchmarkPointHistory$$' -benchtime 200x -timeout 30m ./cloud/sqlite/
	$(BENCHREPORT) gotest --set points-postgres -- $(GO) test -run '^$$' -bench '^BenchmarkPointHistory$$' -benchtime 200x -timeout 30m ./cloud/postgres/
	$(BENCHREPORT) gotest --set points-ingest-sqlite -- $(GO) test -run '^$$' -bench '^BenchmarkPointIngest$$' -benchtime 10x -timeout 30m ./cloud/sqlite/
	$(BENCHREPORT) gotest --set points-ingest-postgres -- $(GO) test -run '^$$' -bench '^BenchmarkPointIngest$$' -benchtime 10x -timeout 30m ./cloud/postgres/
