# Webhooks and alerts: benchmark of signal-change-to-POST latency and of
# sustained deliveries per second with the durable outbox.
.PHONY: bench-webhook

bench-webhook: ## signal change to POST latency and deliveries per second with the durable outbox
	$(GO) run ./bench/cmd/fleet-webhookbench

BENCH_TARGETS += bench-webhook
