# Rollouts (issue 28): bench-rollout runs bench/cmd/fleet-rolloutbench: one
# relay (bin/fleet-relay) on SQLite, ROLLOUT_AGENTS (1,000) simulated agents
# that answer update commands as fleet-agent does (download over HTTP with
# the SHA-256 checked, minisign signature verified, file swapped, hello with
# the new version, healthy after healthFor), a rollout of bin/fleet-agent
# in waves 1, 10, 100 % with healthFor ROLLOUT_HEALTH_FOR (10 s): the time
# less the health windows (target < 5 min) and the relay's download
# throughput; then a release signed by another key, which must stop after
# maxFailures within its first wave.

ROLLOUT_AGENTS     ?= 1000
ROLLOUT_HEALTH_FOR ?= 10s

.PHONY: bench-rollout
BENCH_TARGETS += bench-rollout

bench-rollout: bench-tool minisign ## ROLLOUT_AGENTS (1,000) simulated agents updated in three waves on one relay: time less the health windows (< 5 min), download MB/s; a bad release stopped
	$(GO) build -o $(BIN)/fleet-relay ./cloud/cmd/fleet-relay
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='$(AGENT_LDFLAGS)' -o $(BIN)/fleet-agent ./agent/cmd/fleet-agent
	$(GO) build -o $(BIN)/fleet-rolloutbench ./bench/cmd/fleet-rolloutbench
	$(BENCHREPORT) gotest --set rollout -- $(BIN)/fleet-rolloutbench --relay $(BIN)/fleet-relay --release $(BIN)/fleet-agent \
		--agents $(ROLLOUT_AGENTS) --health-for $(ROLLOUT_HEALTH_FOR)
