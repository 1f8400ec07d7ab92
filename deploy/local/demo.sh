#!/usr/bin/env bash
# The demo on the embedded defaults: SQLite catalog, local ActiveMQ. Installs what it
# needs (Java, ActiveMQ with XStream and Jettison, the virtualenv), starts the broker,
# registers a partitioned table, shows its topic, checks both principals, then runs a
# relay and a watcher while a real Spark job writes dozens of partitions with
# write_partitions(mark_set_done=...): the watcher prints each ADD_PARTITION and the
# MARK_SET_DONE, and `wait` returns.
# Everything lives under .data/demo (HCAT_NOTIFY_HOME); stop the broker with
#   HCAT_NOTIFY_HOME=.data/demo deploy/local/activemq.sh stop
set -euo pipefail
# shellcheck source=deploy/local/bootstrap.sh
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"

ensure_system_packages "${HCAT_DEMO_PACKAGES[@]}"
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
# 48 ADD_PARTITION messages and one MARK_SET_DONE; give up after 120 s of silence.
"$cli" watch demo.clicks --max-messages 49 --timeout 120 >"$watch_out" &
watch_pid=$!
sleep 2  # let it subscribe: then the messages arrive live, not from the catalog

datestamp="$(date -u +%Y%m%d%H%M%S)"
step "a Spark job writes 48 partitions of datestamp=$datestamp with write_partitions(..., mark_set_done=...)"
SPARK_LOCAL_IP=127.0.0.1 "$HCAT_VENV/bin/python" "$HCAT_ROOT/deploy/local/demo_spark_job.py" "$datestamp" \
    2> >(grep -v -E "^(WARNING: Using incubator|Using Spark's default|Setting default log level|To adjust logging level|.*WARN NativeCodeLoader)" >&2)

step "a scheduler waits for datestamp=$datestamp/region=us-00: covered by the job's done"
"$cli" wait demo.clicks "datestamp=$datestamp" region=us-00 --timeout 30

step "the watcher received (event id, type, table, spec, source)"
wait "$watch_pid" || true
watch_pid=""
head -n 5 "$watch_out"
echo "   ..."
tail -n 3 "$watch_out"
echo "   $(grep -c ADD_PARTITION "$watch_out") ADD_PARTITION and $(grep -c MARK_SET_DONE "$watch_out") MARK_SET_DONE messages"

step "the partitions in the catalog"
# Listed to a file, not piped into head: under pipefail, a listing cut short by head
# exits 141 (SIGPIPE), as any Unix tool does.
"$cli" partitions demo.clicks "datestamp=$datestamp" > "$HCAT_NOTIFY_HOME/partitions.txt"
head -n 3 "$HCAT_NOTIFY_HOME/partitions.txt"
echo "   ... $(wc -l < "$HCAT_NOTIFY_HOME/partitions.txt") partitions"

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
