# Serial I/O (hw/modbus, hw/uart, agent/passthrough): benchmarks.
#   bench-serial-modbus       Modbus RTU transaction time vs the wire-time formula
#                             at 9600 and 115200 baud (target: within 10 %)
#   bench-serial-passthrough  passthrough round trip and throughput beside ser2net
#                             on the same pty pair (target: at least as fast)
# The passthrough bench installs Debian's ser2net when it is missing.

BENCH_TARGETS += bench-serial-modbus bench-serial-passthrough

.PHONY: bench-serial-modbus bench-serial-passthrough serial-ser2net

bench-serial-modbus: bench-tool ## Modbus RTU transaction time beside the wire-time formula
	@echo "== serial: Modbus RTU transaction time vs (request+reply bytes) x 11 bits / baud + 2 x t3.5"
	$(BENCHREPORT) gotest --set modbus -- $(GO) test -run '^$$' -bench 'RTUTransaction' -benchtime 200x ./hw/modbus/

bench-serial-passthrough: serial-ser2net bench-tool ## passthrough round trip and throughput beside ser2net
	@echo "== serial: passthrough vs ser2net on one pseudo-terminal pair"
	$(BENCHREPORT) gotest --set passthrough -- $(GO) test -run '^$$' -bench 'PassthroughVsSer2net' -benchtime 1x ./agent/passthrough/

serial-ser2net:
	@command -v ser2net >/dev/null 2>&1 || { \
	  echo "installing ser2net (Debian package) for the passthrough benchmark"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q ser2net >/dev/null 2>&1 || \
	  { apt-get update -q && apt-get install -y -q ser2net; } || \
	  echo "ser2net could not be installed: the passthrough bench measures ours alone"; }

# hw/modbus's reference test (TestLibmodbusReference) compiles a slave on
# Debian's libmodbus with gcc and reads its registers back with mbpoll, so
# the byte orders are checked against the reference implementations. A
# prerequisite of test-unit and test-binaries (Makefile); installed when missing (root).
.PHONY: modbus-tools
modbus-tools: ## gcc, libmodbus-dev and mbpoll (apt-get) when missing, for the libmodbus reference tests (hw/modbus, test/e2e)
	@missing=; command -v gcc >/dev/null 2>&1 || missing="$$missing gcc"; \
	[ -f /usr/include/modbus/modbus.h ] || missing="$$missing libmodbus-dev"; \
	command -v mbpoll >/dev/null 2>&1 || missing="$$missing mbpoll"; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing for hw/modbus's libmodbus reference test"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q $$missing || { apt-get update -q && apt-get install -y -q $$missing; }; \
	fi
