# Agent releases (issue 28, DESIGN.md "Fleet operations", docs/relay.md):
# one relay's release download throughput. BenchmarkReleaseDownload
# (cloud/relay) runs serve in process on SQLite and has 64 agents (as many
# as a relay serves at once), each with its own device token and
# connection, download a 12 MiB release at once over loopback through
# GET /agent/v1/releases/{id}; MB/s counts every byte they received.

.PHONY: bench-releases
BENCH_TARGETS += bench-releases

bench-releases: bench-tool ## release download throughput of one relay on SQLite: 64 agents × 12 MiB at once (MB/s)
	$(BENCHREPORT) gotest --set release-download -- $(GO) test -run '^$$' -bench '^BenchmarkReleaseDownload$$' -benchtime 5x ./cloud/relay/
