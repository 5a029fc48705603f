# The panel's front end (cloud/panel, docs/panel.md): htmx and uPlot come
# from npm, pinned in cloud/panel/web/package-lock.json. `make build` (and
# so `make run`) and the unit tests (Makefile) first run `npm ci` there and copy the
# three files the pages load into cloud/panel/static/vendor/ (ignored by
# git), where go:embed picks them up. A relay built without them (plain `go
# build`) serves the panel with a banner saying so, without charts or live
# values. node and npm are installed with apt-get when missing (root).
#
# test-browser: the browser suite (test/browser): Debian's chromium driven
# by playwright-core from npm against the real relay and agents; installs
# chromium when missing; `make test` runs it among the end-to-end suites
# (test-e2e, Makefile). panel-screenshots: the same suite, saving its
# screenshots into docs/panel/ for docs/panel.md.

PANEL_WEB    := cloud/panel/web
PANEL_VENDOR := cloud/panel/static/vendor
PANEL_FILES  := $(PANEL_VENDOR)/htmx.min.js $(PANEL_VENDOR)/uPlot.iife.min.js $(PANEL_VENDOR)/uPlot.min.css

.PHONY: panel-assets test-browser panel-screenshots node-tools browser-tools

panel-assets: $(PANEL_FILES) ## the panel's htmx and uPlot from npm into cloud/panel/static/vendor/ (go:embed)

$(PANEL_FILES): $(PANEL_WEB)/package.json $(PANEL_WEB)/package-lock.json | node-tools
	cd $(PANEL_WEB) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	cp $(PANEL_WEB)/node_modules/htmx.org/dist/htmx.min.js $(PANEL_WEB)/node_modules/uplot/dist/uPlot.iife.min.js $(PANEL_WEB)/node_modules/uplot/dist/uPlot.min.css $(PANEL_VENDOR)/

node-tools: ## node and npm (apt-get) when missing
	@command -v npm >/dev/null 2>&1 || { echo "installing nodejs and npm for the panel's front end"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q nodejs npm || { apt-get update -q && apt-get install -y -q nodejs npm; }; }

BROWSER_DIR := test/browser

browser-tools: node-tools ## chromium (apt-get) and playwright-core (npm) for the browser suite
	@command -v chromium >/dev/null 2>&1 || { echo "installing chromium for the browser tests"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q chromium || { apt-get update -q && apt-get install -y -q chromium; }; }
	cd $(BROWSER_DIR) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error

test-browser: panel-assets browser-tools ## the panel in headless Chromium against the demo's relay and agents (test/browser)
	FLEET_BROWSER=1 $(GO) test -count=1 -timeout 10m -run '^TestBrowser' ./$(BROWSER_DIR)/

panel-screenshots: panel-assets browser-tools ## the browser suite, saving its screenshots into docs/panel/
	FLEET_BROWSER=1 FLEET_SCREENSHOTS=$(CURDIR)/docs/panel $(GO) test -count=1 -timeout 10m -run '^TestBrowser' ./$(BROWSER_DIR)/

# bench-panel: the fleet page with 10,000 devices and a device page with 7
# days of metrics, rendered by bin/fleet-relay; p99 of each beside DESIGN.md's
# 50 ms (bench/panelbench).
.PHONY: bench-panel
BENCH_TARGETS += bench-panel

PANELBENCH_FLAGS ?=

bench-panel: build ## the fleet page with 10,000 devices and a device page with 7 days of metrics, p99 beside 50 ms
	$(GO) build -o $(BIN)/fleet-panelbench ./bench/cmd/fleet-panelbench
	$(BIN)/fleet-panelbench --relay $(BIN)/fleet-relay $(PANELBENCH_FLAGS)

# bench-panel-live: the panel's live updates (issue 29) with 1,000 open
# Server-Sent Events streams (125 signed-in sessions × 8 tabs) on one
# bin/fleet-relay (SQLite, loopback) while another process stores 10
# devices' heartbeats a second in the same file: relay RSS per open stream,
# relay CPU per change pushed to a stream, idle CPU, and the store-to-event
# p99 beside the 2 s bound (bench/livebench, docs/benchmarks.md).
.PHONY: bench-panel-live
BENCH_TARGETS += bench-panel-live

LIVEBENCH_FLAGS ?=

bench-panel-live: build ## 1,000 open live streams on one relay: RSS per stream, CPU per pushed change, push p99
	$(GO) build -o $(BIN)/fleet-livebench ./bench/cmd/fleet-livebench
	$(BIN)/fleet-livebench --relay $(BIN)/fleet-relay $(LIVEBENCH_FLAGS)
