"""Broker failover: kill -9 of the master -> first receipt from the slave, and -> first
notification at a consumer.

A master/slave pair from ``deploy/local/activemq.sh start --pair`` (one KahaDB store, or
with ``--store jdbc`` the JDBC store with its lease locker in a PostgreSQL database:
``--jdbc-url``, or a private PostgreSQL 15 cluster from ``deploy/local/postgres.sh``) in
a temporary home; a ``Relay.run()`` thread and a started ``NotificationConsumer`` thread
on ``stomp://master,stomp://slave``; a producer calling ``send_mark_set_done`` at a steady
rate. Each round: let events flow, kill -9 whichever broker is master, and measure

* kill -> the relay's first RECEIPT from the slave (``RelayStats.broker_since``: when the
  broker of the relay's receipts last changed, stamped as the relay records them);
* kill -> the consumer's first notification of an event written after the kill (the
  consumer reconnects, re-subscribes, catches up from its watermarks); and, apart, its
  first live one (a MESSAGE from the slave);
* 0 lost: the producer pauses and every event written so far must have reached the
  consumer, each once.

Then the killed broker is started again (it waits as the slave) for the next round.

Reference (physical floor), same rounds: kill -> the slave's STOMP port accepting TCP
connections, probed every 10 ms: the broker's own takeover (KahaDB: lock, keep-alive
check, start-up; JDBC: the lease running out, the slave's next attempt, start-up), which
no client can beat.

Targets: p99 <= 5 s to the first receipt, <= 8 s to the consumer; 0 lost in every round.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from _support import (
    BROKER_SCRIPT,
    HOST,
    Row,
    create_table,
    drop_workdir,
    footer,
    free_port,
    log,
    machine_line,
    make_settings,
    parser,
    percentiles,
    postgres,
    print_table,
    run_main,
    stop_on_sigterm,
    unique_table,
)

from hcat_notify.config import Settings
from hcat_notify.consumer import Notification, NotificationConsumer, Source
from hcat_notify.relay import Relay, RelayConfig
from hcat_notify.store import Catalog
from hcat_notify.writer import send_mark_set_done

TARGET_RECEIPT_P99 = 5.0
TARGET_CONSUMER_P99 = 8.0
RATE = 50.0  # events/s from the producer
WAIT = 60.0  # longest wait for anything in a round


@dataclass
class Pair:
    """Two brokers on one store, managed by activemq.sh; broker 2 on the ports + 1."""

    home: Path
    stomp_port: int
    openwire_port: int
    jdbc_url: str | None = None  # the JDBC store's database; None: KahaDB

    @property
    def ports(self) -> dict[int, int]:
        return {1: self.stomp_port, 2: self.stomp_port + 1}

    @property
    def url(self) -> str:
        return ",".join(f"stomp://{HOST}:{port}" for port in self.ports.values())

    def script(self, *args: str) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HCAT_NOTIFY_")}
        env.update(
            HCAT_NOTIFY_HOME=str(self.home),
            HCAT_NOTIFY_BROKER_PORT=str(self.stomp_port),
            HCAT_NOTIFY_OPENWIRE_PORT=str(self.openwire_port),
            HCAT_NOTIFY_BROKER_START_TIMEOUT="120",
        )
        if self.jdbc_url is not None:
            env["HCAT_NOTIFY_BROKER_JDBC_URL"] = self.jdbc_url
        result = subprocess.run(
            ["bash", str(BROKER_SCRIPT), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if result.returncode not in (0, 3):
            raise RuntimeError(f"activemq.sh {' '.join(args)}: {result.stdout}{result.stderr}")
        return result.stdout

    def pid(self, number: int) -> int | None:
        base = self.home / ("activemq" if number == 1 else "activemq-2")
        try:
            pid = int((base / "activemq.pid").read_text())
            os.kill(pid, 0)
        except (OSError, ValueError):
            return None
        return pid

    def master(self) -> int:
        """The number of the broker that accepts connections (waits for one)."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            for number, port in self.ports.items():
                if self.pid(number) is not None and listening(port):
                    return number
            time.sleep(0.05)
        raise RuntimeError(f"no broker of the pair serves:\n{self.script('status')}")


def listening(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.2):
            return True
    except OSError:
        return False


def pair_ports() -> tuple[int, int]:
    """STOMP and OpenWire ports for broker 1, each free together with the next one
    (broker 2's)."""
    found: list[int] = []
    while len(found) < 2:
        port = free_port()
        taken = {p + d for p in found for d in (0, 1)}
        if port + 1 < 65_535 and not {port, port + 1} & taken and bindable(port + 1):
            found.append(port)
    return found[0], found[1]


def bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


@dataclass
class Flow:
    """The producer, and what the consumer received (ids, arrival times, sources)."""

    table: str
    settings: Settings
    produced: list[int] = field(default_factory=list)
    written_at: dict[int, float] = field(default_factory=dict)  # monotonic, after commit
    received: list[tuple[int, float, Source]] = field(default_factory=list)
    paused: threading.Event = field(default_factory=threading.Event)
    stopped: threading.Event = field(default_factory=threading.Event)

    def produce(self) -> None:
        n = 0
        while not self.stopped.is_set():
            if self.paused.is_set():
                time.sleep(0.01)
                continue
            event_id = send_mark_set_done(
                self.table, {"datestamp": f"f{n}"}, settings=self.settings
            )
            self.written_at[event_id] = time.monotonic()
            self.produced.append(event_id)
            n += 1
            time.sleep(1 / RATE)

    def handle(self, notification: Notification) -> None:
        self.received.append((notification.event_id, time.monotonic(), notification.source))


@dataclass
class Round:
    receipt: float  # seconds from the kill
    consumer: float
    consumer_live: float
    floor: float  # the slave listening
    lost: int
    duplicates: int
    killed: int  # broker number


def one_round(pair: Pair, relay: Relay, flow: Flow) -> Round:
    master = pair.master()
    slave = 2 if master == 1 else 1
    slave_url = f"stomp://{HOST}:{pair.ports[slave]}"
    time.sleep(2)  # a steady flow before the kill
    pid = pair.pid(master)
    assert pid is not None
    killed_wall = datetime.now(UTC)
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)

    floor = receipt = None
    deadline = killed + WAIT
    while (floor is None or receipt is None) and time.monotonic() < deadline:
        now = time.monotonic()
        if floor is None and listening(pair.ports[slave]):
            floor = now - killed
        since = relay.stats.broker_since
        if (
            receipt is None
            and relay.stats.broker == slave_url
            and since is not None
            and since > killed_wall
        ):
            receipt = (since - killed_wall).total_seconds()
        time.sleep(0.01)
    consumer = consumer_live = None
    while consumer_live is None and time.monotonic() < deadline:
        # Events written after the kill: only the slave can have published them, and
        # the consumer has them once it is subscribed there (caught up or live).
        new = [
            (at - killed, source)
            for e, at, source in list(flow.received)
            if flow.written_at.get(e, 0.0) > killed
        ]
        consumer = min((t for t, _ in new), default=None)
        consumer_live = min((t for t, source in new if source is Source.LIVE), default=None)
        time.sleep(0.05)

    # 0 lost: pause the producer; everything written so far must arrive, once.
    flow.paused.set()
    time.sleep(0.1)
    produced = set(flow.produced)
    wait_until = time.monotonic() + WAIT
    while not produced <= {e for e, _, _ in flow.received} and time.monotonic() < wait_until:
        time.sleep(0.1)
    ids = [event_id for event_id, _, _ in flow.received]
    lost = len(produced - set(ids))
    duplicates = len(ids) - len(set(ids))
    flow.paused.clear()
    pair.script("start", "--pair")  # the killed broker comes back as the slave
    if receipt is None or consumer is None or consumer_live is None or floor is None:
        raise RuntimeError("a round timed out: no receipt or no notification after the kill")
    return Round(receipt, consumer, consumer_live, floor, lost, duplicates, master)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=None, help="kills (10; 3 with --quick)")
    p.add_argument(
        "--store",
        choices=("kahadb", "jdbc"),
        default="kahadb",
        help="the pair's store: one KahaDB directory, or a PostgreSQL database (lease locker)",
    )
    p.add_argument(
        "--jdbc-url",
        default=None,
        help="with --store jdbc: jdbc:postgresql://HOST:PORT/DB?user=U&password=P of an "
        "EMPTY, disposable database; default: a private PostgreSQL 15 cluster "
        "(deploy/local/postgres.sh) in the temporary directory",
    )
    args = p.parse_args()
    rounds = args.rounds or (3 if args.quick else 10)
    stop_on_sigterm()
    workdir = Path(tempfile.mkdtemp(prefix="hcat-bench-failover-"))
    own_postgres = args.store == "jdbc" and args.jdbc_url is None
    pg_port = free_port()
    started = False
    try:
        print(
            f"# broker failover, {args.store} store, {rounds} kills"
            f"{' (--quick)' if args.quick else ''}"
        )
        print(f"# {machine_line()}")
        jdbc_url = args.jdbc_url
        if own_postgres:
            postgres(workdir, pg_port, "start")
            # The private cluster trusts local connections; its postgres database is ours.
            jdbc_url = f"jdbc:postgresql://{HOST}:{pg_port}/postgres?user=postgres"
        pair = Pair(workdir, *pair_ports(), jdbc_url=jdbc_url)
        pair.script("start", "--pair")
        started = True
        log(pair.script("status").strip().replace("\n", "; "))
        settings = make_settings(workdir, pair.url, args.db_url)
        store = "KahaDB" if jdbc_url is None else jdbc_url.split("?", 1)[0]
        print(
            f"# brokers {pair.url} (pair, {workdir}, store {store}); "
            f"catalog {settings.database_url}"
        )
        results = run_rounds(pair, settings, rounds)
    finally:
        if started:
            pair.script("stop")
        if own_postgres:
            postgres(workdir, pg_port, "destroy")
        drop_workdir(workdir, keep=args.keep)
    report(results, args.store)
    footer()


def run_rounds(pair: Pair, settings: Settings, rounds: int) -> list[Round]:
    with Catalog.open(settings) as catalog:
        table = unique_table("failover")
        create_table(catalog, table)
    flow = Flow(table, settings)
    relay = Relay(settings, config=RelayConfig())
    relay_thread = threading.Thread(target=relay.run, name="relay", daemon=True)
    consumer = NotificationConsumer([table], settings=settings, cursor=0)
    consumer.start()
    consumer_thread = threading.Thread(
        target=consumer.run, args=(flow.handle,), name="consumer", daemon=True
    )
    producer = threading.Thread(target=flow.produce, name="producer", daemon=True)
    results: list[Round] = []
    try:
        relay_thread.start()
        consumer_thread.start()
        producer.start()
        for number in range(1, rounds + 1):
            result = one_round(pair, relay, flow)
            results.append(result)
            log(
                f"round {number}: killed broker {result.killed}; receipt {result.receipt:.2f} s, "
                f"consumer {result.consumer:.2f} s (live {result.consumer_live:.2f} s), slave "
                f"listening {result.floor:.2f} s; lost {result.lost}, repeated "
                f"{result.duplicates}"
            )
    finally:
        flow.stopped.set()
        producer.join(10)
        consumer.stop()
        consumer_thread.join(15)
        consumer.close()
        relay.stop()
        relay_thread.join(15)
        relay.close()
    return results


def report(results: list[Round], store: str) -> None:
    receipt = percentiles([r.receipt for r in results])
    consumer = percentiles([r.consumer for r in results])
    live = percentiles([r.consumer_live for r in results])
    floor = percentiles([r.floor for r in results])
    rows = [
        Row(
            f"kill -> {what}, {key}",
            ours[key],
            floor[key],
            unit="s",
            target=("<", target) if key == "p99" else None,
            ratio_mode="ref/ours",
            digits=2,
        )
        for what, ours, target in (
            ("first receipt from the slave", receipt, TARGET_RECEIPT_P99),
            ("first notification at the consumer", consumer, TARGET_CONSUMER_P99),
        )
        for key in ("p50", "p99", "max")
    ]
    rows.append(
        Row(
            "  of which the first live one (a MESSAGE from the slave), p50 / p99",
            f"{live['p50']:.2f} / {live['p99']:.2f}",
            unit="s",
        )
    )
    rows.append(
        Row(
            "lost / repeated at the consumer, all rounds",
            f"{sum(r.lost for r in results)} / {sum(r.duplicates for r in results)}",
            target=None,
        )
    )
    print_table(
        f"broker failover ({store} store) over {len(results)} kills of the master (kill -9)",
        rows,
        notes=[
            "reference: kill -> the slave's STOMP port accepting TCP connections (the store's"
            " lock or lease, start-up), probed every 10 ms: the floor for any client",
            f"producer: send_mark_set_done at {RATE:g}/s throughout; 'lost' = written but"
            " never delivered once the producer paused (must be 0 every round)",
        ],
    )
    if any(r.lost or r.duplicates for r in results):
        print("FAILED: events were lost or repeated in some round")


if __name__ == "__main__":
    run_main(main)
