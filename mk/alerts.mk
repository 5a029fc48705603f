# Alert rules and notifications (issue 27, DESIGN.md "Performance targets",
# docs/benchmarks.md "Alert rules and notifications").
#
# bench-alerts runs bench/cmd/fleet-alertbench: one fleet-relay on SQLite
# sending its e-mail to Mailpit on loopback (FLEET_SMTP_URL
# smtp+insecure://...; `make mailpit` builds the pinned Mailpit), and
# ALERTS_AGENTS (2,000) fleet-loadgen agents each sending ALERTS_POINTS
# (10) point samples a second (20,000 samples/s), the first crossing a
# threshold up and down every 2 × ALERTS_CROSS_EVERY (30) rounds at a
# phase of its own (about 33 alerts opened and 33 resolved a second, each
# e-mailed): the time from each crossing's capture at the agent to
# Mailpit's Created for its e-mail over ALERTS_DURATION (60 s), p50 and p99
# (target < 2 s), split into crossing to alert opened and opened to
# e-mail. At the relay's rated point ingest (ALERTS_POINTS=50: 100,000
# samples/s) the figure is the ingest's queue on a shared machine, not the
# alert path's (docs/benchmarks.md, "Alert rules and notifications").
#
# bench-notify reports the outbox's notifications per second on SQLite
# (cloud/webhook BenchmarkEmailThroughOutbox: e-mail to a real SMTP server
# on loopback with STARTTLS and AUTH, one connection a message;
# BenchmarkSlackThroughOutbox: chat messages to an HTTPS incoming webhook).
# The rules engine's cost per sample is bench-rules-micro (mk/bench.mk).

ALERTS_AGENTS      ?= 2000
ALERTS_POINTS      ?= 10
ALERTS_CROSS_EVERY ?= 30
ALERTS_DURATION    ?= 60s
ALERTBENCH_FLAGS   ?=

.PHONY: bench-alerts bench-notify
BENCH_TARGETS += bench-alerts bench-notify

bench-alerts: build mailpit ## threshold crossed at the agent to e-mail accepted by Mailpit: p50, p99 (target < 2 s) under ALERTS_AGENTS agents
	$(GO) build -o $(BIN)/fleet-loadgen ./bench/cmd/fleet-loadgen
	$(GO) build -o $(BIN)/fleet-alertbench ./bench/cmd/fleet-alertbench
	$(BIN)/fleet-alertbench --relay $(BIN)/fleet-relay --loadgen $(BIN)/fleet-loadgen --agents $(ALERTS_AGENTS) \
		--points $(ALERTS_POINTS) --cross-every $(ALERTS_CROSS_EVERY) --duration $(ALERTS_DURATION) $(ALERTBENCH_FLAGS)

bench-notify: bench-tool ## notifications per second through the outbox: e-mail (SMTP on loopback) and chat (HTTPS webhook), SQLite
	$(BENCHREPORT) gotest --set notify-outbox -- $(GO) test -run '^$$' -bench '^Benchmark(Email|Slack)ThroughOutbox$$' -benchtime 2000x ./cloud/webhook/
