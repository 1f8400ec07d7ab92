#!/usr/bin/env bash
# Start, stop or inspect a private ActiveMQ broker for hcat-notify, or a master/slave pair
# of them (no systemd, no root needed once Debian's `activemq` package is installed).
#
#   deploy/local/activemq.sh start [--pair] [--jdbc-url URL] | stop
#                            | restart [--pair] [--jdbc-url URL] | status
#
#   start          broker 1 on HCAT_NOTIFY_BROKER_PORT / HCAT_NOTIFY_OPENWIRE_PORT.
#   start --pair   also broker 2, on both ports + 1, sharing broker 1's store:
#                  whichever holds the store's lock is master and listens, the other
#                  waits for the lock (slave) and takes over when the master dies.
#                  Starts only the brokers that are not running, so after a failover it
#                  brings the dead one back, as the new slave.
#   --jdbc-url URL the store is a PostgreSQL database (jdbc:postgresql://HOST:PORT/DB
#                  ?user=U&password=P; or HCAT_NOTIFY_BROKER_JDBC_URL) instead of
#                  broker 1's KahaDB directory: JDBC master/slave, the lease locker
#                  (deploy/activemq/store-jdbc.xml). The home remembers the URL
#                  (R/jdbc-store.url, mode 600): later starts, and status, use it
#                  without the option; delete that file, with the brokers stopped, to go
#                  back to KahaDB.
#   stop           stops every broker of this home (slaves first).
#   status         one broker: "running (pid N, stomp H:P)" or "stopped"; a pair: one
#                  line per broker, saying which is master and which waits.
#
# Layout (R = ${HCAT_NOTIFY_HOME:-$HOME/.hcat-notify}; broker 1's base dir B = R/activemq,
# broker 2's R/activemq-2, each laid out alike):
#   B/conf/           activemq.xml, store-*.xml, log4j.properties, copied from
#                     deploy/activemq each start
#   B/data/           the broker log (B/data/activemq.log); broker 1's also holds the
#                     KahaDB store (R/activemq/data/kahadb) both brokers use
#   B/tmp/            java.io.tmpdir
#   B/lib/            extra broker jars: links to Debian's xstream.jar and jettison.jar,
#                     and with the JDBC store postgresql.jar, commons-dbcp2.jar and
#                     commons-pool2.jar
#   B/activemq.out    the JVM's stdout/stderr
#   B/activemq.pid    pid of the running broker; B/activemq.stomp "host:port" it listens on
#
# Environment:
#   HCAT_NOTIFY_HOME                   parent of the base dirs             (~/.hcat-notify)
#   HCAT_NOTIFY_BROKER_PORT            STOMP port on 127.0.0.1 (broker 2: + 1)     (61613)
#   HCAT_NOTIFY_OPENWIRE_PORT          OpenWire port on 127.0.0.1 (broker 2: + 1)  (61616)
#   HCAT_NOTIFY_BROKER_USER/PASSWORD   publisher principal   (hcat-publisher/hcat-publisher-dev)
#   HCAT_NOTIFY_CONSUMER_USER/PASSWORD reader principal      (hcat-reader/hcat-reader-dev)
#   HCAT_NOTIFY_BROKER_NAME            broker name (broker 2: NAME-2)      (hcat-notify)
#   HCAT_NOTIFY_TOPIC_PREFIX           topic prefix the service writes    (hcat)
#   HCAT_NOTIFY_BROKER_START_TIMEOUT   seconds to wait for STOMP CONNECTED, or for a
#                                      slave to reach the store lock (60)
#   HCAT_NOTIFY_BROKER_STOP_TIMEOUT    seconds to wait after SIGTERM       (30)
#   HCAT_NOTIFY_BROKER_JAVA_OPTS       JVM options                  (-Xms1g -Xmx1g)
#                                      A fixed heap of 1 GiB: ActiveMQ's STOMP decoder
#                                      allocates ~150 KiB per SEND (a 10 KiB buffer per
#                                      header line), which the young generation, sized
#                                      from the committed heap, collects; at 512 MiB the
#                                      collector took twice the CPU (docs/operations.md,
#                                      "The broker's heap").
#   HCAT_NOTIFY_ACTIVEMQ_HOME          ActiveMQ installation        (/usr/share/activemq)
#   HCAT_NOTIFY_JAVA_DIR               where the extra jars are     (/usr/share/java)
#   HCAT_NOTIFY_BROKER_JDBC_URL        the JDBC store's database, as --jdbc-url
#
# Both brokers of a pair get the same credentials and authorization (one activemq.xml).
# Passwords (and the JDBC URL, which carries one) are handed to the JVM in a mode-600
# java @argfile, not on the command line.
# Exit status: 0 ok; 1 error; 2 usage; status prints "stopped" and exits 3 when no
# broker runs.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
REPO_DIR=$(cd -- "$SCRIPT_DIR/../.." && pwd -P)
CONF_SRC="$REPO_DIR/deploy/activemq"

AMQ_HOME=${HCAT_NOTIFY_ACTIVEMQ_HOME:-/usr/share/activemq}
AMQ_JAR="$AMQ_HOME/bin/activemq.jar"
# Absolute (symlinks kept): a running broker is recognised by -Dactivemq.base=$BASE, so a
# relative HCAT_NOTIFY_HOME (e.g. .data/demo) must name the same broker as the absolute one.
ROOT=$(realpath -ms -- "${HCAT_NOTIFY_HOME:-${HOME:?set HOME or HCAT_NOTIFY_HOME}/.hcat-notify}")
# One store for every broker of this home: a pair shares broker 1's KahaDB directory, or
# the database of the JDBC URL the home records (see select_store).
STORE_DIR="$ROOT/activemq/data/kahadb"
JDBC_RECORD="$ROOT/jdbc-store.url"
JDBC_URL=${HCAT_NOTIFY_BROKER_JDBC_URL:-} # --jdbc-url overrides
STORE=kahadb                              # or jdbc: select_store decides
JAVA_DIR=${HCAT_NOTIFY_JAVA_DIR:-/usr/share/java}

HOST=127.0.0.1
STOMP_PORT_1=${HCAT_NOTIFY_BROKER_PORT:-61613}
OPENWIRE_PORT_1=${HCAT_NOTIFY_OPENWIRE_PORT:-61616}
PUB_USER=${HCAT_NOTIFY_BROKER_USER:-hcat-publisher}
PUB_PASS=${HCAT_NOTIFY_BROKER_PASSWORD:-hcat-publisher-dev}
READER_USER=${HCAT_NOTIFY_CONSUMER_USER:-hcat-reader}
READER_PASS=${HCAT_NOTIFY_CONSUMER_PASSWORD:-hcat-reader-dev}
# Lower-cased like the service's topic names; authorization covers <prefix> and <prefix>.>
TOPIC_PREFIX=$(printf '%s' "${HCAT_NOTIFY_TOPIC_PREFIX:-hcat}" | tr '[:upper:]' '[:lower:]')
BROKER_NAME_1=${HCAT_NOTIFY_BROKER_NAME:-hcat-notify}
START_TIMEOUT=${HCAT_NOTIFY_BROKER_START_TIMEOUT:-60}
STOP_TIMEOUT=${HCAT_NOTIFY_BROKER_STOP_TIMEOUT:-30}
JAVA_OPTS=${HCAT_NOTIFY_BROKER_JAVA_OPTS:--Xms1g -Xmx1g}

# use_broker N: point the per-broker variables at broker N (1, or 2 of a pair).
use_broker() {
    N=$1
    if [[ $N == 1 ]]; then
        BASE="$ROOT/activemq"
        STOMP_PORT=$STOMP_PORT_1
        OPENWIRE_PORT=$OPENWIRE_PORT_1
        BROKER_NAME=$BROKER_NAME_1
    else
        BASE="$ROOT/activemq-2"
        STOMP_PORT=$((10#$STOMP_PORT_1 + 1))
        OPENWIRE_PORT=$((10#$OPENWIRE_PORT_1 + 1))
        BROKER_NAME="$BROKER_NAME_1-2"
    fi
    PID_FILE="$BASE/activemq.pid"
    ADDR_FILE="$BASE/activemq.stomp"
    OUT_LOG="$BASE/activemq.out"
    BROKER_LOG="$BASE/data/activemq.log"
    ARG_FILE="$BASE/conf/java.args"
}
use_broker 1
PAIR_MODE=0 # 1: messages name the broker of the pair

log() { printf 'activemq.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    echo "usage: $0 start [--pair] [--jdbc-url URL] | stop | restart [--pair] [--jdbc-url URL] | status" >&2
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
EXTRA_JARS=("$JAVA_DIR/xstream.jar:libxstream-java" "$JAVA_DIR/jettison.jar:libjettison-java")
# The JDBC store (store-jdbc.xml): ActiveMQ's own JDBC store (on the classpath already, in
# lib/), PostgreSQL's driver, and DBCP 2 with its pool for the broker's connections.
JDBC_JARS=(
    "$JAVA_DIR/activemq-jdbc-store.jar:libactivemq-java"
    "$JAVA_DIR/postgresql.jar:libpostgresql-jdbc-java"
    "$JAVA_DIR/commons-dbcp2.jar:libcommons-dbcp2-java"
    "$JAVA_DIR/commons-pool2.jar:libcommons-pool2-java"
)

# store_jars: the entries of EXTRA_JARS and, with the JDBC store, JDBC_JARS.
store_jars() {
    printf '%s\n' "${EXTRA_JARS[@]}"
    if [[ $STORE == jdbc ]]; then
        printf '%s\n' "${JDBC_JARS[@]}"
    fi
}

# check_jars WHAT ENTRY...: die naming the Debian packages of the jars that are missing.
check_jars() {
    local what=$1 entry missing_jars=() missing_pkgs=()
    shift
    for entry in "$@"; do
        if [[ ! -f ${entry%%:*} ]]; then
            missing_jars+=("${entry%%:*}")
            missing_pkgs+=("${entry##*:}")
        fi
    done
    if ((${#missing_jars[@]})); then
        die "missing ${missing_jars[*]} (needed by $what): apt-get install ${missing_pkgs[*]}"
    fi
}

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
    check_jars "advisories over STOMP" "${EXTRA_JARS[@]}"
    if [[ $STORE == jdbc ]]; then
        check_jars "the JDBC store" "${JDBC_JARS[@]}"
    fi
}

# --- STOMP probe --------------------------------------------------------------------

# stomp_probe [PORT]: CONNECT as the publisher (default: the current broker's port).
# Returns 0 on CONNECTED, 1 if nothing answers (yet), 2 on an ERROR frame (its message
# header is printed on stdout).
stomp_probe() {
    local port=${1:-$STOMP_PORT}
    (
        exec 3<>"/dev/tcp/$HOST/$port" || exit 1
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
    hint=$(grep -hoE 'Failed to bind to server socket: [^ ]+|Address already in use|SAXParseException[^|]*|Could not resolve placeholder[^|]*|PSQLException: (FATAL|Connection to)[^|]*|ClassNotFoundException: [^ |]*' \
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
    kill -CONT "$pid" 2>/dev/null || true # a stopped (SIGSTOP) broker handles TERM only now
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

# --- roles in a pair ----------------------------------------------------------------

# lock_holder: print the pid holding the store's lock (from /proc/locks: ActiveMQ takes a
# POSIX lock on STORE_DIR/lock); fail if nobody holds it or it cannot be told.
lock_holder() {
    local inode
    inode=$(stat -L -c %i -- "$STORE_DIR/lock" 2>/dev/null) || return 1
    awk -v inode="$inode" '$2 == "POSIX" && $4 == "WRITE" {
            n = split($6, dev, ":"); if (dev[n] == inode) { print $5; found = 1; exit }
        } END { exit !found }' /proc/locks 2>/dev/null
}

# lease_role: what the current broker's log last said of the JDBC store's lease:
# "slave" (it tries to acquire it), "master" (it acquired it) or "unknown". A broker logs
# the first at every (re)start, the second once it holds the lease.
lease_role() {
    local last
    last=$(grep -ohE 'attempting to acquire exclusive lease|becoming master' -- "$BROKER_LOG" 2>/dev/null |
        tail -n 1) || true
    case $last in
    becoming*) echo master ;;
    attempting*) echo slave ;;
    *) echo unknown ;;
    esac
}

# role PID: "master" (holds the store lock or lease), "slave" (waits for it) or "unknown".
role() {
    local holder
    if [[ $STORE == jdbc ]]; then
        # A JDBC slave keeps its ports closed: whoever answers is master. One that does
        # not answer yet is master if it already holds the lease (it is starting up).
        if stomp_probe >/dev/null; then
            echo master
        else
            lease_role
        fi
    elif holder=$(lock_holder); then
        [[ $holder == "$1" ]] && echo master || echo slave
    elif stomp_probe >/dev/null; then
        echo master
    else
        echo unknown
    fi
}

# is_pair: broker 2 was ever started in this home.
is_pair() {
    [[ -d $ROOT/activemq-2/conf ]]
}

# waiting_since OFFSET: the broker log, from byte OFFSET on, says this broker waits for
# the store's lock (KahaDB: logged once, when it first finds the lock taken) or tries to
# acquire its lease (JDBC: logged before the first attempt; start_broker asks only while
# the broker does not serve and the other one does).
waiting_since() {
    local pattern='waiting a lock to be acquired'
    [[ $STORE == jdbc ]] && pattern='attempting to acquire exclusive lease'
    [[ -f $BROKER_LOG ]] &&
        tail -c "+$(($1 + 1))" -- "$BROKER_LOG" 2>/dev/null | grep -q "$pattern"
}

# --- the store ----------------------------------------------------------------------

# jdbc_target: the JDBC URL without its parameters (which carry the password).
jdbc_target() {
    printf '%s\n' "${JDBC_URL%%\?*}"
}

# store_lock: what a slave waits for, for messages.
store_lock() {
    if [[ $STORE == jdbc ]]; then
        echo "the lease in $(jdbc_target)"
    else
        echo "the lock on $STORE_DIR"
    fi
}

# any_running: some broker of this home runs.
any_running() {
    local n found=1
    for n in 1 2; do
        use_broker "$n"
        if running_pid >/dev/null; then
            found=0
        fi
    done
    use_broker 1
    return "$found"
}

# select_store [start]: the store of this home. A JDBC URL (--jdbc-url or
# HCAT_NOTIFY_BROKER_JDBC_URL) selects the JDBC store, and `start` records it for later
# commands; without one, the recorded URL if any, else KahaDB. A running pair keeps its
# store: `start` refuses another one.
select_store() {
    local recorded=
    if [[ -f $JDBC_RECORD ]]; then
        recorded=$(<"$JDBC_RECORD")
    fi
    if [[ -z $JDBC_URL ]]; then
        if [[ -n $recorded ]]; then
            STORE=jdbc
            JDBC_URL=$recorded
        fi
        return 0
    fi
    [[ $JDBC_URL == jdbc:postgresql://* ]] ||
        die "the JDBC URL must be jdbc:postgresql://HOST:PORT/DATABASE?user=U&password=P, got ${JDBC_URL%%//*}//..."
    STORE=jdbc
    [[ ${1:-} == start && $JDBC_URL != "$recorded" ]] || return 0
    if any_running; then
        if [[ -n $recorded ]]; then
            die "the brokers of $ROOT run on another JDBC URL (${recorded%%\?*}); stop them first"
        fi
        die "the brokers of $ROOT run on KahaDB ($STORE_DIR); stop them first"
    fi
    mkdir -p -- "$ROOT"
    (
        umask 077
        printf '%s\n' "$JDBC_URL" >"$JDBC_RECORD.tmp"
        mv -f -- "$JDBC_RECORD.tmp" "$JDBC_RECORD"
    )
}

# --- commands -----------------------------------------------------------------------

# argfile_quote VALUE: quote for a java @argfile (double quotes; \ and " escaped).
argfile_quote() {
    local v=${1//\\/\\\\}
    v=${v//\"/\\\"}
    printf '"%s"\n' "$v"
}

check_ports() {
    is_port "$STOMP_PORT_1" || die "HCAT_NOTIFY_BROKER_PORT is not a port number: $STOMP_PORT_1"
    is_port "$OPENWIRE_PORT_1" || die "HCAT_NOTIFY_OPENWIRE_PORT is not a port number: $OPENWIRE_PORT_1"
    [[ $STOMP_PORT_1 != "$OPENWIRE_PORT_1" ]] || die "STOMP and OpenWire ports are both $STOMP_PORT_1"
    if [[ ${1:-} == pair ]]; then
        # Broker 2 listens on both ports + 1: none of the four may coincide.
        ((10#$STOMP_PORT_1 < 65535 && 10#$OPENWIRE_PORT_1 < 65535)) ||
            die "a pair needs HCAT_NOTIFY_BROKER_PORT and HCAT_NOTIFY_OPENWIRE_PORT below 65535"
        local diff=$((10#$STOMP_PORT_1 - 10#$OPENWIRE_PORT_1))
        ((diff != 1 && diff != -1)) ||
            die "a pair uses ports + 1 for broker 2: HCAT_NOTIFY_BROKER_PORT ($STOMP_PORT_1) and" \
                "HCAT_NOTIFY_OPENWIRE_PORT ($OPENWIRE_PORT_1) must be at least 2 apart"
    fi
}

# start_broker: start the current broker (use_broker) unless it runs; return once it is
# master (STOMP CONNECTED on its port) or, in a pair, a slave waiting for the store lock
# while the other broker serves.
start_broker() {
    local pid
    if pid=$(running_pid); then
        if [[ $PAIR_MODE == 1 ]]; then
            echo "broker $N already running (pid $pid, $(role "$pid")); nothing to do"
        else
            echo "activemq already running (pid $pid, stomp $(cat "$ADDR_FILE" 2>/dev/null || echo "$HOST:$STOMP_PORT")); nothing to do"
        fi
        return 0
    fi
    local peer_port=
    if [[ $N == 2 ]]; then
        peer_port=$STOMP_PORT_1
    elif [[ $PAIR_MODE == 1 ]]; then
        peer_port=$((10#$STOMP_PORT_1 + 1))
    fi
    [[ -f $CONF_SRC/activemq.xml ]] || die "broker config not found: $CONF_SRC/activemq.xml"
    [[ -f $CONF_SRC/store-$STORE.xml ]] || die "store config not found: $CONF_SRC/store-$STORE.xml"
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

    mkdir -p -- "$BASE/conf" "$BASE/data" "$BASE/tmp" "$BASE/lib" "$STORE_DIR"
    # The jars ensure_installed checked (see EXTRA_JARS, JDBC_JARS) that the installation
    # does not put on the classpath itself; only those.
    local entry jar
    find "$BASE/lib" -maxdepth 1 -type l -delete
    while IFS= read -r entry; do
        jar=${entry%%:*}
        [[ -e $AMQ_HOME/lib/${jar##*/} ]] && continue
        ln -sfn -- "$jar" "$BASE/lib/${jar##*/}"
    done < <(store_jars)
    rm -f -- "$PID_FILE" "$ADDR_FILE"
    cp -f -- "$CONF_SRC/activemq.xml" "$CONF_SRC"/store-*.xml "$BASE/conf/"
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
            if [[ $STORE == jdbc ]]; then
                argfile_quote "-Dhcat.jdbc.url=$JDBC_URL"
            fi
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
        "-Dhcat.store=$STORE"
        "-Dhcat.store.dir=$STORE_DIR"
        "@$ARG_FILE"
        -jar "$AMQ_JAR" start "xbean:file:$BASE/conf/activemq.xml"
    )

    local log_offset=0
    [[ -f $BROKER_LOG ]] && log_offset=$(stat -c %s -- "$BROKER_LOG")
    printf '===== %s starting: %s\n' "$(date '+%F %T')" "${cmd[*]}" >>"$OUT_LOG"
    # setsid: own session, so the broker outlives this script and its terminal/process group.
    # (A background child of a non-interactive shell is never a group leader, so setsid
    # execs in place and $! is the java pid.)
    (cd -- "$BASE" && exec nohup setsid "${cmd[@]}" >>"$OUT_LOG" 2>&1 </dev/null) &
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
        if [[ -n $peer_port ]] && waiting_since "$log_offset" && stomp_probe "$peer_port" >/dev/null; then
            echo "broker $N started as slave (pid $pid, stomp $HOST:$STOMP_PORT when it takes over," \
                "openwire $HOST:$OPENWIRE_PORT, base $BASE): waits for $(store_lock)," \
                "the broker on $HOST:$peer_port serves"
            return 0
        fi
        if ((SECONDS >= deadline)); then
            if waiting_since "$log_offset"; then
                if [[ $STORE == jdbc ]]; then
                    log "error: broker $N waits for $(store_lock), but no other broker of this" \
                        "home serves (the lease is another broker's?); stopping pid $pid"
                else
                    log "error: broker $N waits for $(store_lock), but no other broker of" \
                        "this home serves (holder: pid $(lock_holder || echo unknown)); stopping pid $pid"
                fi
            else
                log "error: no STOMP CONNECTED from $HOST:$STOMP_PORT within ${START_TIMEOUT}s; stopping pid $pid"
            fi
            kill_pid "$pid"
            rm -f -- "$PID_FILE" "$ADDR_FILE"
            show_logs
            exit 1
        fi
        sleep 0.3
    done
    local store=
    [[ $STORE == jdbc ]] && store=", store $(jdbc_target)"
    if [[ $PAIR_MODE == 1 ]]; then
        echo "broker $N started as master (pid $pid, stomp $HOST:$STOMP_PORT, openwire $HOST:$OPENWIRE_PORT, base $BASE$store)"
    else
        echo "activemq started (pid $pid, stomp $HOST:$STOMP_PORT, openwire $HOST:$OPENWIRE_PORT, base $BASE$store)"
    fi
}

cmd_start() {
    local pair=${1:-}
    if [[ $pair == pair ]] || is_pair; then
        PAIR_MODE=1
    fi
    check_ports "$pair"
    select_store start
    ensure_installed
    use_broker 1
    start_broker
    if [[ $pair == pair ]]; then
        use_broker 2
        start_broker
    fi
}

# stop_broker: stop the current broker if it runs; prints what it did.
stop_broker() {
    local pid
    if ! pid=$(running_pid); then
        rm -f -- "$PID_FILE" "$ADDR_FILE"
        return 1
    fi
    kill_pid "$pid"
    if alive "$pid"; then
        die "pid $pid is still alive after SIGKILL"
    fi
    rm -f -- "$PID_FILE" "$ADDR_FILE"
    if is_pair; then
        echo "broker $N stopped (pid $pid)"
    else
        echo "activemq stopped (pid $pid)"
    fi
}

cmd_stop() {
    local stopped=0 n pid order=(1)
    select_store
    if is_pair; then
        # Slaves first: a master stopped first would hand the store to a slave that is
        # about to be stopped anyway.
        order=()
        for n in 1 2; do
            use_broker "$n"
            if pid=$(running_pid) && [[ $(role "$pid") != master ]]; then
                order=("$n" "${order[@]}")
            else
                order+=("$n")
            fi
        done
    fi
    for n in "${order[@]}"; do
        use_broker "$n"
        if stop_broker; then
            stopped=1
        fi
    done
    if ((stopped == 0)); then
        echo "activemq not running; nothing to do"
    fi
}

cmd_status() {
    local pid n running=0
    select_store
    if ! is_pair; then
        use_broker 1
        if pid=$(running_pid); then
            echo "running (pid $pid, stomp $(cat "$ADDR_FILE" 2>/dev/null || echo "$HOST:$STOMP_PORT"))"
            return 0
        fi
        echo "stopped"
        return 3
    fi
    local -a lines=()
    for n in 1 2; do
        use_broker "$n"
        if pid=$(running_pid); then
            running=1
            case $(role "$pid") in
            master)
                if stomp_probe >/dev/null; then
                    lines+=("broker $n: master (pid $pid, stomp $HOST:$STOMP_PORT, openwire $HOST:$OPENWIRE_PORT)")
                else
                    lines+=("broker $n: master, not answering on stomp $HOST:$STOMP_PORT yet (pid $pid)")
                fi
                ;;
            slave)
                if [[ $STORE == jdbc ]]; then
                    lines+=("broker $n: slave, waiting for the database lease (pid $pid, stomp $HOST:$STOMP_PORT when it takes over)")
                else
                    lines+=("broker $n: slave, waiting for the store lock (pid $pid, stomp $HOST:$STOMP_PORT when it takes over)")
                fi
                ;;
            *)
                lines+=("broker $n: running, role unknown (pid $pid, stomp $HOST:$STOMP_PORT)")
                ;;
            esac
        else
            lines+=("broker $n: stopped (stomp $HOST:$STOMP_PORT)")
        fi
    done
    if ((running == 0)); then
        echo "stopped"
        return 3
    fi
    printf '%s\n' "${lines[@]}"
}

# parse_args ARGS: COMMAND, PAIR_ARG ("pair" or empty) and JDBC_URL (--jdbc-url).
parse_args() {
    COMMAND=${1:-}
    PAIR_ARG=
    [[ $# -gt 0 ]] && shift
    local arg want_url=0
    for arg in "$@"; do
        if ((want_url)); then
            [[ -n $arg ]] || usage
            JDBC_URL=$arg
            want_url=0
            continue
        fi
        case $COMMAND:$arg in
        start:--pair | restart:--pair) PAIR_ARG=pair ;;
        start:--jdbc-url | restart:--jdbc-url) want_url=1 ;;
        start:--jdbc-url=?* | restart:--jdbc-url=?*) JDBC_URL=${arg#--jdbc-url=} ;;
        *) usage ;;
        esac
    done
    ((want_url == 0)) || usage
}

parse_args "$@"
case $COMMAND in
start) cmd_start "$PAIR_ARG" ;;
stop) cmd_stop ;;
restart)
    cmd_stop
    cmd_start "$PAIR_ARG"
    ;;
status) cmd_status ;;
*) usage ;;
esac
