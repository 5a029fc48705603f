# E-mail notifications are tested against a real SMTP server on loopback:
# Mailpit (github.com/axllent/mailpit), built with `go install` at the
# pinned version into the user's cache directory (test/rig/mailpit finds
# it there, and builds it itself when this target did not run).

MAILPIT_VERSION := v1.33.1
MAILPIT_DIR     := $(shell echo $${XDG_CACHE_HOME:-$$HOME/.cache})/fleet-tools/mailpit-$(MAILPIT_VERSION)

.PHONY: mailpit

mailpit: ## Mailpit $(MAILPIT_VERSION), a real SMTP server for the e-mail notification tests (go install into the cache directory)
	@[ -x "$(MAILPIT_DIR)/mailpit" ] || { echo "building mailpit $(MAILPIT_VERSION) for the e-mail notification tests"; \
	  mkdir -p "$(MAILPIT_DIR)" && GOBIN="$(MAILPIT_DIR)" CGO_ENABLED=0 $(GO) install github.com/axllent/mailpit@$(MAILPIT_VERSION); }
