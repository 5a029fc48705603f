#!/usr/bin/env bash
# Fleet demo (`make run`, see docs/demo.md): a relay on a SQLite file with a
# demo organization, an OWNER who signs in to the panel and an API key
# holding every scope; three simulated
# gateways (two IG-500 whose Modbus, CAN-FD and GPIO channels are configured
# through the public API, with named points: a temperature and a counter read
# over Modbus and the signals of demo.dbc imported on CAN-FD; one IG-100); a
# local HTTPS webhook sink that
# verifies and prints every webhook; forwarding on for the first IG-500 and
# the organization's alert webhook pointed at the sink.
#
# Everything lives under $DATA and is reused by the next run (delete $DATA to
# start over). Ctrl-C, SIGTERM, or the end of the process WATCH_PID (make,
# by default this script's parent) stops every process the demo started.
#
# Variables: BIN (bin), DATA (.fleet-demo), LISTEN (127.0.0.1:8080),
# SINK_LISTEN (127.0.0.1:9443), METRICS_LISTEN (127.0.0.1:9464, the relay's
# Prometheus metrics; none or api as --metrics-listen takes them),
# WATCH_PID ($PPID).
set -euo pipefail

BIN=${BIN:-bin}
DATA=${DATA:-.fleet-demo}
LISTEN=${LISTEN:-127.0.0.1:8080}
SINK_LISTEN=${SINK_LISTEN:-127.0.0.1:9443}
METRICS_LISTEN=${METRICS_LISTEN:-127.0.0.1:9464}
WATCH_PID=${WATCH_PID:-$PPID}

RELAY="$BIN/fleet-relay"
AGENT="$BIN/fleet-agent"
SINK="$BIN/fleet-webhook-sink"
DB="$DATA/relay.db"
CREDS="$DATA/demo.env" # key, webhook secret, device tokens (mode 0600, demo only)
DBC="$(dirname "$0")/demo.dbc" # the CAN signals imported as canfd-1's points
LAYOUT=2               # demo.env's DEMO_LAYOUT; 1 (no marker) had four gateways
RELAY_URL="http://$LISTEN"
API="$RELAY_URL/api/v1/public"
SIGNALS_URL="https://$SINK_LISTEN/signals"
ALERTS_URL="https://$SINK_LISTEN/alerts"

# The gateways: model, name, location. The first forwards its signals.
GATEWAYS=("IG-500|Press line 1|Hall A" "IG-500|Packaging line|Hall B" "IG-100|Gatehouse|Gate 1")

say() { printf 'fleet demo: %s\n' "$*"; }
die() {
	printf 'fleet demo: %s\n' "$*" >&2
	exit 1
}

for tool in "$RELAY" "$AGENT" "$SINK"; do
	[[ -x $tool ]] || die "$tool is missing: run it with 'make run'"
done
[[ -f $DBC ]] || die "$DBC is missing"
command -v curl >/dev/null || die "curl is needed (apt-get install curl)"

# busy HOST:PORT: whether something accepts connections there.
busy() {
	local host=${1%:*} port=${1##*:}
	host=${host#[}
	host=${host%]}
	(exec 3<>"/dev/tcp/$host/$port") 2>/dev/null
}
mkdir -p "$DATA"
chmod 700 "$DATA"
# One demo per data folder: the lock is held by this script and every process
# it starts (they inherit the descriptor), so it ends with the last of them.
exec 9>>"$DATA/.lock"
if command -v flock >/dev/null && ! flock -n 9; then
	die "another demo is running on $DATA (stop it with Ctrl-C, or use another folder: make run DATA=.fleet-demo-2)"
fi

busy "$LISTEN" && die "$LISTEN is already in use (another 'make run'?). Pick another address: make run LISTEN=127.0.0.1:18080"
busy "$SINK_LISTEN" && die "$SINK_LISTEN (the webhook sink) is already in use. Pick another address: make run SINK_LISTEN=127.0.0.1:19443"
# The relay's metrics listener: given explicitly, so that the relay stops
# (rather than runs without metrics) if the address is taken after this check.
case $METRICS_LISTEN in
none | api) ;;
*) busy "$METRICS_LISTEN" && die "$METRICS_LISTEN (the relay's metrics) is already in use. Pick another address: make run METRICS_LISTEN=127.0.0.1:19464, or METRICS_LISTEN=none" ;;
esac

json_field() { # json_field FIELD: one string field of the JSON object on stdin
	sed -n 's/^ *"'"$1"'": *"\([^"]*\)".*/\1/p' | head -n 1
}

umask 077

if [[ -f $CREDS ]] && ! grep -qx "DEMO_LAYOUT=$LAYOUT" "$CREDS"; then
	say "$DATA holds an older demo (four gateways); starting it over"
	rm -rf "$DB" "$DB-wal" "$DB-shm" "$CREDS" "$DATA"/agent-* "$DATA"/*.log
fi

if [[ ! -f $CREDS || ! -f $DB ]]; then
	rm -f "$DB" "$DB-wal" "$DB-shm" "$CREDS"
	rm -rf "$DATA"/agent-*
	say "creating $DB: organization, API key, ${#GATEWAYS[@]} gateways"
	out=$("$RELAY" org create --db "$DB" --name "Demo Industries" --json)
	org=$(json_field id <<<"$out")
	secret=$(json_field webhookSecret <<<"$out")
	key=$("$RELAY" key create --db "$DB" --org "$org" --name demo \
		--scopes devices:read,devices:write,metrics:read,logs:read,alerts:read,alerts:write --expires 365d --json | json_field key)
	[[ -n $org && -n $secret && -n $key ]] || die "could not create the demo organization and key"
	{
		echo "DEMO_LAYOUT=$LAYOUT"
		echo "ORG=$org"
		echo "KEY=$key"
		echo "WEBHOOK_SECRET=$secret"
	} >"$CREDS.tmp"
	n=0
	for g in "${GATEWAYS[@]}"; do
		IFS='|' read -r model name location <<<"$g"
		n=$((n + 1))
		out=$("$RELAY" device add --db "$DB" --org "$org" --name "$name" --serial "DEMO-$n" --model "$model" --location "$location" --json)
		echo "DEVICE_$n=\"$(json_field id <<<"$out") $(json_field token <<<"$out")\"" >>"$CREDS.tmp"
	done
	mv "$CREDS.tmp" "$CREDS"
fi

# shellcheck disable=SC1090
source "$CREDS"

# The panel's OWNER (added to demo folders made before the panel too).
PANEL_EMAIL=${PANEL_EMAIL:-owner@demo.example}
if [[ -z ${PANEL_PASSWORD:-} ]]; then
	PANEL_PASSWORD=$(head -c 512 /dev/urandom | LC_ALL=C tr -dc 'A-Za-z0-9')
	PANEL_PASSWORD=${PANEL_PASSWORD:0:20}
	printf '%s\n' "$PANEL_PASSWORD" | "$RELAY" user create --db "$DB" --org "$ORG" --email "$PANEL_EMAIL" \
		--role OWNER --password-stdin --json >/dev/null || die "could not create the panel's OWNER"
	printf 'PANEL_EMAIL=%s\nPANEL_PASSWORD=%s\n' "$PANEL_EMAIL" "$PANEL_PASSWORD" >>"$CREDS"
fi

# Children get SIGTERM if this script dies without cleaning up (kill -9).
guard=()
if command -v setpriv >/dev/null && setpriv --pdeathsig TERM true 2>/dev/null; then
	guard=(setpriv --pdeathsig TERM)
fi

cleanup() {
	local code=$?
	trap - EXIT INT TERM
	local pids
	pids=$(jobs -p)
	if [[ -n $pids ]]; then
		# shellcheck disable=SC2086
		kill -TERM $pids 2>/dev/null || true
		for _ in $(seq 1 50); do
			# shellcheck disable=SC2086
			kill -0 $pids 2>/dev/null || break
			sleep 0.2
		done
		# shellcheck disable=SC2086
		kill -KILL $pids 2>/dev/null || true
		wait 2>/dev/null || true
		say "stopped (data kept in $DATA; delete it to start over)"
	fi
	exit "$code"
}
trap cleanup EXIT
trap 'exit 0' INT # Ctrl-C is how the demo is stopped: a clean exit for make
trap 'exit 143' TERM

# wait_for WHAT PID CHECK...: run CHECK until it succeeds, for up to 60 s
# (a machine busy with builds can be slow), while PID lives; if it ends, the
# end of WAIT_LOG (when set) says why.
wait_for() {
	local what=$1 pid=$2
	shift 2
	for _ in $(seq 1 600); do
		"$@" && return 0
		if ! kill -0 "$pid" 2>/dev/null; then
			[[ -n ${WAIT_LOG:-} ]] && die "the $what stopped; the end of $WAIT_LOG:
$(tail -n 3 "$WAIT_LOG")"
			die "the $what stopped; see above or in $DATA"
		fi
		sleep 0.1
	done
	die "the $what was not ready within 60 s"
}

FLEET_WEBHOOK_SECRET=$WEBHOOK_SECRET "${guard[@]}" "$SINK" --listen "$SINK_LISTEN" \
	--cert "$DATA/sink-cert.pem" --key "$DATA/sink-key.pem" --prefix "sink | " &
sink_pid=$!
sink_up() { curl -fsS -o /dev/null --max-time 2 --cacert "$DATA/sink-cert.pem" "https://$SINK_LISTEN/" 2>/dev/null; }
wait_for "webhook sink" "$sink_pid" sink_up

"${guard[@]}" "$RELAY" serve --db "$DB" --listen "$LISTEN" --metrics-listen "$METRICS_LISTEN" --shutdown-timeout 5s \
	--webhook-ca "$DATA/sink-cert.pem" --webhook-allow-private >>"$DATA/relay.log" 2>&1 &
relay_pid=$!
relay_up() { curl -fsS -o /dev/null --max-time 2 "$RELAY_URL/readyz" 2>/dev/null; }
WAIT_LOG="$DATA/relay.log" wait_for "relay (log: $DATA/relay.log)" "$relay_pid" relay_up

"$RELAY" org set-alert-webhook --db "$DB" --org "$ORG" --url "$ALERTS_URL" >/dev/null

# The gateways' ids, in GATEWAYS order.
ids=()
for n in $(seq 1 ${#GATEWAYS[@]}); do
	var="DEVICE_$n"
	read -r id _ <<<"${!var}"
	ids+=("$id")
done

# api METHOD PATH [BODY]: one call to the public API with the demo key, as a
# customer would make it; fails on any status but 2xx.
api() {
	local args=(-sS --fail-with-body --max-time 10 -X "$1" -H "Authorization: Bearer $KEY") out
	[[ $# -gt 2 ]] && args+=(-H "Content-Type: application/json" --data "$3")
	out=$(curl "${args[@]}" "$API$2" 2>&1) || die "$1 $2 failed: $out"
}

# The IG-500s' channels: Modbus polling of two slaves, a CAN-FD frame every
# second, one GPIO input and one output. Mode managed: the agent itself polls
# and sends (passthrough would hand the ports to VPN clients instead). Points
# give values a name, a type and a unit, and keep their history: on rs485-1 a
# temperature (f32 in holding registers 100-101 of slave 7) and a pulse
# counter (u32 in 102-103); on canfd-1 the signals of demo.dbc, imported with
# the admin CLI.
for n in 1 2; do
	id=${ids[$((n - 1))]}
	api PATCH "/devices/$id/serial" '{"mode":"managed"}'
	api PUT "/devices/$id/serial/channels/rs485-1" '{"kind":"rs485","baudRate":9600,"dataBits":8,"parity":"even","stopBits":1,"mode":"modbus_rtu_master","slaveId":7,
		"tx":{"enabled":true,"intervalMs":5000,"register":40,"value":1},
		"poll":{"enabled":true,"intervalMs":1000,"register":0,"count":3,"function":"holding"},
		"points":[{"name":"boiler_temp","function":"holding","register":100,"type":"f32","unit":"°C"},
			{"name":"pulse_count","function":"holding","register":102,"type":"u32"}]}'
	api PUT "/devices/$id/serial/channels/rs485-2" '{"kind":"rs485","baudRate":19200,"dataBits":8,"parity":"none","stopBits":1,"mode":"modbus_rtu_master","slaveId":3,
		"tx":{"enabled":false,"intervalMs":0,"register":0,"value":0},
		"poll":{"enabled":true,"intervalMs":1000,"register":10,"count":2,"function":"input"}}'
	api PUT "/devices/$id/serial/channels/canfd-1" '{"kind":"canfd","nominalBitrate":500000,"dataBitrate":2000000,"samplePoint":0.875,"listenOnly":false,
		"tx":{"enabled":true,"intervalMs":1000,"canId":"0x123","dataHex":"01 02 03 04 05 06 07 08"}}'
	api PUT "/devices/$id/serial/channels/gpio-1" '{"kind":"gpio","direction":"in","pull":"up","debounceMs":20,"tx":{"enabled":false,"intervalMs":0,"value":0}}'
	api PUT "/devices/$id/serial/channels/gpio-4" '{"kind":"gpio","direction":"out","pull":"none","debounceMs":0,"tx":{"enabled":true,"intervalMs":0,"value":1}}'
	out=$("$RELAY" channel import-dbc --db "$DB" --device "$id" --channel canfd-1 --file "$DBC" 2>&1) ||
		die "channel import-dbc of $DBC failed: $out"
done
api PATCH "/devices/${ids[0]}/serial" "{\"webhookUrl\":\"$SIGNALS_URL\",\"webhookEnabled\":true}"

# The agents start once their channels are configured: each is sent its
# configuration when it connects (import-dbc above changed it in the database,
# outside the relay, which tells connected agents only of its own changes).
agent_pids=()
n=0
for g in "${GATEWAYS[@]}"; do
	IFS='|' read -r model name location <<<"$g"
	n=$((n + 1))
	var="DEVICE_$n"
	read -r _ token <<<"${!var}"
	mkdir -p "$DATA/agent-$n"
	FLEET_TOKEN=$token "${guard[@]}" "$AGENT" --relay "ws://$LISTEN" --hw sim --model "$model" \
		--name "$name" --location "$location" --state-dir "$DATA/agent-$n" \
		--heartbeat 5s --metrics-interval 30s --dev-root none --passthrough-listen none \
		>>"$DATA/agent-$n.log" 2>&1 &
	agent_pids+=("$!")
done

online() { # online: whether every gateway is ONLINE
	[[ $(curl -fsS --max-time 5 -H "Authorization: Bearer $KEY" "$API/devices?limit=100" 2>/dev/null | grep -o '"status": *"ONLINE"' | wc -l) -ge ${#GATEWAYS[@]} ]]
}
wait_for "gateways (logs: $DATA/agent-N.log) or the relay" "$relay_pid" online

cat <<MSG

  Fleet demo: relay on http://$LISTEN, ${#GATEWAYS[@]} simulated gateways online

  Panel: http://$LISTEN/panel/
    email:    $PANEL_EMAIL
    password: $PANEL_PASSWORD

    ${ids[0]}  IG-500 "Press line 1"    forwarding its signals to the sink
    ${ids[1]}  IG-500 "Packaging line"
    ${ids[2]}  IG-100 "Gatehouse"       (agent pid ${agent_pids[2]}: kill it and a device_offline alert reaches the sink in about 35 s)
  Webhook sink on https://$SINK_LISTEN/ prints each webhook below ("sink | ...")
$(case $METRICS_LISTEN in none) echo "  Relay metrics: off (METRICS_LISTEN=none)" ;; api) echo "  Relay metrics: $RELAY_URL/metrics" ;; *) echo "  Relay metrics: http://$METRICS_LISTEN/metrics" ;; esac)
  Logs: $DATA/relay.log, $DATA/agent-N.log. Data: $DATA (kept; delete it to start over)

  API key: $KEY

  Paste into another terminal:
    KEY=$KEY RELAY=$RELAY_URL DEVICE_ID=${ids[0]}
    curl -s -H "Authorization: Bearer \$KEY" "\$RELAY/api/v1/public/devices"
    curl -s -H "Authorization: Bearer \$KEY" "\$RELAY/api/v1/public/devices/\$DEVICE_ID"
    curl -s -H "Authorization: Bearer \$KEY" "\$RELAY/api/v1/public/devices/\$DEVICE_ID/serial"
    curl -s -H "Authorization: Bearer \$KEY" "\$RELAY/api/v1/public/devices/\$DEVICE_ID/serial/telemetry"
    curl -s -H "Authorization: Bearer \$KEY" "\$RELAY/api/v1/public/devices/\$DEVICE_ID/points"
    curl -s -H "Authorization: Bearer \$KEY" "\$RELAY/api/v1/public/devices/\$DEVICE_ID/points/rs485-1.boiler_temp/samples?step=1m"
    curl -s -H "Authorization: Bearer \$KEY" "\$RELAY/api/v1/public/devices/\$DEVICE_ID/metrics"
    curl -s -H "Authorization: Bearer \$KEY" "\$RELAY/api/v1/public/devices/\$DEVICE_ID/events"
    curl -s -H "Authorization: Bearer \$KEY" "\$RELAY/api/v1/public/alerts"

  Ctrl-C stops everything.

MSG

while kill -0 "$relay_pid" 2>/dev/null && kill -0 "$sink_pid" 2>/dev/null && kill -0 "$WATCH_PID" 2>/dev/null; do
	sleep 1 &
	wait $! || true
done
kill -0 "$WATCH_PID" 2>/dev/null || die "process $WATCH_PID (make) is gone; stopping"
kill -0 "$sink_pid" 2>/dev/null || die "the webhook sink stopped"
die "the relay stopped; the end of $DATA/relay.log:
$(tail -n 5 "$DATA/relay.log")"
