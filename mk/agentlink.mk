# Agent link (issue 3, relay side): load benchmark of the agents' websocket
# endpoint. fleet-loadgen registers LOADGEN_AGENTS devices in a temp
# SQLite file, starts a relay process on it and connects that many agents
# over loopback from several 127.0.0.x addresses; it prints the relay's RSS
# per connection, heartbeats stored per second with the heartbeat-to-stored
# p99, the relay's CPU per heartbeat, and the drain time of a reconnect storm
# (every agent flushing an hour of spooled metrics), each beside its target.
# It runs twice: with agents speaking JSON, as agents from before CBOR (the
# rows the report has always had), and with agents speaking CBOR, as current
# agents (the same rows marked "(CBOR agents)"). The measurement
# (LOADGEN_DURATION, 60 s) is cut into 30 s windows: the p99 row is the
# worst window's, and the run prints each window's p99 with the relay's GC
# cycles and GC CPU in it (runtime/metrics, read from the relay's /stats);
# the relay runs with fleet-relay serve's GC policy (cloud/relaygc; pass
# LOADGEN_FLAGS='--memory-limit 1500MiB --gc-percent 200' to try another).
# bench-agentlink-store measures
# the store's batching writer alone (heartbeats/s from 20,000 concurrent
# connections, no websockets, no load generator sharing the CPU), and its
# CPU per heartbeat in transactions of 200 and 2,000 heartbeats, and the
# writer's grouping of a transaction's heartbeats by session after a burst.
#
# The relay holds one descriptor per agent. Where the hard RLIMIT_NOFILE
# cannot hold LOADGEN_AGENTS of them and cannot be raised (a sandbox without
# CAP_SYS_RESOURCE), the host run uses as many agents as fit, and
# fleet-loadgen guest measures the capacity figures (agents connected at
# once, relay RSS) with a static build of the same load generator in the
# qemu rig's guest, where the limit is raised as root; elsewhere it finds
# nothing to do. See docs/benchmarks.md.

LOADGEN_AGENTS   ?= 20000
# The guest run's agents: issue 31's capacity, 50,000 idle agents on one
# relay within 1 GiB.
LOADGEN_GUEST_AGENTS ?= 50000
# TCG (no KVM on the build machine) takes about 35 minutes to connect 50,000.
LOADGEN_GUEST_TIMEOUT ?= 75m
LOADGEN_DURATION ?= 60s
LOADGEN_FLAGS    ?=
# fleet-loadgen links SQLite through cgo: the guest's copy is linked
# statically (no libc in the guest), without SQLite's dlopen.
LOADGEN_STATIC_TAGS = osusergo netgo sqlite_omit_load_extension

# bench-agentlink-decode times the endpoint's heartbeat decoding: CBOR as a
# connection decodes it (target: at most the 3.1 µs of the hand-written JSON
# fast path it replaced, issue 17) and into a new message, JSON as a
# connection of an agent from before CBOR decodes it (encoding/json's
# behaviour on encoding/json/v2's implementation), and encoding/json itself;
# then a connection's own work per decoded heartbeat (BenchmarkConnHeartbeat,
# the store answering at once): its allocation against what it was when the
# heartbeat's rules became a pure function (none when nothing changed, 144 B
# when a channel changed), its CPU beside it.

.PHONY: bench-agentlink bench-agentlink-store bench-agentlink-decode
BENCH_TARGETS += bench-agentlink bench-agentlink-store bench-agentlink-decode

bench-agentlink: ## LOADGEN_AGENTS (20,000) agents on one relay, JSON and CBOR: RSS, heartbeats/s, p99, CPU, reconnect storm
	$(GO) build -o $(BIN)/fleet-loadgen ./bench/cmd/fleet-loadgen
	$(BIN)/fleet-loadgen --agents $(LOADGEN_AGENTS) --duration $(LOADGEN_DURATION) --codec json $(LOADGEN_FLAGS)
	$(BIN)/fleet-loadgen --agents $(LOADGEN_AGENTS) --duration $(LOADGEN_DURATION) --codec cbor $(LOADGEN_FLAGS)
	CGO_ENABLED=1 $(GO) build -tags '$(LOADGEN_STATIC_TAGS)' -ldflags '-s -w -linkmode external -extldflags -static' \
		-o $(BIN)/fleet-loadgen-static ./bench/cmd/fleet-loadgen
	$(BIN)/fleet-loadgen guest --binary $(BIN)/fleet-loadgen-static --agents $(LOADGEN_GUEST_AGENTS) --timeout $(LOADGEN_GUEST_TIMEOUT)

bench-agentlink-store: bench-tool ## the store's batching writer alone: heartbeats/s and CPU per heartbeat
	$(BENCHREPORT) gotest --set agentlink-store -- $(GO) test -run '^$$' -bench BenchmarkAgentHeartbeats -benchtime 200000x ./cloud/sqlite/
	$(BENCHREPORT) gotest --set agentlink-writer -- $(GO) test -run '^$$' -bench BenchmarkWriterHeartbeatTx -benchtime 40000x ./cloud/sqlite/
	$(BENCHREPORT) gotest --set agentlink-merge -- $(GO) test -run '^$$' -bench BenchmarkHeartbeatMergeAfterBurst -benchtime 1s ./cloud/agentlink/

bench-agentlink-decode: bench-tool ## the agent endpoint's heartbeat decoding, CBOR and JSON, and a connection's work per heartbeat
	$(BENCHREPORT) gotest --set agentlink-decode -- $(GO) test -run '^$$' -bench BenchmarkDecodeHeartbeat -benchtime 1s ./cloud/agentlink/
	$(BENCHREPORT) gotest --set agentlink-conn -- $(GO) test -run '^$$' -bench BenchmarkConnHeartbeat -benchtime 1s ./cloud/agentlink/
