# Packaging (docs/deploy.md):
#   make relay-static  static fleet-relay (cgo SQLite, glibc linked in):
#                      $(BIN)/fleet-relay-static. The container image's build
#                      stage runs this same target (deploy/container/Dockerfile)
#                      and the .deb ships the same binary.
#   make package       dist/fleet-agent_<version>_{amd64,arm64,armhf}.deb and
#                      dist/fleet-relay_<version>_amd64.deb, built with nfpm
#                      (pinned below, built once into bin/tools; not in go.mod).
#   make package-deps  what the deploy tests need from Debian (dpkg-dev,
#                      systemd for systemd-analyze, ca-certificates, gcc,
#                      debootstrap, systemd-container for systemd-nspawn),
#                      installed with apt-get when missing.
#   make nspawn-root   a minimal Debian bookworm root with systemd (debootstrap,
#                      from the mirror of this machine's apt sources), kept in
#                      $(NSPAWN_ROOT): the deploy tests boot a copy with
#                      systemd-nspawn, install the .debs in it and run the units.
# The deploy tests (make test-deploy: go test ./deploy/) run `make package-deps package` first,
# with DIST and BIN in a temporary folder of their own.

NFPM_VERSION := v2.43.0
TOOLS        ?= bin/tools
NFPM         := $(TOOLS)/nfpm-$(NFPM_VERSION)
DIST         := dist

# The relay's static build, defined once: cgo for SQLite, glibc linked in
# statically; netgo and osusergo keep glibc's NSS (which cannot be linked
# statically) out, and SQLite's extension loading (dlopen) is left out.
RELAY_STATIC_TAGS    := netgo osusergo sqlite_omit_load_extension
RELAY_STATIC_LDFLAGS := -s -w -linkmode external -extldflags -static

# Agent architectures: GOARCH[:GOARM]=Debian architecture.
AGENT_DEB_ARCHES := amd64:=amd64 arm64:=arm64 arm:7=armhf

# Debian version of the work tree (deploy/package/version.sh: 0.0.0~git<date>.<sha>
# until the first tag), computed once and only when a target uses it.
ifndef PKG_VERSION
PKG_VERSION = $(eval PKG_VERSION := $(shell deploy/package/version.sh))$(PKG_VERSION)
endif

# The packaged agent reports the package's version (fleet-agent --version,
# agentVersion): the last -X of a variable wins over AGENT_LDFLAGS' own.
PKG_AGENT_VERSION = -X github.com/fleet/fleet/agent.Version=$(PKG_VERSION)

# Kept across clones (a fresh clone does not pay the ~70 s debootstrap again).
NSPAWN_ROOT ?= /var/cache/fleet-deploy/nspawn-bookworm

.PHONY: relay-static package package-deps package-clean nspawn-root

relay-static: ## bin/fleet-relay-static: cgo SQLite, glibc linked in statically
	CGO_ENABLED=1 $(GO) build -trimpath -tags '$(RELAY_STATIC_TAGS)' -ldflags '$(RELAY_STATIC_LDFLAGS)' \
		-o $(BIN)/fleet-relay-static ./cloud/cmd/fleet-relay

$(NFPM):
	@mkdir -p $(TOOLS)
	GOBIN=$(abspath $(TOOLS)) GOFLAGS= $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)
	mv $(TOOLS)/nfpm $@

# Staging: the binary, the maintainer scripts (deploy/package/*.in with the
# package's name, extra groups and config file filled in) and the nfpm
# configuration (deploy/package/<pkg>.yaml pointing at this stage), all under
# $(DIST)/stage, so that DIST=<folder> gives a build of its own (the deploy
# tests use one, so that concurrent runs never share files).
STAGE = $(abspath $(DIST))/stage

define pkg_stage
	@mkdir -p $(STAGE)/$(1)/scripts
	@for s in postinst prerm postrm; do \
		sed -e 's|@PKG@|$(1)|g' -e 's|@EXTRA_GROUPS@|$(2)|g' -e 's|@CONFFILE@|$(3)|g' \
			deploy/package/$$s.in > $(STAGE)/$(1)/scripts/$$s; \
	done
	@sed -e 's|@STAGE@|$(STAGE)|g' deploy/package/$(1).yaml > $(STAGE)/$(1).yaml
endef

package: $(NFPM) relay-static ## dist/*.deb: fleet-agent for amd64, arm64, armhf and fleet-relay for amd64 (nfpm)
	@rm -f $(DIST)/fleet-agent_*.deb $(DIST)/fleet-relay_*.deb
	$(call pkg_stage,fleet-agent,dialout gpio,agent.yaml)
	$(call pkg_stage,fleet-relay,,relay.env)
	@set -e; for t in $(AGENT_DEB_ARCHES); do \
		goarch=$${t%%:*}; rest=$${t#*:}; goarm=$${rest%%=*}; deb=$${t##*=}; \
		echo "package: fleet-agent $(PKG_VERSION) $$deb"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$goarch GOARM=$$goarm $(GO) build -trimpath -ldflags='$(AGENT_LDFLAGS) $(PKG_AGENT_VERSION)' \
			-o $(STAGE)/fleet-agent/fleet-agent ./agent/cmd/fleet-agent; \
		PKG_VERSION=$(PKG_VERSION) PKG_ARCH=$$deb $(NFPM) pkg --packager deb \
			--config $(STAGE)/fleet-agent.yaml --target $(DIST)/fleet-agent_$(PKG_VERSION)_$$deb.deb; \
	done
	@echo "package: fleet-relay $(PKG_VERSION) amd64"
	@cp $(BIN)/fleet-relay-static $(STAGE)/fleet-relay/fleet-relay
	@PKG_VERSION=$(PKG_VERSION) PKG_ARCH=amd64 $(NFPM) pkg --packager deb \
		--config $(STAGE)/fleet-relay.yaml --target $(DIST)/fleet-relay_$(PKG_VERSION)_amd64.deb
	@ls -l $(DIST)/*.deb

# systemd-container must match the installed systemd's version exactly;
# when that version is no longer in the archive, apt upgrades systemd.
package-deps: ## what the deploy tests need from Debian (apt-get) when missing
	@missing=; \
	command -v dpkg-deb >/dev/null 2>&1 || missing="$$missing dpkg-dev"; \
	command -v systemd-analyze >/dev/null 2>&1 || missing="$$missing systemd"; \
	command -v gcc >/dev/null 2>&1 || missing="$$missing gcc libc6-dev"; \
	[ -f /usr/lib/$$(gcc -dumpmachine 2>/dev/null)/libc.a ] || missing="$$missing libc6-dev"; \
	[ -f /etc/ssl/certs/ca-certificates.crt ] || missing="$$missing ca-certificates"; \
	command -v useradd >/dev/null 2>&1 || missing="$$missing passwd"; \
	command -v debootstrap >/dev/null 2>&1 || missing="$$missing debootstrap"; \
	command -v setpriv >/dev/null 2>&1 || missing="$$missing util-linux"; \
	command -v systemd-nspawn >/dev/null 2>&1 || missing="$$missing systemd-container"; \
	if [ -n "$$missing" ]; then \
		echo "package-deps: installing$$missing"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -q >/dev/null || exit 1; \
		v=$$(dpkg-query -W -f='$${Version}' systemd 2>/dev/null); \
		pinned=; for p in $$missing; do \
			if [ "$$p" = systemd-container ] && [ -n "$$v" ] && apt-cache show "systemd-container=$$v" >/dev/null 2>&1; then \
				p="systemd-container=$$v"; fi; \
			pinned="$$pinned $$p"; \
		done; \
		apt-get install -y -q $$pinned >/dev/null || apt-get install -y -q $$pinned; \
	fi

# debootstrap into a temporary folder, then rename: an interrupted run
# leaves no half-made root; flock serializes concurrent test runs.
nspawn-root: ## a minimal Debian bookworm root with systemd for the deploy tests (debootstrap)
	@mkdir -p $(dir $(NSPAWN_ROOT))
	@flock $(NSPAWN_ROOT).lock sh -c ' \
	if [ -f $(NSPAWN_ROOT)/.complete ]; then exit 0; fi; \
	mirror=$$(awk "/^URIs:/ { print \$$2; exit }" /etc/apt/sources.list.d/debian.sources 2>/dev/null); \
	[ -n "$$mirror" ] || mirror=$$(awk "/^deb / { print \$$2; exit }" /etc/apt/sources.list 2>/dev/null); \
	echo "nspawn-root: debootstrap bookworm into $(NSPAWN_ROOT) ($${mirror:-default mirror})"; \
	rm -rf $(NSPAWN_ROOT).tmp $(NSPAWN_ROOT) && \
	debootstrap --variant=minbase --include=systemd,dbus,passwd bookworm $(NSPAWN_ROOT).tmp $$mirror >$(NSPAWN_ROOT).log 2>&1 || \
		{ tail -20 $(NSPAWN_ROOT).log; exit 1; }; \
	touch $(NSPAWN_ROOT).tmp/.complete && mv $(NSPAWN_ROOT).tmp $(NSPAWN_ROOT)'

package-clean: ## remove dist/
	rm -rf $(DIST)

.PHONY: package-version
package-version:
	@echo $(PKG_VERSION)

minisign: ## Debian's minisign (apt-get) when missing: tests sign agent releases with it
	@command -v minisign >/dev/null || { [ "$$(id -u)" = 0 ] && \
	  { apt-get install -y -q minisign >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q minisign >/dev/null; }; }; }
	@command -v minisign >/dev/null || { echo "minisign missing: apt-get install minisign" >&2; exit 1; }
