#!/usr/bin/env bash
# The whole test suite, on a fresh Debian machine or this one: installs a JDK, ActiveMQ
# (with XStream and Jettison), PostgreSQL 15 and the virtualenv if missing, then lint,
# types and pytest. The tests start their own broker and database (tests/fixtures/) on
# free loopback ports.
set -euo pipefail
# shellcheck source=deploy/local/bootstrap.sh
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"

ensure_system_packages "${HCAT_TEST_PACKAGES[@]}"
ensure_venv
cd "$HCAT_ROOT"

log "ruff"
"$HCAT_VENV/bin/ruff" check .
"$HCAT_VENV/bin/ruff" format --check .
log "mypy"
"$HCAT_VENV/bin/mypy"
log "pytest"
status=0
"$HCAT_VENV/bin/python" -m pytest "$@" || status=$?
if [ "$status" -eq 5 ]; then
    log "pytest collected no tests: that is a failure"
    exit 1
fi
exit "$status"
