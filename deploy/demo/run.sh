#!/usr/bin/env bash
# Fleet demo: a relay on a SQLite file with a demo organization, an API key
# holding every scope, three simulated IG-500 gateways and one IG-100.
# Used by `make run`. Idempotent: the database and the demo's credentials
# under $DATA are reused when present (delete $DATA to start over).
#
# Variables: BIN (bin), DATA (.fleet-demo), LISTEN (127.0.0.1:8080).
set -euo pipefail

BIN=${BIN:-bin}
DATA=${DATA:-.fleet-demo}
LISTEN=${LISTEN:-127.0.0.1:8080}
RELAY="$BIN/fleet-relay"
AGENT="$BIN/fleet-agent"
DB="$DATA/relay.db"
CREDS="$DATA/demo.env" # the demo's key and device tokens (mode 0600, demo only)

mkdir -p "$DATA"
chmod 700 "$DATA"

json_field() { # json_field FIELD: read one string field of a JSON object on stdin
	sed -n 's/^ *"'"$1"'": *"\([^"]*\)".*/\1/p' | head -n 1
}

if [[ ! -f "$CREDS" || ! -f "$DB" ]]; then
	rm -f "$DB" "$DB-wal" "$DB-shm" "$CREDS"
	echo "fleet demo: creating $DB"
	org=$("$RELAY" org create --db "$DB" --name "Demo Industries" --json | json_field id)
	key=$("$RELAY" key create --db "$DB" --org "$org" --name demo \
		--scopes devices:read,devices:write,metrics:read,logs:read,alerts:read,alerts:write --expires 365d --json | json_field key)
	umask 077
	{
		echo "ORG=$org"
		echo "KEY=$key"
	} >"$CREDS.tmp"
	n=0
	for spec in "IG-500:Press line 1:Hall A" "IG-500:Press line 2:Hall A" "IG-500:Packaging:Hall B" "IG-100:Gatehouse:Gate 1"; do
		IFS=: read -r model name location <<<"$spec"
		n=$((n + 1))
		out=$("$RELAY" device add --db "$DB" --org "$org" --name "$name" --serial "DEMO-$n" --model "$model" --location "$location" --json)
		echo "DEVICE_$n=\"$(json_field id <<<"$out") $(json_field token <<<"$out") $model\"" >>"$CREDS.tmp"
	done
	mv "$CREDS.tmp" "$CREDS"
fi

# shellcheck disable=SC1090
source "$CREDS"

pids=()
cleanup() {
	trap - EXIT INT TERM
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$RELAY" serve --db "$DB" --listen "$LISTEN" &
relay_pid=$!
pids+=("$relay_pid")

for _ in $(seq 1 100); do
	if curl -fsS "http://$LISTEN/healthz" >/dev/null 2>&1; then break; fi
	if ! kill -0 "$relay_pid" 2>/dev/null; then
		echo "fleet demo: the relay did not start" >&2
		exit 1
	fi
	sleep 0.1
done

if [[ -x "$AGENT" ]]; then
	for n in 1 2 3 4; do
		var="DEVICE_$n"
		read -r id token model <<<"${!var}"
		mkdir -p "$DATA/agent-$n"
		"$AGENT" --relay "ws://$LISTEN" --token "$token" --hw sim --model "$model" \
			--state-dir "$DATA/agent-$n" --heartbeat 5s --metrics-interval 30s \
			>>"$DATA/agent-$n.log" 2>&1 &
		pids+=("$!")
	done
	agents="4 simulated gateways (logs in $DATA/agent-N.log)"
else
	agents="no agents: $AGENT is missing (run make build)"
fi

read -r first_id _ _ <<<"$DEVICE_1"
cat <<MSG

  Fleet demo relay on http://$LISTEN with $agents
  Database:  $DB
  API key:   $KEY

  curl -s -H "Authorization: Bearer $KEY" http://$LISTEN/api/v1/public/devices
  curl -s -H "Authorization: Bearer $KEY" http://$LISTEN/api/v1/public/devices/$first_id/serial

  Ctrl-C stops the relay and the agents.

MSG

wait "$relay_pid"
