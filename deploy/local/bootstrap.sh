# shellcheck shell=bash
# Shared by demo.sh and test.sh: install what the project needs, idempotently.
# Debian packages (Java, ActiveMQ, PostgreSQL 15) through apt-get, the project and its
# dev extras into .venv through pip. Safe to run again: every step checks first.

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

ensure_system_packages() {
    # $@: extra Debian packages for this command
    local wanted=("$@")
    command -v java >/dev/null 2>&1 || wanted+=(default-jre-headless)
    [ -f /usr/share/activemq/bin/activemq.jar ] || wanted+=(activemq)
    [ "${#wanted[@]}" -eq 0 ] || apt_install "${wanted[@]}"
}

ensure_venv() {
    if [ ! -x "$HCAT_VENV/bin/python" ]; then
        log "creating virtualenv $HCAT_VENV"
        if ! "$HCAT_PYTHON" -m venv "$HCAT_VENV" 2>/dev/null; then
            # Debian splits venv/ensurepip out of python3.
            rm -rf "$HCAT_VENV"
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
        "$HCAT_VENV/bin/python" -m pip install -q -e "$HCAT_ROOT[dev]"
        echo "$want" >"$stamp"
    fi
}
