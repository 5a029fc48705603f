# Agent link (issue 3, relay side): load benchmark of the agents' websocket
# endpoint. fleet-loadgen registers LOADGEN_AGENTS devices straight in a temp
# SQLite file, starts a relay process on it and connects that many agents
# over loopback from several 127.0.0.x addresses; it prints the relay's RSS
# per connection, heartbeats stored per second with the heartbeat-to-stored
# p99, and the drain time of a reconnect storm (every agent flushing an hour
# of spooled metrics), each beside its target. bench-agentlink-store measures
# the store's batching writer alone (heartbeats/s from 20,000 concurrent
# connections, no websockets, no load generator sharing the CPU), and its
# CPU per heartbeat in transactions of 200 and 2,000 heartbeats.

LOADGEN_AGENTS   ?= 20000
LOADGEN_DURATION ?= 30s
LOADGEN_FLAGS    ?=

# bench-agentlink-decode times the endpoint's heartbeat decoder (for
# information).

.PHONY: bench-agentlink bench-agentlink-store bench-agentlink-decode
BENCH_TARGETS += bench-agentlink bench-agentlink-store bench-agentlink-decode

bench-agentlink:
	$(GO) build -o $(BIN)/fleet-loadgen ./cloud/cmd/fleet-loadgen
	$(BIN)/fleet-loadgen --agents $(LOADGEN_AGENTS) --duration $(LOADGEN_DURATION) $(LOADGEN_FLAGS)

bench-agentlink-store: bench-tool
	$(BENCHREPORT) gotest --set agentlink-store -- $(GO) test -run '^$$' -bench BenchmarkAgentHeartbeats -benchtime 200000x ./cloud/sqlite/
	$(BENCHREPORT) gotest --set agentlink-writer -- $(GO) test -run '^$$' -bench BenchmarkWriterHeartbeatTx -benchtime 40000x ./cloud/sqlite/

bench-agentlink-decode: bench-tool
	$(BENCHREPORT) gotest --set agentlink-decode -- $(GO) test -run '^$$' -bench BenchmarkDecodeHeartbeat -benchtime 1s ./cloud/agentlink/
