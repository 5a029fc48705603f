# fleet-agent: footprint benchmarks (issue 3). `make bench` runs bench-agent
# after `build`: static binary sizes for linux amd64, arm64 and arm v7, and
# the RSS and CPU of bin/fleet-agent at its defaults, each beside its target.

AGENT_BENCH_PERIOD ?= 60s
AGENT_SIZE_LIMIT   := 15728640

.PHONY: bench-agent bench-agent-size bench-agent-footprint

bench-agent: bench-agent-size bench-agent-footprint

bench-agent-size:
	@mkdir -p $(BIN)/cross
	@for t in amd64: arm64: arm:7; do \
		arch=$${t%%:*}; arm=$${t##*:}; \
		out=$(BIN)/cross/fleet-agent-linux-$$arch$${arm:+v$$arm}; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch GOARM=$$arm $(GO) build -trimpath -ldflags='-s -w' -o $$out ./agent/cmd/fleet-agent || exit 1; \
		size=$$(stat -c %s $$out); \
		awk -v n="linux/$$arch$${arm:+ v$$arm}" -v s=$$size -v lim=$(AGENT_SIZE_LIMIT) \
			'BEGIN { printf "agent binary %-15s %6.2f MiB   target < 15 MiB   %s\n", n, s/1048576, (s < lim ? "OK" : "OVER TARGET") }'; \
	done

# Builds only the agent (bench already ran build); uses bin/fleet-relay when present.
bench-agent-footprint:
	@CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/fleet-agent ./agent/cmd/fleet-agent
	@$(GO) run ./agent/internal/agentbench --agent $(BIN)/fleet-agent --relay $(BIN)/fleet-relay --period $(AGENT_BENCH_PERIOD)

BENCH_TARGETS += bench-agent
