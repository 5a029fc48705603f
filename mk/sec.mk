# Security and reliability (issue 15): fuzzing, the soak under faults, and
# the tools their tests need.
#
# The OpenAPI test (cloud/api/openapi_typescript_test.go) runs
# openapi-typescript and tsc from the npm registry (pinned in
# cloud/api/testdata/openapi-typescript/package-lock.json, installed by the
# test into .cache/): node and npm come from Debian when missing.

.PHONY: test-tools-npm

test-unit: test-tools-npm

test-tools-npm:
	@command -v npm >/dev/null 2>&1 || { \
	  echo "installing nodejs and npm for the OpenAPI client test"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q nodejs npm || { apt-get update -q && apt-get install -y -q nodejs npm; }; }
