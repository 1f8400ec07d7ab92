#!/usr/bin/env bash
# The demo on the embedded defaults: SQLite catalog, local ActiveMQ. Installs what it
# needs (Java, ActiveMQ, the virtualenv), starts the broker, registers a partitioned
# table, shows its topic, checks both principals, then runs a relay and a watcher and
# sends a mark-set-done from the Python API to the subscriber.
# Everything lives under .data/demo (HCAT_NOTIFY_HOME); stop the broker with
#   HCAT_NOTIFY_HOME=.data/demo deploy/local/activemq.sh stop
set -euo pipefail
# shellcheck source=deploy/local/bootstrap.sh
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"

ensure_system_packages
ensure_venv
cd "$HCAT_ROOT"

export HCAT_NOTIFY_HOME="${HCAT_NOTIFY_HOME:-$HCAT_ROOT/.data/demo}"
mkdir -p "$HCAT_NOTIFY_HOME"
HCAT_NOTIFY_HOME="$(cd "$HCAT_NOTIFY_HOME" && pwd)"
port="${HCAT_NOTIFY_BROKER_PORT:-61613}"
export HCAT_NOTIFY_BROKER_URL="${HCAT_NOTIFY_BROKER_URL:-stomp://127.0.0.1:$port}"
cli="$HCAT_VENV/bin/hcat-notify"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "local ActiveMQ (data in $HCAT_NOTIFY_HOME/activemq)"
bash "$HCAT_ROOT/deploy/local/activemq.sh" start

step "catalog: $HCAT_NOTIFY_HOME/catalog.db (fresh for every demo run)"
rm -f "$HCAT_NOTIFY_HOME"/catalog.db "$HCAT_NOTIFY_HOME"/catalog.db-wal "$HCAT_NOTIFY_HOME"/catalog.db-shm
"$cli" db upgrade

step "register demo.clicks, partitioned by datestamp and region"
"$cli" table create demo.clicks --location "$HCAT_NOTIFY_HOME/warehouse/demo/clicks" \
    --partition-keys datestamp,region --format parquet --retention 7d
"$cli" table show demo.clicks

step "its topic"
echo "topic:       $("$cli" topic demo.clicks)"
echo "destination: $("$cli" -o json topic demo.clicks | "$HCAT_VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["destination"])')"

step "broker: publisher and consumer principals"
"$cli" broker check

step "relay: publishes the outbox to the broker (background, log in $HCAT_NOTIFY_HOME/relay.log)"
"$cli" relay >"$HCAT_NOTIFY_HOME/relay.log" 2>&1 &
relay_pid=$!
watch_out="$HCAT_NOTIFY_HOME/watch.out"
cleanup() {
    kill -TERM "$relay_pid" 2>/dev/null || true
    [ -n "${watch_pid:-}" ] && kill -TERM "$watch_pid" 2>/dev/null || true
}
trap cleanup EXIT

step "a watcher subscribes to demo.clicks (as the read-only consumer)"
"$cli" watch demo.clicks --json --max-messages 1 --timeout 60 >"$watch_out" &
watch_pid=$!
sleep 2  # let it subscribe: then the message arrives live, not from the retention table

datestamp="$(date -u +%Y%m%d%H%M%S)"
step "a writer announces: datestamp=$datestamp is done (Python API)"
"$HCAT_VENV/bin/python" - "$datestamp" <<'PY'
import sys
import time

from hcat_notify import send_mark_set_done

started = time.monotonic()
event_id = send_mark_set_done("demo.clicks", {"datestamp": sys.argv[1]})
print(f"send_mark_set_done returned event {event_id} in {(time.monotonic() - started) * 1000:.1f} ms")
PY

step "the watcher received it"
wait "$watch_pid" || true
watch_pid=""
"$HCAT_VENV/bin/python" -m json.tool "$watch_out"

step "a scheduler waits for datestamp=$datestamp/region=us: covered by the broader done"
"$cli" wait demo.clicks "datestamp=$datestamp" region=us --timeout 10

step "status"
"$cli" status

step "stop the relay (SIGTERM: it finishes its batch and exits)"
kill -TERM "$relay_pid"
wait "$relay_pid" || true
tail -n 3 "$HCAT_NOTIFY_HOME/relay.log"
trap - EXIT

step "done"
echo "The broker keeps running; stop it with:"
echo "  HCAT_NOTIFY_HOME=$HCAT_NOTIFY_HOME deploy/local/activemq.sh stop"
