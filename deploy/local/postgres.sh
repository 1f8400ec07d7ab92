#!/usr/bin/env bash
# Private PostgreSQL 15 cluster for hcat-notify development and tests.
#
# Usage: deploy/local/postgres.sh start|stop|status|url|dir|destroy
#
#   start    initdb on first use, then start the server (no-op if already running);
#            waits up to 30 s for pg_isready.
#   stop     fast shutdown (no-op if not running).
#   status   prints "running (port N)" (exit 0) or "stopped" (exit 3).
#   url      prints the SQLAlchemy admin URL:
#            postgresql+psycopg://postgres@127.0.0.1:PORT/postgres
#   dir      prints the directory the cluster lives in (exit 1 if never initialised).
#   destroy  stop, then delete the cluster directory (used by the test fixtures).
#
# Environment:
#   HCAT_NOTIFY_HOME      base directory (default: $HOME/.hcat-notify); the cluster
#                         lives in $HCAT_NOTIFY_HOME/postgres (but see "Location" below).
#   HCAT_NOTIFY_PG_PORT   TCP port on 127.0.0.1 (default: 55432). Applied at every start,
#                         so an existing cluster can be restarted on another port.
#   HCAT_NOTIFY_PG_BIN    PostgreSQL bin dir (default: /usr/lib/postgresql/15/bin).
#
# This never touches the system cluster (/var/lib/postgresql, /etc/postgresql,
# /var/run/postgresql, systemd units): we call initdb/pg_ctl directly on our own data
# directory, listen on 127.0.0.1 only, and put the unix socket inside the cluster dir.
#
# Layout of the cluster dir:
#   data/           PGDATA (postmaster.pid lives here)
#   run/            unix socket directory
#   postgres.log    server log
#   .lock           flock(1) lock serialising start/stop/destroy
#
# Location / running as root:
#   PostgreSQL refuses to run as root. When invoked as root, the cluster is owned by the
#   `postgres` system user (created by the Debian package) and initdb/pg_ctl run via
#   runuser. The postgres user must be able to traverse every parent directory, which is
#   not the case for the default /root/.hcat-notify (/root is mode 700) nor for pytest's
#   /tmp/pytest-of-root. We do NOT loosen permissions on someone's home; instead, when
#   the postgres user cannot reach $HCAT_NOTIFY_HOME (or the path is too long for a unix
#   socket, ~107 bytes), the cluster goes to
#       /var/tmp/hcat-notify-pg-<first 12 hex of sha256("<uid>:<intended path>")>
#   (/var/tmp survives reboots, unlike a tmpfs /tmp) and a symlink
#   $HCAT_NOTIFY_HOME/postgres -> that directory is left behind, so later invocations
#   (and humans) find it again deterministically. `dir` prints the real location.
set -euo pipefail

PG_BIN="${HCAT_NOTIFY_PG_BIN:-/usr/lib/postgresql/15/bin}"
PG_MAJOR=15
PORT="${HCAT_NOTIFY_PG_PORT:-55432}"
START_TIMEOUT=30

# Connection settings from the caller's environment must not leak into our tools.
unset PGHOST PGHOSTADDR PGPORT PGDATA PGUSER PGDATABASE PGOPTIONS PGSERVICE PGSERVICEFILE \
    PGPASSFILE PGPASSWORD PGSSLMODE PGTARGETSESSIONATTRS || true

die() {
    printf 'postgres.sh: error: %s\n' "$*" >&2
    exit 1
}
note() { printf 'postgres.sh: %s\n' "$*" >&2; }

usage() {
    echo "usage: $0 start|stop|status|url|dir|destroy" >&2
    exit 2
}

case "$PORT" in
'' | *[!0-9]*) die "HCAT_NOTIFY_PG_PORT must be a number, got '$PORT'" ;;
esac
if ((PORT < 1 || PORT > 65535)); then
    die "HCAT_NOTIFY_PG_PORT out of range: $PORT"
fi

IS_ROOT=0
if [[ "$(id -u)" == 0 ]]; then
    IS_ROOT=1
fi

# Run a command as the user owning the cluster (postgres when we are root). cd / first:
# the caller's cwd (e.g. /root) may be unreadable for that user.
run_pg() {
    if ((IS_ROOT)); then
        if command -v runuser >/dev/null 2>&1; then
            (cd / && runuser -u postgres -- "$@")
        else
            local cmd
            printf -v cmd '%q ' "$@"
            (cd / && su -s /bin/sh postgres -c "$cmd")
        fi
    else
        "$@"
    fi
}

ensure_installed() {
    if [[ -x "$PG_BIN/postgres" ]]; then
        return 0
    fi
    note "PostgreSQL $PG_MAJOR not found in $PG_BIN; installing postgresql-$PG_MAJOR via apt-get"
    local sudo=()
    if ((!IS_ROOT)); then
        if command -v sudo >/dev/null 2>&1; then
            sudo=(sudo)
        else
            die "postgresql-$PG_MAJOR is not installed and we are neither root nor have sudo"
        fi
    fi
    command -v apt-get >/dev/null 2>&1 || die "apt-get not available; install PostgreSQL $PG_MAJOR so that $PG_BIN/postgres exists"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update >&2 ||
        note "apt-get update failed; trying the install anyway"
    # The postinst may fail to start the system service (policy-rc.d in containers);
    # that's fine as long as the binaries end up on disk, which we check below.
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "postgresql-$PG_MAJOR" >&2 ||
        note "apt-get install returned non-zero; checking whether the binaries are present"
    [[ -x "$PG_BIN/postgres" ]] || die "installing postgresql-$PG_MAJOR did not provide $PG_BIN/postgres"
}

ensure_user() {
    if ((IS_ROOT)) && ! id -u postgres >/dev/null 2>&1; then
        die "running as root but there is no 'postgres' system user (normally created by the postgresql-$PG_MAJOR package)"
    fi
}

BASE="$(realpath -m -- "${HCAT_NOTIFY_HOME:-$HOME/.hcat-notify}")"
PRIMARY="$BASE/postgres"
CLUSTER="" # resolved by resolve_cluster / create_cluster_dir

# Find an existing cluster dir without side effects. Returns 1 if there is none.
resolve_cluster() {
    if [[ -L "$PRIMARY" || -d "$PRIMARY" ]]; then
        CLUSTER="$(readlink -f -- "$PRIMARY")" || return 1
        [[ -d "$CLUSTER" ]] || return 1
        return 0
    fi
    return 1
}

fallback_dir() {
    local hash
    hash="$(printf '%s:%s' "$(id -u)" "$PRIMARY" | sha256sum | cut -c1-12)"
    printf '/var/tmp/hcat-notify-pg-%s' "$hash"
}

# Create (or find) the cluster dir, owned by the run user, mode 700.
create_cluster_dir() {
    if resolve_cluster; then
        # e.g. an empty dir someone created by hand as root: initdb would fail in it.
        if ((IS_ROOT)) && [[ "$(stat -c %U -- "$CLUSTER")" != postgres ]]; then
            chown postgres:postgres -- "$CLUSTER"
            chmod 700 -- "$CLUSTER"
        fi
        return 0
    fi
    mkdir -p -- "$BASE"
    local use_fallback=0 why=""
    if ((IS_ROOT)) && ! run_pg test -x "$BASE"; then
        # Parent dirs are not traversable by postgres (e.g. /root is 700).
        use_fallback=1
        why="$BASE is not reachable by the postgres user"
    fi
    # Socket path: <cluster>/run/.s.PGSQL.<port> must fit in sun_path (107 bytes).
    if ((${#PRIMARY} > 80)); then
        use_fallback=1
        why="$PRIMARY is too long for a unix socket path"
    fi
    if ((use_fallback)); then
        CLUSTER="$(fallback_dir)"
        if [[ -L "$CLUSTER" ]]; then
            die "$CLUSTER is a symlink; refusing to use it"
        fi
        mkdir -p -- "$CLUSTER"
        ln -s -- "$CLUSTER" "$PRIMARY" 2>/dev/null || true
        note "$why; cluster lives in $CLUSTER (symlinked from $PRIMARY)"
    else
        CLUSTER="$PRIMARY"
        mkdir -p -- "$CLUSTER"
    fi
    if ((IS_ROOT)); then
        chown postgres:postgres -- "$CLUSTER"
    fi
    chmod 700 -- "$CLUSTER"
}

data_dir() { printf '%s/data' "$CLUSTER"; }

is_initialised() { [[ -n "$CLUSTER" && -f "$CLUSTER/data/PG_VERSION" ]]; }

# 0 = running, anything else = not running.
is_running() {
    is_initialised || return 1
    run_pg "$PG_BIN/pg_ctl" status -D "$(data_dir)" >/dev/null 2>&1
}

# Port the running server actually listens on (line 4 of postmaster.pid).
running_port() {
    local p
    p="$(sed -n 4p "$(data_dir)/postmaster.pid" 2>/dev/null || true)"
    if [[ -n "$p" ]]; then
        printf '%s' "$p"
    else
        printf '%s' "$PORT"
    fi
}

# Run a command with every fd above 2 closed. Used for `pg_ctl start`: the postmaster
# would otherwise inherit our flock fd (holding the lock forever) and whatever pipes the
# caller left open (making e.g. `$(postgres.sh start)` or CI log capture hang).
run_pg_closed_fds() {
    (
        local fd
        for fd in /proc/$BASHPID/fd/*; do
            fd="${fd##*/}"
            if ((fd > 2)); then
                eval "exec ${fd}>&-" 2>/dev/null || true
            fi
        done
        run_pg "$@"
    )
}

take_lock() {
    exec 9>>"$CLUSTER/.lock"
    flock -w 120 9 || die "timed out waiting for the lock on $CLUSTER/.lock"
}

sql_quote() { printf "'%s'" "${1//\'/\'\'}"; }

init_cluster() {
    local data
    data="$(data_dir)"
    if [[ -f "$data/PG_VERSION" ]]; then
        local v
        v="$(cat "$data/PG_VERSION")"
        [[ "$v" == "$PG_MAJOR" ]] || die "$data holds a PostgreSQL $v cluster, expected $PG_MAJOR"
        return 0
    fi
    if [[ -e "$data" ]]; then
        note "removing incomplete data directory $data (no PG_VERSION)"
        rm -rf -- "$data"
    fi
    note "initialising cluster in $data"
    # trust auth: local-only dev/test cluster (127.0.0.1 + a socket in a 700 dir).
    if ! run_pg "$PG_BIN/initdb" -D "$data" -A trust --username=postgres -E UTF8 \
        --locale=C --no-sync >"$CLUSTER/initdb.log" 2>&1; then
        cat "$CLUSTER/initdb.log" >&2
        rm -rf -- "$data"
        die "initdb failed"
    fi
    printf "\n# hcat-notify: per-start settings (rewritten by deploy/local/postgres.sh)\ninclude_if_exists = 'hcat-notify.conf'\n" |
        run_pg tee -a "$data/postgresql.conf" >/dev/null
}

write_settings() {
    local conf
    conf="$(data_dir)/hcat-notify.conf"
    {
        echo "# Written by deploy/local/postgres.sh at every start; do not edit."
        echo "listen_addresses = '127.0.0.1'"
        echo "port = $PORT"
        echo "unix_socket_directories = $(sql_quote "$CLUSTER/run")"
        echo "max_connections = 200"
        echo "# Dev/test cluster only: durability is traded for speed. A crash of the"
        echo "# machine may corrupt this cluster; it only ever holds throwaway data."
        echo "fsync = off"
        echo "synchronous_commit = off"
        echo "full_page_writes = off"
    } | run_pg tee "$conf" >/dev/null
}

cmd_start() {
    ensure_installed
    ensure_user
    create_cluster_dir
    take_lock
    if is_running; then
        echo "already running (port $(running_port))"
        return 0
    fi
    init_cluster
    run_pg mkdir -p "$CLUSTER/run"
    write_settings
    local data log
    data="$(data_dir)"
    log="$CLUSTER/postgres.log"
    note "starting PostgreSQL $PG_MAJOR on 127.0.0.1:$PORT (cluster $CLUSTER)"
    if ! run_pg_closed_fds "$PG_BIN/pg_ctl" start -D "$data" -l "$log" -w -t "$START_TIMEOUT" >/dev/null 2>&1; then
        {
            echo "postgres.sh: error: PostgreSQL failed to start on 127.0.0.1:$PORT; last lines of $log:"
            tail -n 30 "$log" 2>/dev/null || true
        } >&2
        exit 1
    fi
    local deadline=$((SECONDS + START_TIMEOUT))
    until "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -t 2; do
        if ((SECONDS >= deadline)); then
            {
                echo "postgres.sh: error: server did not accept connections on 127.0.0.1:$PORT within ${START_TIMEOUT}s; last lines of $log:"
                tail -n 30 "$log" 2>/dev/null || true
            } >&2
            exit 1
        fi
        sleep 0.2
    done
    echo "running (port $PORT)"
}

cmd_stop() {
    if ! resolve_cluster || ! is_initialised; then
        echo "stopped"
        return 0
    fi
    take_lock
    if ! is_running; then
        echo "stopped"
        return 0
    fi
    if ! run_pg "$PG_BIN/pg_ctl" stop -D "$(data_dir)" -m fast -w -t 60 >/dev/null 2>&1; then
        note "fast shutdown timed out; using immediate shutdown"
        run_pg "$PG_BIN/pg_ctl" stop -D "$(data_dir)" -m immediate -w -t 30 >/dev/null 2>&1 ||
            die "could not stop the server in $(data_dir)"
    fi
    echo "stopped"
}

cmd_status() {
    if resolve_cluster && is_running; then
        echo "running (port $(running_port))"
        return 0
    fi
    echo "stopped"
    return 3
}

cmd_url() {
    local port="$PORT"
    if resolve_cluster && is_running; then
        port="$(running_port)"
    fi
    echo "postgresql+psycopg://postgres@127.0.0.1:${port}/postgres"
}

cmd_dir() {
    resolve_cluster || die "no cluster for HCAT_NOTIFY_HOME=$BASE (run '$0 start' first)"
    echo "$CLUSTER"
}

cmd_destroy() {
    if ! resolve_cluster; then
        return 0
    fi
    cmd_stop >/dev/null
    case "$CLUSTER" in
    / | "$HOME" | "") die "refusing to delete '$CLUSTER'" ;;
    esac
    rm -rf -- "$CLUSTER"
    if [[ -L "$PRIMARY" ]]; then
        rm -f -- "$PRIMARY"
    fi
    echo "destroyed $CLUSTER"
}

[[ $# -eq 1 ]] || usage
case "$1" in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
url) cmd_url ;;
dir) cmd_dir ;;
destroy) cmd_destroy ;;
-h | --help) usage ;;
*) usage ;;
esac
