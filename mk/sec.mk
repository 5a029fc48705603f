# Security and reliability (issue 15): fuzzing, the soak under faults, and
# the tools their tests need.
#
# The OpenAPI test (cloud/api/openapi_typescript_test.go) runs
# openapi-typescript and tsc from the npm registry (pinned in
# cloud/api/testdata/openapi-typescript/package-lock.json, installed by the
# test into .cache/); node and npm come from node-tools (mk/panel.mk), a
# prerequisite of test-unit (Makefile).

# Fuzzing: every Fuzz* target of the product's packages (cloud, agent,
# shared, hw), one after the other, FUZZTIME each. `make fuzz` runs them for
# as long as asked (make fuzz FUZZTIME=10m); `make test` runs each briefly
# (test-fuzz, FUZZ_BRIEF each). A crash stops the run; go test has written
# the failing input to the package's testdata/fuzz/<target>/, where it stays
# as a regression input once the bug is fixed (plain `go test` runs every
# input there). The run prints that input's contents (they are small) and
# whether it fails again replayed alone, so that a failure in CI, whose
# checkout goes with the input, can be reproduced from the log. Seed corpora live there too. Go 1.26's fuzzing engine may
# report `context deadline exceeded` as the -fuzztime window closes on a
# loaded machine (golang/go#75804, fixed in Go 1.27); such a run wrote no
# input, so it passes when the target's corpus then replays clean.

FUZZTIME   ?= 1m
FUZZ_BRIEF ?= 3s
FUZZ_DIRS  := cloud agent shared hw

.PHONY: fuzz test-fuzz

fuzz: ## every fuzz target for FUZZTIME each (default 1m): make fuzz FUZZTIME=10m
	@$(MAKE) --no-print-directory fuzz-run FUZZ_FOR=$(FUZZTIME)

test-fuzz: ## every fuzz target for FUZZ_BRIEF (3 s) each, as make test runs them
	@$(MAKE) --no-print-directory fuzz-run FUZZ_FOR=$(FUZZ_BRIEF)

.PHONY: fuzz-run
fuzz-run:
	@set -e; start=$$(date +%s); n=0; \
	for ft in $$(grep -r --include='*_test.go' -o '^func Fuzz[A-Za-z0-9_]*' $(FUZZ_DIRS) | sed 's/:func /:/' | sort); do \
		file=$${ft%%:*}; target=$${ft##*:}; dir=./$$(dirname $$file); \
		echo "fuzz: $$dir $$target for $(FUZZ_FOR)"; \
		if ! $(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZ_FOR) $$dir > .fuzz.log 2>&1; then \
			if grep -q 'context deadline exceeded' .fuzz.log && ! grep -q 'Failing input written to' .fuzz.log && \
				echo "fuzz: the corpus replayed alone (go test -run '^$$target\$$' $$dir):" >> .fuzz.log && \
				$(GO) test -count=1 -run "^$$target\$$" $$dir >> .fuzz.log 2>&1; then \
				echo "  the fuzzing engine's deadline race at the end of -fuzztime (golang/go#75804, fixed in Go 1.27): no failing input written, and the corpus replays clean"; \
			else \
				cat .fuzz.log; \
				input=$$(sed -n 's|^.*Failing input written to \(testdata/fuzz/[^ ]*\).*$$|\1|p' .fuzz.log | head -n 1); \
				rm -f .fuzz.log; \
				if [ -n "$$input" ] && [ -f "$$dir/$$input" ]; then \
					echo "fuzz: $$target failed on the input $$dir/$$input; its contents (to reproduce the run elsewhere, copy them to that file):"; \
					echo "----8<----"; head -c 8192 "$$dir/$$input"; echo "---->8----"; \
					if $(GO) test -count=1 -run "^$$target/$${input##*/}\$$" $$dir > /dev/null 2>&1; then \
						echo "fuzz: replayed alone, the input passes (the failure came from the run, not from the input alone)"; \
					else \
						echo "fuzz: replayed alone, the input fails again: go test -run '^$$target/$${input##*/}\$$' $$dir"; \
					fi; \
				else \
					echo "fuzz: $$target failed and wrote no input: the failure above is the fuzzing engine's or a seed's"; \
				fi; \
				exit 1; \
			fi; \
		fi; \
		grep 'execs:' .fuzz.log | tail -n 1 | sed 's/^/  /' || true; \
		n=$$((n+1)); \
	done; rm -f .fuzz.log; echo "fuzz: $$n targets, $$(( $$(date +%s) - start )) s"

# Soak under faults (bench/soak, bench/cmd/fleet-soak; docs/reliability.md):
#   make soak SOAK_DURATION=30m   a relay and SOAK_AGENTS (2,000) simulated
#                                 agents through toxiproxy faults, kill -9 of
#                                 the relay every 2 minutes, a full disk and a
#                                 flapping webhook receiver in the first 60 %,
#                                 then a steady window;
#                                 exits non-zero on any loss or RSS growth
#                                 over 5 % once steady.
#   make bench                    bench-soak: the same for 10 minutes, as
#                                 rows of the report.
# Its short variant (100 agents, about 75 s) runs in make test
# (bench/soak's TestShortSoak, make test-soak). A size-limited tmpfs holds the database
# (mounted as root); without root the disk-full phase is skipped and the
# report says so.

SOAK_DURATION ?= 10m
SOAK_AGENTS   ?= 2000

.PHONY: soak bench-soak

soak: build ## the soak under faults for SOAK_DURATION (10m) with SOAK_AGENTS (2,000) agents
	$(GO) run ./bench/cmd/fleet-soak --relay $(BIN)/fleet-relay --duration $(SOAK_DURATION) --agents $(SOAK_AGENTS)

bench-soak: bench-tool ## the soak for 10 minutes, as rows of the bench report
	$(GO) run ./bench/cmd/fleet-soak --relay $(BIN)/fleet-relay --duration 10m --agents $(SOAK_AGENTS)

BENCH_TARGETS += bench-soak
