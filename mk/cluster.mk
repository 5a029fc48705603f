# The relay cluster (issue 13). Its end-to-end tests (test/cluster: several
# relays on SQLite and on PostgreSQL, the shipped HAProxy configuration,
# agents, an HTTPS webhook receiver; kill -9 and SIGTERM) run in test-cluster
# (Makefile);
# their harnesses (test/rig/pgtest, test/rig/haproxytest, test/rig/redistest)
# install postgresql, haproxy and redis-server with apt-get when missing.
#
# bench-cluster runs bench/cmd/fleet-clusterbench: a throwaway
# PostgreSQL, three fleet-relay processes behind the shipped HAProxy
# configuration and the load generators (fleet-loadgen agents, apibench's
# clients), all on this machine. It records, beside their targets: GET
# /devices through HAProxy, heartbeats stored across the relays with the
# heartbeat-to-stored p99, the recovery from a relay killed with SIGKILL
# under that load (nothing lost), deliveries from the shared webhook outbox,
# and one relay on PostgreSQL beside one on SQLite under the same load, with
# their ratio. Each measured window's notes say where the machine's CPU went
# (PostgreSQL, relays, HAProxy, load generators, everything else).

.PHONY: bench-cluster
BENCH_TARGETS += bench-cluster

CLUSTERBENCH_FLAGS ?=

bench-cluster: build ## PostgreSQL, three relays behind HAProxy and the load generators on this machine
	$(GO) build -o $(BIN)/fleet-loadgen ./bench/cmd/fleet-loadgen
	$(GO) build -o $(BIN)/fleet-clusterbench ./bench/cmd/fleet-clusterbench
	$(BIN)/fleet-clusterbench --relay $(BIN)/fleet-relay --loadgen $(BIN)/fleet-loadgen $(CLUSTERBENCH_FLAGS)
