# fleet-agent: footprint benchmarks (issue 3). `make bench` runs bench-agent
# after `build`: static binary sizes for linux amd64, arm64 and arm v7, and
# the RSS and CPU of bin/fleet-agent at its defaults, each beside its target
# (and recorded for the `make bench` report, mk/bench.mk).

AGENT_BENCH_PERIOD ?= 60s
AGENT_SIZE_LIMIT   := 15728640

.PHONY: bench-agent bench-agent-size bench-agent-footprint

bench-agent: bench-agent-size bench-agent-footprint ## fleet-agent's static binary sizes and its RSS and CPU at its defaults

bench-agent-size: bench-tool
	@mkdir -p $(BIN)/cross
	@for t in amd64: arm64: arm:7; do \
		arch=$${t%%:*}; arm=$${t##*:}; \
		out=$(BIN)/cross/fleet-agent-linux-$$arch$${arm:+v$$arm}; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch GOARM=$$arm $(GO) build -trimpath -ldflags='$(AGENT_LDFLAGS)' -o $$out ./agent/cmd/fleet-agent || exit 1; \
	done
	@$(BENCHREPORT) agent-size --limit $(AGENT_SIZE_LIMIT) linux/amd64=$(BIN)/cross/fleet-agent-linux-amd64 \
		linux/arm64=$(BIN)/cross/fleet-agent-linux-arm64 'linux/arm v7=$(BIN)/cross/fleet-agent-linux-armv7'

# Builds only the agent (bench already ran build); uses bin/fleet-relay when present.
bench-agent-footprint:
	@CGO_ENABLED=0 $(GO) build -trimpath -ldflags='$(AGENT_LDFLAGS)' -o $(BIN)/fleet-agent ./agent/cmd/fleet-agent
	@$(GO) run ./bench/cmd/fleet-agentbench --agent $(BIN)/fleet-agent --relay $(BIN)/fleet-relay --period $(AGENT_BENCH_PERIOD)

BENCH_TARGETS += bench-agent
