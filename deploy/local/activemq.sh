#!/usr/bin/env bash
# Start, stop or inspect a private ActiveMQ broker for hcat-notify (no systemd, no root
# needed once Debian's `activemq` package is installed).
#
#   deploy/local/activemq.sh start|stop|restart|status
#
# Layout (base dir B = ${HCAT_NOTIFY_HOME:-$HOME/.hcat-notify}/activemq):
#   B/conf/           activemq.xml + log4j.properties, copied from deploy/activemq each start
#   B/data/           KahaDB store (B/data/kahadb) and the broker log (B/data/activemq.log)
#   B/tmp/            java.io.tmpdir
#   B/lib/            extra broker jars: links to Debian's xstream.jar and jettison.jar
#   B/activemq.out    the JVM's stdout/stderr
#   B/activemq.pid    pid of the running broker; B/activemq.stomp "host:port" it listens on
#
# Environment:
#   HCAT_NOTIFY_HOME                   parent of the base dir            (~/.hcat-notify)
#   HCAT_NOTIFY_BROKER_PORT            STOMP port on 127.0.0.1           (61613)
#   HCAT_NOTIFY_OPENWIRE_PORT          OpenWire port on 127.0.0.1        (61616)
#   HCAT_NOTIFY_BROKER_USER/PASSWORD   publisher principal   (hcat-publisher/hcat-publisher-dev)
#   HCAT_NOTIFY_CONSUMER_USER/PASSWORD reader principal      (hcat-reader/hcat-reader-dev)
#   HCAT_NOTIFY_BROKER_NAME            broker name                       (hcat-notify)
#   HCAT_NOTIFY_TOPIC_PREFIX           topic prefix the service writes    (hcat)
#   HCAT_NOTIFY_BROKER_START_TIMEOUT   seconds to wait for STOMP CONNECTED (60)
#   HCAT_NOTIFY_BROKER_STOP_TIMEOUT    seconds to wait after SIGTERM       (30)
#   HCAT_NOTIFY_BROKER_JAVA_OPTS       extra JVM options            (-Xms64m -Xmx512m)
#   HCAT_NOTIFY_ACTIVEMQ_HOME          ActiveMQ installation        (/usr/share/activemq)
#
# Passwords are handed to the JVM in a mode-600 java @argfile, not on the command line.
# Exit status: 0 ok; 1 error; status prints "stopped" and exits 3 when not running.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
REPO_DIR=$(cd -- "$SCRIPT_DIR/../.." && pwd -P)
CONF_SRC="$REPO_DIR/deploy/activemq"

AMQ_HOME=${HCAT_NOTIFY_ACTIVEMQ_HOME:-/usr/share/activemq}
AMQ_JAR="$AMQ_HOME/bin/activemq.jar"
# Absolute (symlinks kept): the running broker is recognised by -Dactivemq.base=$BASE, so a
# relative HCAT_NOTIFY_HOME (e.g. .data/demo) must name the same broker as the absolute one.
BASE=$(realpath -ms -- "${HCAT_NOTIFY_HOME:-${HOME:?set HOME or HCAT_NOTIFY_HOME}/.hcat-notify}/activemq")
PID_FILE="$BASE/activemq.pid"
ADDR_FILE="$BASE/activemq.stomp"
OUT_LOG="$BASE/activemq.out"
BROKER_LOG="$BASE/data/activemq.log"
ARG_FILE="$BASE/conf/java.args"

HOST=127.0.0.1
STOMP_PORT=${HCAT_NOTIFY_BROKER_PORT:-61613}
OPENWIRE_PORT=${HCAT_NOTIFY_OPENWIRE_PORT:-61616}
PUB_USER=${HCAT_NOTIFY_BROKER_USER:-hcat-publisher}
PUB_PASS=${HCAT_NOTIFY_BROKER_PASSWORD:-hcat-publisher-dev}
READER_USER=${HCAT_NOTIFY_CONSUMER_USER:-hcat-reader}
READER_PASS=${HCAT_NOTIFY_CONSUMER_PASSWORD:-hcat-reader-dev}
# Lower-cased like the service's topic names; authorization covers <prefix> and <prefix>.>
TOPIC_PREFIX=$(printf '%s' "${HCAT_NOTIFY_TOPIC_PREFIX:-hcat}" | tr '[:upper:]' '[:lower:]')
BROKER_NAME=${HCAT_NOTIFY_BROKER_NAME:-hcat-notify}
START_TIMEOUT=${HCAT_NOTIFY_BROKER_START_TIMEOUT:-60}
STOP_TIMEOUT=${HCAT_NOTIFY_BROKER_STOP_TIMEOUT:-30}
JAVA_OPTS=${HCAT_NOTIFY_BROKER_JAVA_OPTS:--Xms64m -Xmx512m}

log() { printf 'activemq.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    echo "usage: $0 start|stop|restart|status" >&2
    exit 2
}

is_port() { [[ $1 =~ ^[0-9]+$ ]] && ((10#$1 > 0 && 10#$1 < 65536)); }

# --- process helpers ----------------------------------------------------------------

# alive PID: the process exists and is not a zombie (an unreaped child still answers kill -0).
alive() {
    local pid=$1 state
    kill -0 "$pid" 2>/dev/null || return 1
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
    [[ -n $state && $state != Z ]]
}

# is_our_broker PID: the process is the java broker of this base dir (guards against pid reuse).
is_our_broker() {
    local pid=$1
    [[ -r /proc/$pid/cmdline ]] || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF -- "-Dactivemq.base=$BASE"
}

# running_pid: print the recorded pid if that broker is alive; fail otherwise.
running_pid() {
    local pid
    [[ -f $PID_FILE ]] || return 1
    pid=$(tr -dc '0-9' <"$PID_FILE")
    [[ -n $pid ]] || return 1
    alive "$pid" && is_our_broker "$pid" || return 1
    printf '%s\n' "$pid"
}

# --- installation -------------------------------------------------------------------

APT_UPDATED=0
as_root() {
    if [[ $(id -u) -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root (or sudo) to run: $*"
    fi
}
apt_install() {
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install $* by hand"
    if [[ $APT_UPDATED -eq 0 ]]; then
        log "apt-get update"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update >&2
        APT_UPDATED=1
    fi
    log "apt-get install -y $*"
    # The activemq postinst may try to start the system service (instance "main",
    # OpenWire only, 127.0.0.1:61616); policy-rc.d may deny that, which is harmless.
    # Our own ports are checked for collisions before we launch.
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" >&2
}

# Debian ships XStream and Jettison (only Recommends of libactivemq-java) but leaves them
# off the broker's classpath. Without them every advisory message dispatched to a STOMP
# subscriber (and any SUBSCRIBE with a `transformation` header) fails with
# NoClassDefFoundError: com/thoughtworks/xstream/... and breaks that connection.
# We link them into ${activemq.base}/lib, whose jars activemq.jar adds to its classpath.
EXTRA_JARS=(/usr/share/java/xstream.jar:libxstream-java /usr/share/java/jettison.jar:libjettison-java)

ensure_installed() {
    if [[ ! -f $AMQ_JAR ]]; then
        [[ $AMQ_HOME == /usr/share/activemq ]] || die "$AMQ_JAR not found (HCAT_NOTIFY_ACTIVEMQ_HOME=$AMQ_HOME)"
        apt_install activemq libxstream-java libjettison-java
        [[ -f $AMQ_JAR ]] || die "$AMQ_JAR still missing after installing the activemq package"
    fi
    if ! command -v java >/dev/null 2>&1; then
        apt_install default-jre-headless
        command -v java >/dev/null 2>&1 || die "java still missing after installing default-jre-headless"
    fi
    local entry missing_jars=() missing_pkgs=()
    for entry in "${EXTRA_JARS[@]}"; do
        if [[ ! -f ${entry%%:*} ]]; then
            missing_jars+=("${entry%%:*}")
            missing_pkgs+=("${entry##*:}")
        fi
    done
    if ((${#missing_jars[@]})); then
        die "missing ${missing_jars[*]} (advisories over STOMP need it): apt-get install ${missing_pkgs[*]}"
    fi
}

# --- STOMP probe --------------------------------------------------------------------

# stomp_probe: CONNECT as the publisher. Returns 0 on CONNECTED, 1 if nothing answers
# (yet), 2 on an ERROR frame (its message header is printed on stdout).
stomp_probe() {
    (
        exec 3<>"/dev/tcp/$HOST/$STOMP_PORT" || exit 1
        printf 'CONNECT\naccept-version:1.2\nhost:localhost\nlogin:%s\npasscode:%s\nheart-beat:0,0\n\n\0' \
            "$PUB_USER" "$PUB_PASS" >&3 || exit 1
        frame=
        IFS= read -r -d '' -t 5 frame <&3 || [[ -n $frame ]] || exit 1
        frame=${frame#$'\n'}
        command=${frame%%$'\n'*}
        case $command in
        CONNECTED)
            printf 'DISCONNECT\nreceipt:probe\n\n\0' >&3 || true
            IFS= read -r -d '' -t 2 _ <&3 || true
            exit 0
            ;;
        ERROR)
            message=$(printf '%s\n' "$frame" | sed -n 's/^message://p' | head -n 1)
            printf '%s\n' "${message:-ERROR frame without message header}"
            exit 2
            ;;
        *) exit 1 ;;
        esac
    ) 2>/dev/null
}

port_in_use() {
    (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

show_logs() {
    local f hint
    hint=$(grep -hoE 'Failed to bind to server socket: [^ ]+|Address already in use|SAXParseException[^|]*|Could not resolve placeholder[^|]*' \
        -- "$BROKER_LOG" "$OUT_LOG" 2>/dev/null | tail -n 1 || true)
    if [[ -n $hint ]]; then
        log "likely cause: $hint"
    fi
    for f in "$BROKER_LOG" "$OUT_LOG"; do
        if [[ -s $f ]]; then
            printf -- '----- last 40 lines of %s -----\n' "$f" >&2
            tail -n 40 -- "$f" >&2
        fi
    done
    printf -- '-----\n' >&2
}

kill_pid() {
    local pid=$1 waited=0 limit=$((STOP_TIMEOUT * 5))
    kill -TERM "$pid" 2>/dev/null || true
    while alive "$pid" && ((waited < limit)); do
        sleep 0.2
        waited=$((waited + 1))
    done
    if alive "$pid"; then
        log "pid $pid did not stop within ${STOP_TIMEOUT}s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        waited=0
        while alive "$pid" && ((waited < 50)); do
            sleep 0.2
            waited=$((waited + 1))
        done
    fi
}

# --- commands -----------------------------------------------------------------------

# argfile_quote VALUE: quote for a java @argfile (double quotes; \ and " escaped).
argfile_quote() {
    local v=${1//\\/\\\\}
    v=${v//\"/\\\"}
    printf '"%s"\n' "$v"
}

cmd_start() {
    local pid
    if pid=$(running_pid); then
        echo "activemq already running (pid $pid, stomp $(cat "$ADDR_FILE" 2>/dev/null || echo "$HOST:$STOMP_PORT")); nothing to do"
        return 0
    fi
    is_port "$STOMP_PORT" || die "HCAT_NOTIFY_BROKER_PORT is not a port number: $STOMP_PORT"
    is_port "$OPENWIRE_PORT" || die "HCAT_NOTIFY_OPENWIRE_PORT is not a port number: $OPENWIRE_PORT"
    [[ $STOMP_PORT != "$OPENWIRE_PORT" ]] || die "STOMP and OpenWire ports are both $STOMP_PORT"
    [[ $START_TIMEOUT =~ ^[0-9]+$ ]] || die "HCAT_NOTIFY_BROKER_START_TIMEOUT is not a number of seconds: $START_TIMEOUT"
    [[ -f $CONF_SRC/activemq.xml ]] || die "broker config not found: $CONF_SRC/activemq.xml"
    ensure_installed
    # The base dir holds credentials (argfile; the JVM echoes its arguments into
    # activemq.out): keep everything we create private.
    umask 077

    local p
    for p in "$STOMP_PORT" "$OPENWIRE_PORT"; do
        if port_in_use "$p"; then
            die "port $HOST:$p is already in use (a system activemq service or another broker?);" \
                "choose others with HCAT_NOTIFY_BROKER_PORT / HCAT_NOTIFY_OPENWIRE_PORT"
        fi
    done

    mkdir -p -- "$BASE/conf" "$BASE/data" "$BASE/tmp" "$BASE/lib"
    # The jars ensure_installed checked (see EXTRA_JARS).
    local entry jar
    for entry in "${EXTRA_JARS[@]}"; do
        jar=${entry%%:*}
        ln -sfn -- "$jar" "$BASE/lib/${jar##*/}"
    done
    rm -f -- "$PID_FILE" "$ADDR_FILE"
    cp -f -- "$CONF_SRC/activemq.xml" "$BASE/conf/activemq.xml"
    if [[ -f $CONF_SRC/log4j.properties ]]; then
        cp -f -- "$CONF_SRC/log4j.properties" "$BASE/conf/log4j.properties"
    fi

    # Secrets go into an argfile only the owner can read, so they are not visible in ps.
    (
        umask 077
        {
            argfile_quote "-Dhcat.publisher.user=$PUB_USER"
            argfile_quote "-Dhcat.publisher.password=$PUB_PASS"
            argfile_quote "-Dhcat.reader.user=$READER_USER"
            argfile_quote "-Dhcat.reader.password=$READER_PASS"
        } >"$ARG_FILE.tmp"
        mv -f -- "$ARG_FILE.tmp" "$ARG_FILE"
    )

    local -a jvm_opts
    read -r -a jvm_opts <<<"$JAVA_OPTS"
    local -a cmd=(
        java "${jvm_opts[@]}" -Djava.awt.headless=true
        "-Dactivemq.home=$AMQ_HOME"
        "-Dactivemq.base=$BASE"
        "-Dactivemq.conf=$BASE/conf"
        "-Dactivemq.data=$BASE/data"
        "-Dactivemq.classpath=$BASE/conf"
        "-Djava.io.tmpdir=$BASE/tmp"
        "-Dhcat.broker.name=$BROKER_NAME"
        "-Dhcat.bind.host=$HOST"
        "-Dhcat.stomp.port=$STOMP_PORT"
        "-Dhcat.openwire.port=$OPENWIRE_PORT"
        "-Dhcat.topic.prefix=$TOPIC_PREFIX"
        "@$ARG_FILE"
        -jar "$AMQ_JAR" start "xbean:file:$BASE/conf/activemq.xml"
    )

    printf '===== %s starting: %s\n' "$(date '+%F %T')" "${cmd[*]}" >>"$OUT_LOG"
    # setsid: own session, so the broker outlives this script and its terminal/process group.
    # (A background child of a non-interactive shell is never a group leader, so setsid
    # execs in place and $! is the java pid.)
    cd -- "$BASE"
    nohup setsid "${cmd[@]}" >>"$OUT_LOG" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$PID_FILE"
    echo "$HOST:$STOMP_PORT" >"$ADDR_FILE"

    local deadline=$((SECONDS + START_TIMEOUT)) rc message
    while :; do
        if ! alive "$pid"; then
            rc=0
            wait "$pid" 2>/dev/null || rc=$?
            rm -f -- "$PID_FILE" "$ADDR_FILE"
            log "error: the broker process (pid $pid) exited during start-up (exit status $rc)"
            show_logs
            exit 1
        fi
        rc=0
        message=$(stomp_probe) || rc=$?
        if [[ $rc -eq 0 ]]; then
            break
        elif [[ $rc -eq 2 ]]; then
            log "error: the broker answers on $HOST:$STOMP_PORT but refused CONNECT as $PUB_USER: $message"
            kill_pid "$pid"
            rm -f -- "$PID_FILE" "$ADDR_FILE"
            show_logs
            exit 1
        fi
        if ((SECONDS >= deadline)); then
            log "error: no STOMP CONNECTED from $HOST:$STOMP_PORT within ${START_TIMEOUT}s; stopping pid $pid"
            kill_pid "$pid"
            rm -f -- "$PID_FILE" "$ADDR_FILE"
            show_logs
            exit 1
        fi
        sleep 0.3
    done
    echo "activemq started (pid $pid, stomp $HOST:$STOMP_PORT, openwire $HOST:$OPENWIRE_PORT, base $BASE)"
}

cmd_stop() {
    local pid
    if ! pid=$(running_pid); then
        rm -f -- "$PID_FILE" "$ADDR_FILE"
        echo "activemq not running; nothing to do"
        return 0
    fi
    kill_pid "$pid"
    if alive "$pid"; then
        die "pid $pid is still alive after SIGKILL"
    fi
    rm -f -- "$PID_FILE" "$ADDR_FILE"
    echo "activemq stopped (pid $pid)"
}

cmd_status() {
    local pid
    if pid=$(running_pid); then
        echo "running (pid $pid, stomp $(cat "$ADDR_FILE" 2>/dev/null || echo "$HOST:$STOMP_PORT"))"
        return 0
    fi
    echo "stopped"
    return 3
}

[[ $# -eq 1 ]] || usage
case $1 in
start) cmd_start ;;
stop) cmd_stop ;;
restart)
    cmd_stop
    cmd_start
    ;;
status) cmd_status ;;
*) usage ;;
esac
