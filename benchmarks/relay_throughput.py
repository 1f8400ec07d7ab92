"""Relay throughput: events/s from the outbox to the broker, receipt-confirmed.

Setup (not timed): a private broker, a SQLite catalog, one table and N mark-set-done events
written through ``Catalog.mark_set_done``. Timed: ``Relay(...).drain()`` until every event
is published: the relay joins the group, takes every bucket, sends, and has recorded each
topic's progress (only after the COMMIT receipts) when it returns.

Reference, same run, same broker: raw stomp.py (``Connection12``, publisher principal)
sending the same N bodies with the same headers (``amq-msg-type: text``,
``persistent: true``, the HCAT_* properties) in STOMP transactions of the same batch size,
with a receipt on each COMMIT. Rounds alternate relay and raw; best and median are
reported. Between relay rounds the progress is reset (not timed).

One round of everything (relay, stomp.py, STOMP floor, Java) runs first and is not
counted. The broker's JIT compiles its STOMP decoding during the first STOMP-heavy run
after it starts, which was the relay's first round: the broker's CPU per STOMP message
falls from 30-50 µs over its first ~80,000 messages to 12-14 µs, and a relay round right
after start ran at a fifth of the next one, while the Java producer's unmeasured run had
warmed the OpenWire path. Counting from a warm broker is what a running relay meets; the
figures of the first rounds, counted as before 7a7218e, are printed beside.

The broker's own floor, same run, same broker (issue 31): a small Java producer on
OpenWire (``benchmarks/java/OpenWireProducer.java``, compiled by this benchmark with
``javac`` against ActiveMQ's jars: ``$ACTIVEMQ_HOME/lib`` or ``/usr/share/activemq/lib``)
sending the same bodies with the HCAT_* headers as string properties, persistent, in JMS
transactions of the same batch size (each COMMIT waits for the broker), timed in the JVM
from connecting to the last COMMIT. Rounds alternate relay, stomp.py, Java.

The STOMP floor, same run: what any STOMP client gets from this broker. The relay's own
SEND frames, encoded beforehand (not timed), in transactions of the batch size on a bare
socket, each next transaction written while the COMMIT's receipt is awaited. Beside each
figure, the CPU per event of the client's process and the broker's (``/proc``), and of
the broker's the part its garbage collector's threads used: the broker parses a STOMP
SEND's text headers byte by byte, into a fresh 10 KiB buffer per header line (ActiveMQ
5.17's ``StompWireFormat``), where OpenWire's properties stay marshalled; the split says
which side of the relay's run to cut (docs/operations.md, "The broker's heap").

``--bulk-stomp-decoder`` (an experiment, not the product): the broker decodes STOMP with
``benchmarks/java/BulkStompWireFormat.java`` (large reads, header lines split in place)
instead of ActiveMQ's own decoder: what the relay would reach if ActiveMQ's did that.

Targets (issue 31): relay/Java >= 0.9 at every batch size. The stomp.py rows are context
(issue 9's targets: relay/raw >= 0.9 at batch 500 and >= 0.8 at batch 2,000).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import os
import shutil
import socket
import statistics
import subprocess
import time
from collections.abc import Iterator, Sequence
from typing import Any

from _cpu_meter import CpuMeter
from _java import (
    BULK_STOMP_CLASS,
    JAVA_DIR,
    activemq_classpath,
    compile_java,
    install_bulk_stomp_decoder,
    require_loaded,
)
from _support import (
    HOST,
    PUBLISHER,
    BenchEnv,
    RawListener,
    Row,
    bench_env,
    create_table,
    footer,
    header,
    log,
    parser,
    print_table,
    raw_close,
    raw_connect,
    raw_wait,
    run_main,
    unique_table,
)
from sqlalchemy import create_engine, text

from hcat_notify.broker import BrokerConnection
from hcat_notify.broker.frames import send_chunks
from hcat_notify.model.topics import destination_for
from hcat_notify.relay import Relay, RelayConfig
from hcat_notify.relay.pipeline import Pipeline
from hcat_notify.relay.progress import ProgressWriter
from hcat_notify.store import Catalog, OutboxEvent
from hcat_notify.store.group import RelayGroup
from hcat_notify.store.outbox_view import Outbox

TARGETS = {500: 0.9, 2000: 0.8}  # relay / stomp.py (issue 9)
FLOOR_TARGET = 0.9  # relay / the Java OpenWire producer (issue 31)
WARM_ROUNDS = 1  # alternating rounds run first and not counted
JAVA_SOURCE = JAVA_DIR / "OpenWireProducer.java"
_tx_ids = itertools.count(1)


def reset_outbox(url: str, first: int, last: int) -> None:
    """Make events from ``first`` on unpublished again (not timed): forget the progress."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text("DELETE FROM hcat_topic_progress WHERE last_event_id >= :first"),
                {"first": first},
            )
            conn.execute(
                text("UPDATE hcat_relay_buckets SET published_through = :before"),
                {"before": first - 1},
            )
    finally:
        engine.dispose()


def load_events(catalog: Catalog, first: int, count: int) -> list[OutboxEvent]:
    events: list[OutboxEvent] = []
    after = first - 1
    while len(events) < count:
        page = catalog.outbox.events(after_event_id=after, limit=min(2000, count - len(events)))
        if not page:
            break
        events.extend(page)
        after = page[-1].event_id
    return events


def frame_headers(event: OutboxEvent) -> dict[str, str]:
    headers = dict(event.headers)
    headers["amq-msg-type"] = "text"
    headers["persistent"] = "true"
    return headers


def raw_transactions(env: BenchEnv, events: Sequence[OutboxEvent], batch: int) -> float:
    """Seconds to send ``events`` in STOMP transactions of ``batch``, receipt on COMMIT."""
    prepared = [(destination_for(e.topic), e.body, frame_headers(e)) for e in events]
    listener = RawListener()
    started = time.perf_counter()
    conn = raw_connect(env.broker.stomp_port, PUBLISHER, listener)
    try:
        for offset in range(0, len(prepared), batch):
            tx = f"raw-tx-{next(_tx_ids)}"
            conn.begin(transaction=tx)
            for destination, body, headers in prepared[offset : offset + batch]:
                conn.send(destination, body, headers={**headers, "transaction": tx})
            receipt = f"raw-commit-{tx}"
            done = listener.expect(receipt)
            conn.commit(transaction=tx, headers={"receipt": receipt})
            raw_wait(done, f"COMMIT {tx}", listener, timeout=60)
        return time.perf_counter() - started
    finally:
        raw_close(conn)


def raw_receipt_each(env: BenchEnv, events: Sequence[OutboxEvent]) -> float:
    """Seconds to send ``events`` one by one, waiting for a receipt on each."""
    prepared = [(destination_for(e.topic), e.body, frame_headers(e)) for e in events]
    listener = RawListener()
    started = time.perf_counter()
    conn = raw_connect(env.broker.stomp_port, PUBLISHER, listener)
    try:
        for index, (destination, body, headers) in enumerate(prepared):
            receipt = f"raw-send-{index}"
            done = listener.expect(receipt)
            conn.send(destination, body, headers={**headers, "receipt": receipt})
            raw_wait(done, "SEND", listener, timeout=60)
        return time.perf_counter() - started
    finally:
        raw_close(conn)


def _frame(command: str, headers: dict[str, str]) -> bytes:
    return (command + "\n" + "".join(f"{k}:{v}\n" for k, v in headers.items()) + "\n\0").encode()


class _RawSocket:
    """A STOMP 1.2 session on a bare socket: frames written as given, answers read
    until a receipt (an ERROR fails the run)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = b""
        login = {"accept-version": "1.2", "host": "localhost", "heart-beat": "0,0"}
        self.sock.sendall(
            _frame("CONNECT", {**login, "login": PUBLISHER[0], "passcode": PUBLISHER[1]})
        )
        self._until(b"CONNECTED")

    def _until(self, token: bytes) -> None:
        while token not in self._buffer:
            if b"ERROR" in self._buffer:
                raise RuntimeError(f"STOMP floor: the broker sent {self._buffer[:300]!r}")
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("STOMP floor: the broker closed the connection")
            self._buffer += chunk
        end = self._buffer.index(b"\0", self._buffer.index(token))
        self._buffer = self._buffer[end + 1 :]

    def commit(self, transaction: str) -> None:
        """COMMIT with a receipt (written; :meth:`receipt` waits for it)."""
        self.sock.sendall(_frame("COMMIT", {"transaction": transaction, "receipt": transaction}))

    def receipt(self, transaction: str) -> None:
        self._until(f"receipt-id:{transaction}\n".encode())

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(_frame("DISCONNECT", {}))
        self.sock.close()


def stomp_floor(env: BenchEnv, events: Sequence[OutboxEvent], batch: int) -> float:
    """Seconds for a STOMP client that costs nothing: the relay's own SEND frames
    (``broker/frames.py``), encoded beforehand (not timed), in transactions of
    ``batch`` on a bare socket; each next transaction is written while the COMMIT's
    receipt is awaited, its COMMIT after it, as the relay does. Incl. connect."""
    transactions = []
    for offset in range(0, len(events), batch):
        tx = f"floor-tx-{next(_tx_ids)}"
        fixed = {"amq-msg-type": "text", "persistent": "true", "transaction": tx}
        messages = [(destination_for(e.topic), e.body, e.headers) for e in events[offset:][:batch]]
        frames = b"".join(send_chunks(messages, fixed))
        transactions.append((tx, _frame("BEGIN", {"transaction": tx}) + frames))
    started = time.perf_counter()
    raw = _RawSocket(env.broker.stomp_port)
    try:
        raw.sock.sendall(transactions[0][1])
        for index, (tx, _) in enumerate(transactions):
            raw.commit(tx)
            if index + 1 < len(transactions):
                raw.sock.sendall(transactions[index + 1][1])
            raw.receipt(tx)
        return time.perf_counter() - started
    finally:
        raw.close()


class OpenWireFloor:
    """The Java producer, started once with the events and sending them all on each
    :meth:`run` (its JVM warms up over the rounds, as the broker does)."""

    def __init__(self, env: BenchEnv, events: Sequence[OutboxEvent], batch: int) -> None:
        java = shutil.which("java")
        if java is None:
            raise RuntimeError("java is needed for the OpenWire floor")
        classes = env.workdir / "java-classes"
        compile_java(JAVA_SOURCE, classes)
        classpath = activemq_classpath()
        lines = []
        for event in events:
            properties = "\x01".join(
                f"{k}={v}" for k, v in event.headers.items() if k.isidentifier()
            )
            lines.append(f"{event.topic}\t{properties}\t{event.body}")
        messages = env.workdir / f"openwire-{batch}.txt"
        messages.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.process = subprocess.Popen(
            [
                java,
                "-cp",
                f"{classes}{os.pathsep}{classpath}",
                "OpenWireProducer",
                f"tcp://{HOST}:{env.broker.openwire_port}",
                *PUBLISHER,
                str(batch),
                str(messages),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self._in, self._out = self.process.stdin, self.process.stdout
        ready = self._out.readline()
        if not ready.startswith("ready"):
            raise RuntimeError(f"OpenWireProducer did not start: {ready!r}")

    def run(self) -> float:
        """Seconds to send every event (connect to the last COMMIT), measured in the JVM."""
        self._in.write("go\n")
        self._in.flush()
        answer = self._out.readline()
        if not answer.strip():
            raise RuntimeError(f"OpenWireProducer failed (exit {self.process.poll()})")
        return float(answer)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._in.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def relay_drain(env: BenchEnv, config: RelayConfig, expected: int) -> float:
    """Seconds for ``Relay.drain()`` to publish ``expected`` events."""
    relay = Relay(env.settings, config=config)
    try:
        started = time.perf_counter()
        published = relay.drain()
        elapsed = time.perf_counter() - started
    finally:
        relay.close()
    if published != expected:
        raise RuntimeError(f"relay published {published} events, expected {expected}")
    return elapsed


# Runs in the relay's background progress thread, overlapping the publish loop.
MARK_LABEL = "record progress (background thread, overlaps)"
MARK_CALLS = "record progress calls (coalesced batches)"
# Every outbox read, also those made while a COMMIT's receipt is awaited (read ahead).
READS_LABEL = "all outbox reads, incl. read-ahead inside the COMMIT wait (overlaps)"


@contextlib.contextmanager
def phase_timers() -> Iterator[collections.defaultdict[str, float]]:
    """Time the relay's phases by wrapping the catalog, broker and relay methods it calls.

    Used only for the extra breakdown run, never for the headline figures.
    """
    spent: collections.defaultdict[str, float] = collections.defaultdict(float)
    targets = [
        (Relay, "_wait_for_buckets", "join the group, take every bucket"),
        (Pipeline, "read", "read outbox (a page not read ahead)"),
        (Outbox, "events_in_buckets", READS_LABEL),
        (RelayGroup, "record_progress", MARK_LABEL),
        (BrokerConnection, "connect", "broker connect"),
        (BrokerConnection, "begin", "SEND frames (begin+send)"),
        (BrokerConnection, "send", "SEND frames (begin+send)"),
        (BrokerConnection, "send_in_transaction", "SEND frames (begin+send)"),
        (BrokerConnection, "write_commit", "COMMIT + wait for receipt (+ read-ahead)"),
        (Pipeline, "read_ahead", "COMMIT + wait for receipt (+ read-ahead)"),
        (BrokerConnection, "await_commit", "COMMIT + wait for receipt (+ read-ahead)"),
        (ProgressWriter, "flush", "wait for progress at the end (drain)"),
    ]
    originals = [(cls, name, getattr(cls, name)) for cls, name, _ in targets]

    def timed(original: Any, label: str) -> Any:
        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spent[label] += time.perf_counter() - started
                if label == MARK_LABEL:
                    spent[MARK_CALLS] += 1

        return wrapper

    for (cls, name, label), (_, _, original) in zip(targets, originals, strict=True):
        setattr(cls, name, timed(original, label))
    try:
        yield spent
    finally:
        for cls, name, original in originals:
            setattr(cls, name, original)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=None, help="events per run (default 20,000)")
    p.add_argument(
        "--batch-sizes", default="500,2000", help="comma-separated relay/raw batch sizes"
    )
    p.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 3)")
    p.add_argument(
        "--bulk-stomp-decoder",
        action="store_true",
        help="experiment: the broker decodes STOMP with benchmarks/java/BulkStompWireFormat"
        ".java (large reads, header lines split in place; not shipped) instead of ActiveMQ's",
    )
    args = p.parse_args()
    n = args.events or (2_000 if args.quick else 20_000)
    rounds = args.rounds or (1 if args.quick else 3)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]

    install = install_bulk_stomp_decoder if args.bulk_stomp_decoder else None
    with bench_env(args, "relay", before_broker=install) as env:
        experiment = " (EXPERIMENT: the broker's bulk STOMP decoder)" * args.bulk_stomp_decoder
        header(f"relay throughput: outbox -> broker, receipt-confirmed{experiment}", args, env)
        catalog = env.catalog()
        try:
            table = unique_table("relay")
            create_table(catalog, table)
            with Relay(env.settings) as relay:  # the table's CREATE_TABLE (not timed)
                relay.drain()
            log(f"writing {n:,} mark-set-done events through Catalog.mark_set_done ...")
            started = time.perf_counter()
            ids = [catalog.mark_set_done(table, {"datestamp": f"d{i:07d}"}) for i in range(n)]
            insert_s = time.perf_counter() - started
            first, last = ids[0], ids[-1]
            events = load_events(catalog, first, n)
            backlog, _ = catalog.outbox.backlog()
        finally:
            catalog.close()
        if backlog != n:
            raise RuntimeError(f"outbox has {backlog} pending events, expected {n}")
        body_bytes = sum(len(e.body.encode()) for e in events) / len(events)
        log(f"written in {insert_s:.1f}s ({n / insert_s:,.0f}/s); mean body {body_bytes:.0f} B")

        # Warm the broker's JIT and the topic up before measuring anything.
        warm = events[: min(len(events), 2_000)]
        raw_transactions(env, warm, 500)
        if args.bulk_stomp_decoder:
            require_loaded(env.broker.pid(), BULK_STOMP_CLASS)

        rows: list[Row] = []
        relay_is_pending = True
        for batch in batch_sizes:
            relay_times: list[float] = []
            raw_times: list[float] = []
            java_times: list[float] = []
            floor_times: list[float] = []
            floor = OpenWireFloor(env, events, batch)
            cpu = CpuMeter(env.broker.pid())
            try:
                floor.run()  # warm the JVM (not counted)
                # Round 0 warms every path through the broker alike and is not counted
                # (the rounds before it counted: their figures are printed as before).
                for round_no in range(WARM_ROUNDS + rounds):
                    if not relay_is_pending:
                        reset_outbox(env.settings.database_url, first, last)
                    config = RelayConfig(batch_size=batch, freeze_heap=True)
                    with cpu.measure("relay"):
                        seconds = relay_drain(env, config, n)
                    relay_is_pending = False
                    relay_times.append(seconds)
                    raw = raw_transactions(env, events, batch)
                    raw_times.append(raw)
                    with cpu.measure("floor"):
                        floor_times.append(stomp_floor(env, events, batch))
                    with cpu.measure("java", floor.process.pid):
                        java = floor.run()
                    java_times.append(java)
                    log(
                        f"batch {batch} round {round_no}"
                        f"{' (warm-up, not counted)' if round_no < WARM_ROUNDS else ''}: "
                        f"relay {n / seconds:,.0f}/s, "
                        f"raw {n / raw:,.0f}/s, STOMP floor {n / floor_times[-1]:,.0f}/s, "
                        f"Java OpenWire {n / java:,.0f}/s"
                    )
            finally:
                floor.close()
            # As before (no warm-up round): the first ``rounds`` rounds.
            before = (relay_times[:rounds], java_times[:rounds])
            relay_times, raw_times, floor_times, java_times = (
                times[WARM_ROUNDS:] for times in (relay_times, raw_times, floor_times, java_times)
            )
            rows.extend(
                [
                    Row(
                        f"tx batch {batch}: events/s vs Java OpenWire, best",
                        n / min(relay_times),
                        n / min(java_times),
                        unit="msg/s",
                        target=(">=", FLOOR_TARGET),
                        check="ratio",
                        digits=0,
                    ),
                    Row(
                        f"tx batch {batch}: events/s vs Java OpenWire, median",
                        n / statistics.median(relay_times),
                        n / statistics.median(java_times),
                        unit="msg/s",
                        target=(">=", FLOOR_TARGET),
                        check="ratio",
                        digits=0,
                    ),
                    Row(
                        f"tx batch {batch}: the same, best and median of the first {rounds} "
                        "rounds, counting the warm-up (as before 7a7218e): best",
                        n / min(before[0]),
                        n / min(before[1]),
                        unit="msg/s",
                        digits=0,
                    ),
                    Row(
                        f"tx batch {batch}:   median (as before)",
                        n / statistics.median(before[0]),
                        n / statistics.median(before[1]),
                        unit="msg/s",
                        digits=0,
                    ),
                ]
            )
            per_event = {k: cpu.per_event(k, n, skip=WARM_ROUNDS) for k in cpu.spent}
            for key in ("relay", "floor", "java"):
                per_event[key] = per_event[f"{key} client"] + per_event[f"{key} broker"]
            rows.extend(
                [
                    Row(
                        f"tx batch {batch}: STOMP floor (pre-encoded frames, bare socket) "
                        "vs Java OpenWire, best",
                        n / min(floor_times),
                        n / min(java_times),
                        unit="msg/s",
                        digits=0,
                    ),
                    Row(
                        f"tx batch {batch}: events/s vs the STOMP floor, best",
                        n / min(relay_times),
                        n / min(floor_times),
                        unit="msg/s",
                        digits=0,
                    ),
                    Row(
                        f"tx batch {batch}: CPU per event, relay + broker vs Java + broker",
                        per_event["relay"],
                        per_event["java"],
                        unit="us",
                        digits=1,
                    ),
                    Row(
                        f"tx batch {batch}: CPU per event, STOMP floor + broker vs Java + broker",
                        per_event["floor"],
                        per_event["java"],
                        unit="us",
                        digits=1,
                    ),
                    Row(
                        f"tx batch {batch}:   of which the client: relay vs Java producer",
                        per_event["relay client"],
                        per_event["java client"],
                        unit="us",
                        digits=1,
                    ),
                    Row(
                        f"tx batch {batch}:   the broker: STOMP (relay's run) vs OpenWire "
                        f"(STOMP floor's run: {per_event['floor broker']:.1f})",
                        per_event["relay broker"],
                        per_event["java broker"],
                        unit="us",
                        digits=1,
                    ),
                    Row(
                        f"tx batch {batch}:   of the broker, its garbage collector: STOMP vs "
                        f"OpenWire (STOMP floor's run: {per_event['floor gc']:.1f})",
                        per_event["relay gc"],
                        per_event["java gc"],
                        unit="us",
                        digits=1,
                    ),
                ]
            )
            target = TARGETS.get(batch)
            rows.append(
                Row(
                    f"tx batch {batch}: events/s vs stomp.py (context), best",
                    n / min(relay_times),
                    n / min(raw_times),
                    unit="msg/s",
                    target=(">=", target) if target is not None else None,
                    check="ratio",
                    digits=0,
                )
            )
            rows.append(
                Row(
                    f"tx batch {batch}: events/s vs stomp.py, median",
                    n / statistics.median(relay_times),
                    n / statistics.median(raw_times),
                    unit="msg/s",
                    digits=0,
                )
            )

        # Where the relay's time goes: one extra, instrumented drain at the largest batch.
        reset_outbox(env.settings.database_url, first, last)
        biggest = max(batch_sizes)
        with phase_timers() as spent:
            total = relay_drain(env, RelayConfig(batch_size=biggest, freeze_heap=True), n)
        mark_calls = int(spent.pop(MARK_CALLS, 0))
        marking = spent.pop(MARK_LABEL, 0.0)
        reads = spent.pop(READS_LABEL, 0.0)
        breakdown = [
            Row(f"  {label}", seconds * 1000, unit="ms", digits=0)
            for label, seconds in sorted(spent.items(), key=lambda item: -item[1])
        ]
        other = total - sum(spent.values())
        breakdown.append(Row("  other (relay bookkeeping)", other * 1000, unit="ms", digits=0))
        breakdown.insert(0, Row(f"instrumented drain, batch {biggest}", total * 1000, unit="ms"))
        breakdown.append(
            Row(f"  {MARK_LABEL}, calls: {mark_calls}", marking * 1000, unit="ms", digits=0)
        )
        breakdown.append(Row(f"  {READS_LABEL}", reads * 1000, unit="ms", digits=0))

        # Context: one receipt per message, on fewer events.
        reset_outbox(env.settings.database_url, first, last)
        each_relay = relay_drain(env, RelayConfig(use_transactions=False, freeze_heap=True), n)
        each_raw = raw_receipt_each(env, events)
        rows.append(
            Row(
                "receipt per message (no tx): events/s",
                n / each_relay,
                n / each_raw,
                unit="msg/s",
                digits=0,
            )
        )

        print_table(
            f"relay drain vs Java OpenWire and raw stomp.py, {n:,} persistent "
            f"~{body_bytes:.0f}-byte messages "
            f"(best of {rounds}, after {WARM_ROUNDS} round not counted){experiment}",
            rows,
            notes=[
                "ours = Relay(settings, config=RelayConfig(batch_size=B, freeze_heap=True))"
                ".drain(), timed until every topic's progress is recorded (incl. joining the"
                " group and connecting)",
                "freeze_heap, as the relay command: at its first join the relay moves the"
                " objects alive (this benchmark's set-up too) out of the cyclic collector's"
                " reach; the raw rounds run in the same process after it",
                "reference = the broker's floor: benchmarks/java/OpenWireProducer.java, same"
                " bodies, HCAT_* headers as properties, persistent, JMS tx of B over OpenWire"
                " (incl. connect; JVM warmed by one unmeasured run)",
                "context = raw stomp.py Connection12, same bodies/headers, STOMP tx of B,"
                " receipt on COMMIT (incl. connect)",
                "STOMP floor = what any STOMP client gets from this broker: the relay's own"
                " SEND frames encoded beforehand (not timed), tx of B on a bare socket, the"
                " next tx written while the COMMIT's receipt is awaited (incl. connect)",
                "CPU per event: the client's process (user + system, /proc) plus the"
                " broker's, over the run, median of the rounds; then each apart, and of the"
                " broker's the part of its garbage collector's threads (GC Thread#N, G1 ...)",
                f"no-tx row: {n:,} events, relay use_transactions=False vs raw SEND with"
                " receipt each (context only, no target)",
                f"setup: Catalog.mark_set_done x {n:,} took {insert_s:.1f}s"
                f" ({n / insert_s:,.0f}/s, not timed above)",
            ],
        )
        print_table(
            f"where the relay's time goes ({n:,} events, batch {biggest}, one extra run)",
            breakdown,
            notes=[
                "publish loop (relay/pipeline.py's steps): read batch -> SEND all -> COMMIT and"
                " wait; these rows and 'other' add up to the drain time",
                "progress is recorded in the relay's progress thread alongside the loop (not in"
                " the sum); drain() waits for it at the end",
                "after a full batch the next page is read while the COMMIT's receipt is awaited"
                " (inside the COMMIT row); the last row counts every read (not in the sum)",
            ],
        )
        footer()


if __name__ == "__main__":
    run_main(main)
