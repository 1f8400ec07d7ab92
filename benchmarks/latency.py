"""End-to-end latency: ``send_mark_set_done`` returning -> the consumer's handler.

The relay is an ``hcat-notify relay`` process, as deployed (``--relay thread`` runs
``Relay.run()`` in a thread of this process instead). In this process: a started (that
is, subscribed) ``NotificationConsumer`` running its handler in a thread, and a producer
in the main thread calling ``send_mark_set_done(table, {"datestamp": str(i)},
settings=...)`` at a fixed rate (default 200/s, 20 s per round, on a monotonic schedule).
Latency = the handler's ``time.monotonic()`` minus the one taken right after the call
returned, matched by event id. Every sent event must arrive.

Reference (physical floor), same run, same broker: raw stomp.py, a publisher SENDing with
a receipt (waited for) and a subscriber receiving, at the same rate and body size;
latency = arrival minus the time just before the SEND.

Targets (issue 9): p99 < 25 ms, SQLite and PostgreSQL, and the producer holds 200/s.
At least 3 rounds, alternating floor and ours; best and median of each percentile.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from _support import (
    PUBLISHER,
    READER,
    BenchEnv,
    RawListener,
    Relays,
    Row,
    bench_env,
    create_table,
    footer,
    header,
    log,
    parser,
    percentiles,
    print_table,
    raw_close,
    raw_connect,
    raw_wait,
    run_main,
    unique_table,
)

from hcat_notify.consumer import Notification, NotificationConsumer
from hcat_notify.relay import Relay, RelayConfig
from hcat_notify.store import OutboxEvent
from hcat_notify.writer import send_mark_set_done

TARGET_P99_MS = 25.0
HOLDS = 0.98  # the producer "holds" the rate when it reaches this share of it
DRAIN_TIMEOUT = 60.0


@dataclass
class Result:
    label: str
    sent: int
    received: int
    elapsed: float  # seconds the producer took
    asked: float  # the rate asked for
    latencies_ms: list[float]
    call_ms: list[float] = field(default_factory=list)
    # The two legs of latencies_ms: call returned -> relay has the COMMIT receipt, and
    # receipt -> handler (measured for the hcat-notify pipeline only).
    to_receipt_ms: list[float] = field(default_factory=list)
    receipt_to_handler_ms: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.sent / self.elapsed if self.elapsed else 0.0


def paced(count: int, rate: float, send: Callable[[int], object]) -> tuple[float, list[float]]:
    """Call ``send(i)`` for i < count on a monotonic schedule; return (elapsed, call ms)."""
    calls: list[float] = []
    started = time.monotonic()
    for i in range(count):
        delay = started + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        before = time.monotonic()
        send(i)
        calls.append((time.monotonic() - before) * 1000)
    return time.monotonic() - started, calls


def pipeline(
    env: BenchEnv,
    label: str,
    table: str,
    produce: Callable[[int], int],
    rate: float,
    count: int,
    receipted: dict[int, float],
) -> Result:
    """Consumer subscribed first, then the paced producer; the relay is already running."""
    arrivals: dict[int, float] = {}
    everything = threading.Event()
    sent: dict[int, float] = {}

    def handler(notification: Notification) -> None:
        arrivals[notification.event_id] = time.monotonic()
        if len(arrivals) >= count:
            everything.set()

    consumer = NotificationConsumer([table], settings=env.settings)
    consumer.start()  # subscribed (receipts awaited) before anything is sent
    thread = threading.Thread(target=consumer.run, args=(handler,), name="consumer", daemon=True)
    thread.start()
    try:

        def send(i: int) -> None:
            event_id = produce(i)
            sent[event_id] = time.monotonic()

        log(f"{label}: {count:,} events at {rate:g}/s ...")
        elapsed, calls = paced(count, rate, send)
        if not everything.wait(DRAIN_TIMEOUT):
            log(f"{label}: only {len(arrivals):,} of {count:,} arrived within {DRAIN_TIMEOUT}s")
    finally:
        consumer.stop()
        thread.join(10)
        consumer.close()
    latencies = [(arrivals[e] - t) * 1000 for e, t in sent.items() if e in arrivals]
    received = sum(1 for e in sent if e in arrivals)
    both = [e for e in sent if e in arrivals and e in receipted]
    return Result(
        label,
        len(sent),
        received,
        elapsed,
        rate,
        latencies,
        calls,
        to_receipt_ms=[(receipted[e] - sent[e]) * 1000 for e in both],
        receipt_to_handler_ms=[(arrivals[e] - receipted[e]) * 1000 for e in both],
    )


def record_receipts(relay: Relay) -> dict[int, float]:
    """Note when the relay has each event's COMMIT receipt (it then records the
    progress)."""
    receipted: dict[int, float] = {}
    pipeline = relay._pipeline
    original = pipeline.record_progress

    def record(
        sent: Sequence[OutboxEvent], unsent: dict[str, int], *, every_bucket: bool = False
    ) -> None:
        now = time.monotonic()
        for event in sent:
            receipted[event.event_id] = now
        original(list(sent), unsent, every_bucket=every_bucket)

    pipeline.record_progress = record  # type: ignore[method-assign]
    return receipted


def raw_floor(env: BenchEnv, rate: float, count: int, body: str) -> Result:
    """Raw stomp.py publish (receipt) -> subscribe round trip at the same rate."""
    destination = f"/topic/hcat.bench.latency_floor_{time.monotonic_ns()}"
    arrivals: dict[int, float] = {}
    everything = threading.Event()

    def on_message(frame: object) -> None:
        seq = int(frame.headers["seq"])  # type: ignore[attr-defined]
        arrivals[seq] = time.monotonic()
        if len(arrivals) >= count:
            everything.set()

    sub_listener = RawListener(on_message)
    pub_listener = RawListener()
    subscriber = raw_connect(env.broker.stomp_port, READER, sub_listener)
    publisher = None
    try:
        ready = sub_listener.expect("sub-ready")
        subscriber.subscribe(destination, id="floor", ack="auto", headers={"receipt": "sub-ready"})
        raw_wait(ready, "SUBSCRIBE", sub_listener, timeout=30)
        publisher = raw_connect(env.broker.stomp_port, PUBLISHER, pub_listener)
        started_at: dict[int, float] = {}

        def send(i: int) -> None:
            receipt = f"floor-{i}"
            done = pub_listener.expect(receipt)
            started_at[i] = time.monotonic()
            publisher.send(
                destination,
                body,
                headers={
                    "seq": str(i),
                    "amq-msg-type": "text",
                    "persistent": "true",
                    "receipt": receipt,
                },
            )
            raw_wait(done, "SEND", pub_listener, timeout=30)

        log(f"raw floor: {count:,} messages at {rate:g}/s ...")
        elapsed, calls = paced(count, rate, send)
        everything.wait(DRAIN_TIMEOUT)
    finally:
        raw_close(subscriber)
        if publisher is not None:
            raw_close(publisher)
    latencies = [(arrivals[i] - t) * 1000 for i, t in started_at.items() if i in arrivals]
    return Result("raw STOMP floor", count, len(latencies), elapsed, rate, latencies, calls)


def summary_rows(label: str, ours: Sequence[Result], floor: Sequence[Result]) -> list[Row]:
    """Per percentile: best and median over the rounds, ours beside the floor."""
    rows = []
    for key in ("p50", "p99"):
        mine = [percentiles(r.latencies_ms)[key] for r in ours]
        ref = [percentiles(r.latencies_ms)[key] for r in floor]
        for how, pick in (("best", min), ("median", statistics.median)):
            rows.append(
                Row(
                    f"{label}: latency {key}, {how} of {len(ours)}",
                    pick(mine),
                    pick(ref),
                    unit="ms",
                    target=("<", TARGET_P99_MS) if key == "p99" and how == "median" else None,
                )
            )
    worst = max(max(r.latencies_ms, default=0.0) for r in ours)
    rows.append(
        Row(
            f"{label}: latency max, all rounds",
            worst,
            max(max(r.latencies_ms, default=0.0) for r in floor),
            unit="ms",
        )
    )
    rows.append(
        Row(
            f"{label}: received / sent, all rounds",
            f"{sum(r.received for r in ours):,} / {sum(r.sent for r in ours):,}",
            f"{sum(r.received for r in floor):,} / {sum(r.sent for r in floor):,}",
        )
    )
    rates = [r.rate for r in ours]
    rows.append(
        Row(
            f"{label}: producer's rate, worst of {len(ours)}",
            min(rates),
            min(r.rate for r in floor),
            unit="ev/s",
            digits=0,
            target=(">=", HOLDS * ours[0].asked),
        )
    )
    for result_set, who in ((ours, label), (floor, "raw STOMP floor")):
        call = percentiles([c for r in result_set for c in r.call_ms])
        rows.append(
            Row(
                f"{who}: producer call p50 / p99",
                f"{call['p50']:.1f} / {call['p99']:.1f}",
                unit="ms",
            )
        )
    return rows


def leg_rows(ours: Sequence[Result]) -> list[Row]:
    rows = []
    for leg, values in (
        ("call returned -> relay has COMMIT receipt", [v for r in ours for v in r.to_receipt_ms]),
        ("relay has receipt -> handler", [v for r in ours for v in r.receipt_to_handler_ms]),
    ):
        if not values:
            continue
        leg_p = percentiles(values)
        rows.append(
            Row(
                f"  of which {leg}: p50 / p99",
                f"{leg_p['p50']:.1f} / {leg_p['p99']:.1f}",
                unit="ms",
            )
        )
    return rows


class RelayUnderTest:
    """The relay: an ``hcat-notify relay`` process (as deployed), or a thread of this
    process (``--relay thread``), which also splits each latency at the COMMIT receipt."""

    def __init__(self, env: BenchEnv, mode: str) -> None:
        self.receipted: dict[int, float] = {}
        self._relay: Relay | None = None
        self._thread: threading.Thread | None = None
        self._processes: Relays | None = None
        if mode == "thread":
            self._relay = Relay(env.settings, config=RelayConfig())
            self.receipted = record_receipts(self._relay)
            self._thread = threading.Thread(target=self._relay.run, name="relay", daemon=True)
            self._thread.start()
        else:
            self._processes = Relays(env)
            self._processes.start()

    def close(self) -> None:
        if self._relay is not None:
            self._relay.stop()
            if self._thread is not None:
                self._thread.join(15)
            self._relay.close()
        if self._processes is not None:
            self._processes.stop_all()


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=200.0, help="events per second (200)")
    p.add_argument("--seconds", type=float, default=None, help="seconds per round (20)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of each (3)")
    p.add_argument(
        "--relay",
        choices=("process", "thread"),
        default="process",
        help="run the relay as an hcat-notify relay process (default) or a thread",
    )
    args = p.parse_args()
    seconds = args.seconds or (2.0 if args.quick else 20.0)
    rate = args.rate
    count = int(rate * seconds)

    with bench_env(args, "latency") as env:
        header("end-to-end latency: send_mark_set_done -> consumer handler", args, env)
        catalog = env.catalog()
        relay: RelayUnderTest | None = None
        ours: list[Result] = []
        floors: list[Result] = []
        try:
            probe_table = unique_table("lat_probe")
            create_table(catalog, probe_table)
            # A body of the same size as the real ones, for the raw floor.
            probe_id = catalog.mark_set_done(probe_table, {"datestamp": "probe"})
            body = catalog.outbox.events(after_event_id=probe_id - 1, limit=1)[0].body

            relay = RelayUnderTest(env, args.relay)
            # Let the relay join and publish the probe event before the measured runs.
            deadline = time.monotonic() + 60
            while catalog.outbox.backlog()[0] and time.monotonic() < deadline:
                time.sleep(0.05)

            settings = env.settings
            for n in range(args.rounds):
                log(f"round {n + 1} of {args.rounds}")
                floors.append(raw_floor(env, rate, count, body))
                table = unique_table("lat_call")
                create_table(catalog, table)

                def produce(i: int, table: str = table) -> int:
                    return send_mark_set_done(table, {"datestamp": str(i)}, settings=settings)

                ours.append(
                    pipeline(
                        env, "send_mark_set_done", table, produce, rate, count, relay.receipted
                    )
                )
        finally:
            if relay is not None:
                relay.close()
            catalog.close()

        rows = summary_rows("send_mark_set_done", ours, floors)
        rows.extend(leg_rows(ours))
        print_table(
            f"latency at {rate:g} events/s, {args.rounds} rounds of {seconds:g}s "
            f"({count:,} events each), relay as a {args.relay}",
            rows,
            notes=[
                "ours: monotonic() after send_mark_set_done returns -> monotonic() in the"
                " NotificationConsumer handler (producer and consumer are threads of this"
                " process; the relay is an hcat-notify relay process unless --relay thread)",
                "reference: raw stomp.py SEND with receipt -> subscriber on_message, same rate,"
                " same body size (the physical floor); rounds alternate floor and ours",
                f"the producer holds the rate when it achieves >= {HOLDS:.0%} of it in every round",
                "producer call = how long the producer's call took (send_mark_set_done, or the"
                " raw SEND incl. its receipt wait)",
                "'of which' (--relay thread only): the relay's COMMIT receipt time splits each"
                " latency into the outbox->broker and broker->handler legs",
            ],
        )
        footer()


if __name__ == "__main__":
    run_main(main)
