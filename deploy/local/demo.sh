#!/usr/bin/env bash
# The demo on the embedded defaults: SQLite catalog, local ActiveMQ. Installs what it
# needs (Java, ActiveMQ, the virtualenv), starts the broker, registers a partitioned
# table, shows its topic, and passes a message from the publisher to a consumer.
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

step "catalog: $HCAT_NOTIFY_HOME/catalog.db"
"$cli" db upgrade

step "register demo.clicks, partitioned by datestamp and region"
if ! "$cli" table show demo.clicks >/dev/null 2>&1; then
    "$cli" table create demo.clicks --location "$HCAT_NOTIFY_HOME/warehouse/demo/clicks" \
        --partition-keys datestamp,region --format parquet --retention 7d
fi
"$cli" table show demo.clicks

step "its topic"
echo "topic:       $("$cli" topic demo.clicks)"
echo "destination: $("$cli" -o json topic demo.clicks | "$HCAT_VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["destination"])')"

step "broker: publisher and consumer principals"
"$cli" broker check

step "done"
echo "The broker keeps running; stop it with:"
echo "  HCAT_NOTIFY_HOME=$HCAT_NOTIFY_HOME deploy/local/activemq.sh stop"
