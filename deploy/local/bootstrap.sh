# shellcheck shell=bash
# Shared by demo.sh and test.sh: install what the project needs, idempotently.
# Debian packages (Java, ActiveMQ and the jars its STOMP advisories need, PostgreSQL 15)
# through apt-get, the project and its dev extras into .venv through pip. Safe to run
# again: every step checks first.

HCAT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HCAT_VENV="${HCAT_VENV:-$HCAT_ROOT/.venv}"
HCAT_PYTHON="${HCAT_PYTHON:-python3}"

log() { printf '[hcat-notify] %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        log "need root (or sudo) to run: $*"
        return 1
    fi
}

_apt_updated=0
apt_install() {
    local missing=()
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
            || missing+=("$pkg")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    if [ "$_apt_updated" -eq 0 ]; then
        log "apt-get update"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
        _apt_updated=1
    fi
    log "installing ${missing[*]}"
    # The packages' postinst may try to start system services; policy-rc.d can refuse
    # that, which is fine: the project runs its own broker and database.
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${missing[@]}" >/dev/null
}

# Debian packages, each checked by name (not by a file one of them happens to ship), so
# a half-installed machine is completed. They are listed explicitly because we install
# with --no-install-recommends: libxstream-java and libjettison-java are only Recommends
# of activemq (through libactivemq-java), and without them advisories over STOMP fail.
# default-jre-headless is OpenJDK 17 on Debian 12, which PySpark 4 needs.
# (Both lists are used by demo.sh and test.sh, which source this file.)
# shellcheck disable=SC2034
HCAT_DEMO_PACKAGES=(default-jre-headless activemq libxstream-java libjettison-java)
# The tests also compile a JMS consumer (tests/interop/JmsProbe.java: javac), run a
# private PostgreSQL 15 cluster, run a broker pair on the JDBC store in it (PostgreSQL's
# JDBC driver and DBCP 2 with its pool on the broker's classpath: deploy/activemq/
# store-jdbc.xml), and load the API's status page in a headless Chromium driven through
# ChromeDriver (tests/integration/api/test_status_page_browser.py).
# shellcheck disable=SC2034
HCAT_TEST_PACKAGES=("${HCAT_DEMO_PACKAGES[@]}" default-jdk-headless postgresql-15
    libpostgresql-jdbc-java libcommons-dbcp2-java libcommons-pool2-java chromium chromium-driver)

ensure_system_packages() {
    # $@: the Debian packages this command needs
    apt_install "$@"
}

ensure_venv() {
    if [ ! -x "$HCAT_VENV/bin/python" ]; then
        log "creating virtualenv $HCAT_VENV"
        if ! "$HCAT_PYTHON" -m venv "$HCAT_VENV" >/dev/null 2>&1; then
            # Debian splits venv/ensurepip out of python3.
            rm -rf "$HCAT_VENV"
            log "$HCAT_PYTHON -m venv does not work here (no ensurepip): installing python3-venv"
            apt_install python3-venv
            "$HCAT_PYTHON" -m venv "$HCAT_VENV"
        fi
    fi
    # Reinstall only when the package definition changed.
    local stamp="$HCAT_VENV/.hcat-notify-installed"
    local want
    want="$(sha256sum "$HCAT_ROOT/pyproject.toml" | cut -d' ' -f1)"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        log "pip install -e .[dev] (first run downloads PySpark, about 400 MB)"
        "$HCAT_VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
        "$HCAT_VENV/bin/python" -m pip install -q -e "${HCAT_ROOT}[dev]"
        echo "$want" >"$stamp"
    fi
}

# The AsyncAPI document's check (tests/asyncapi/test_document.py) runs the official parser,
# @asyncapi/parser from npm, pinned in tests/asyncapi/package-lock.json. Node.js and npm
# come from Debian when missing (Debian 12's nodejs 18 runs the pinned parser); `npm ci`
# runs only when node_modules is missing or the lock changed since it last ran.
HCAT_ASYNCAPI_DIR="$HCAT_ROOT/tests/asyncapi"

ensure_asyncapi_parser() {
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        apt_install nodejs npm
    fi
    local stamp="$HCAT_ASYNCAPI_DIR/node_modules/.hcat-notify-installed"
    local want
    want="$(sha256sum "$HCAT_ASYNCAPI_DIR/package-lock.json" | cut -d' ' -f1)"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        log "npm ci in tests/asyncapi (@asyncapi/parser)"
        (cd "$HCAT_ASYNCAPI_DIR" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
        echo "$want" >"$stamp"
    fi
}
