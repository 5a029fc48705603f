# README checks (readme_test.go, root package) run the README's curl
# examples with curl and its webhook signature lines with openssl (as do
# cloud/webhook's tests of docs/webhooks.md), and the demo's test runs curl.
# test-unit and test-demo (Makefile) install both first when missing
# (Debian packages; needs root).

.PHONY: test-tools

test-tools: ## curl, openssl and dbus-daemon (apt-get) when missing, for the README's, the demo's and the reboot tests
	@missing=; for c in curl openssl dbus-daemon; do command -v $$c >/dev/null 2>&1 || missing="$$missing $$c"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing for the README, webhook and reboot tests"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q $$missing || { apt-get update -q && apt-get install -y -q $$missing; }; \
	fi
