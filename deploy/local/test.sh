#!/usr/bin/env bash
# The whole test suite, on a fresh Debian machine or this one: installs a JDK, ActiveMQ
# (with XStream and Jettison), PostgreSQL 15, the virtualenv and the AsyncAPI parser
# (Node.js and npm from Debian, tests/asyncapi/node_modules) if missing, then lint,
# types and pytest. The tests start their own broker and database (tests/fixtures/) on
# free loopback ports.
set -euo pipefail
# shellcheck source=deploy/local/bootstrap.sh
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"

ensure_system_packages "${HCAT_TEST_PACKAGES[@]}"
ensure_venv
ensure_asyncapi_parser
cd "$HCAT_ROOT"

# The suite starts hundreds of Python processes (relays, CLI commands, API servers,
# Airflow tasks): each would compile the project's modules from source if bytecode may
# not be written (PYTHONDONTWRITEBYTECODE, set on some machines; 0.1 s of the 0.5 s of
# CPU of a short hcat-notify command here). Compile once, and let the processes (and
# pytest's rewritten test modules) keep their bytecode. __pycache__/ is ignored by git.
unset PYTHONDONTWRITEBYTECODE
"$HCAT_VENV/bin/python" -m compileall -q -j 0 hcat_notify spark_output >/dev/null

log "ruff"
"$HCAT_VENV/bin/ruff" check .
"$HCAT_VENV/bin/ruff" format --check .
log "mypy"
"$HCAT_VENV/bin/mypy"
log "pytest"
status=0
# Parallel workers (pytest-xdist): the suite mostly waits (brokers starting, Spark,
# receipts, relays taking over), so more workers than cores pay off; each worker starts
# its own broker, PostgreSQL and Spark session on ports of its own (tests/README.md).
# tests/fixtures/schedule.py decides who runs what under --dist loadscope: longest
# tests first, a module with a server of its own on one worker, Spark and Airflow tests
# on fewer workers (tests/README.md, "In parallel"). HCAT_TEST_WORKERS=0 runs in this
# process; arguments given here come last, so they win (-n 0, -m "not integration", a
# test's path).
"$HCAT_VENV/bin/python" -m pytest -n "${HCAT_TEST_WORKERS:-4}" --dist loadscope "$@" \
    || status=$?
if [ "$status" -eq 5 ]; then
    log "pytest collected no tests: that is a failure"
    exit 1
fi
exit "$status"
