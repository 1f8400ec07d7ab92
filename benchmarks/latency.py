"""End-to-end latency: ``send_mark_set_done`` returning -> the consumer's handler.

One process, as the brief asks: a ``Relay.run()`` in a background thread, a started (that
is, subscribed) ``NotificationConsumer`` running its handler in another thread, and a
producer in the main thread calling ``send_mark_set_done(table, {"datestamp": str(i)},
settings=...)`` at a fixed rate (default 200/s for 30 s, paced on a monotonic schedule).
Latency = the handler's ``time.monotonic()`` minus the one taken right after the call
returned, matched by event id. Every sent event must arrive.

Reference (physical floor), same run, same broker: raw stomp.py, a publisher SENDing with
a receipt (waited for) and a subscriber receiving, at the same rate and body size;
latency = arrival minus the time just before the SEND.

Target: p99 < 100 ms.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from _support import (
    PUBLISHER,
    READER,
    BenchEnv,
    RawListener,
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

TARGET_P99_MS = 100.0
DRAIN_TIMEOUT = 60.0


@dataclass
class Result:
    label: str
    sent: int
    received: int
    elapsed: float  # seconds the producer took
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
        latencies,
        calls,
        to_receipt_ms=[(receipted[e] - sent[e]) * 1000 for e in both],
        receipt_to_handler_ms=[(arrivals[e] - receipted[e]) * 1000 for e in both],
    )


def record_receipts(relay: Relay) -> dict[int, float]:
    """Note when the relay has each event's COMMIT receipt (it then calls ``_record``)."""
    receipted: dict[int, float] = {}
    original = relay._record

    def record(sent: Sequence[OutboxEvent], unsent: dict[str, int]) -> None:
        now = time.monotonic()
        for event in sent:
            receipted[event.event_id] = now
        original(list(sent), unsent)

    relay._record = record  # type: ignore[method-assign]
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
                content_type="application/json",
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
    return Result("raw STOMP floor", count, len(latencies), elapsed, latencies, calls)


def rows_for(result: Result, floor: Result) -> list[Row]:
    ours = percentiles(result.latencies_ms)
    ref = percentiles(floor.latencies_ms)
    rows = []
    for key in ("p50", "p90", "p99", "max"):
        rows.append(
            Row(
                f"{result.label}: latency {key}",
                ours[key],
                ref[key],
                unit="ms",
                target=("<", TARGET_P99_MS) if key == "p99" else None,
            )
        )
    rows.append(
        Row(
            f"{result.label}: received / sent",
            f"{result.received:,} / {result.sent:,}",
            f"{floor.received:,} / {floor.sent:,}",
            target=None,
        )
    )
    return rows


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=200.0, help="events per second (200)")
    p.add_argument("--seconds", type=float, default=None, help="seconds per run (30)")
    args = p.parse_args()
    seconds = args.seconds or (5.0 if args.quick else 30.0)
    rate = args.rate
    count = int(rate * seconds)

    with bench_env(args, "latency") as env:
        header("end-to-end latency: send_mark_set_done -> consumer handler", args, env)
        catalog = env.catalog()
        relay: Relay | None = None
        relay_thread: threading.Thread | None = None
        try:
            per_call_table = unique_table("lat_call")
            create_table(catalog, per_call_table)
            # A body of the same size as the real ones, for the raw floor.
            probe_id = catalog.mark_set_done(per_call_table, {"datestamp": "probe"})
            body = catalog.events(after_event_id=probe_id - 1, limit=1)[0].body

            floor = raw_floor(env, rate, count, body)

            relay = Relay(env.settings, config=RelayConfig())
            receipted = record_receipts(relay)
            relay_thread = threading.Thread(target=relay.run, name="relay", daemon=True)
            relay_thread.start()
            # Let the relay publish the probe event before the measured runs.
            deadline = time.monotonic() + 30
            while catalog.outbox_backlog()[0] and time.monotonic() < deadline:
                time.sleep(0.05)

            settings = env.settings
            per_call = pipeline(
                env,
                "send_mark_set_done",
                per_call_table,
                lambda i: send_mark_set_done(
                    per_call_table, {"datestamp": str(i)}, settings=settings
                ),
                rate,
                count,
                receipted,
            )
        finally:
            if relay is not None:
                relay.stop()
                if relay_thread is not None:
                    relay_thread.join(15)
                relay.close()
            catalog.close()

        rows = rows_for(per_call, floor)
        for leg, values in (
            ("call returned -> relay has COMMIT receipt", per_call.to_receipt_ms),
            ("relay has receipt -> handler", per_call.receipt_to_handler_ms),
        ):
            leg_p = percentiles(values)
            rows.append(
                Row(
                    f"  of which {leg}: p50 / p99",
                    f"{leg_p['p50']:.1f} / {leg_p['p99']:.1f}",
                    unit="ms",
                )
            )
        for result in (per_call, floor):
            call = percentiles(result.call_ms)
            rows.append(
                Row(
                    f"{result.label}: producer call p50 / p99",
                    f"{call['p50']:.1f} / {call['p99']:.1f}",
                    unit="ms",
                )
            )
            rows.append(
                Row(
                    f"{result.label}: achieved rate (asked {rate:g}/s)",
                    result.rate,
                    unit="ev/s",
                    digits=0,
                )
            )
        print_table(
            f"latency at {rate:g} events/s for {seconds:g}s ({count:,} events per run)",
            rows,
            notes=[
                "ours: monotonic() after send_mark_set_done returns -> monotonic() in the"
                " NotificationConsumer handler (relay and consumer are threads of this process)",
                "reference: raw stomp.py SEND with receipt -> subscriber on_message, same rate,"
                " same body size (the physical floor)",
                "producer call = how long the producer's call took (send_mark_set_done, or the"
                " raw SEND incl. its receipt wait)",
                "'of which': the relay's COMMIT receipt time (noted when Relay._record is called)"
                " splits each latency into the outbox->broker and broker->handler legs",
            ],
        )
        footer()


if __name__ == "__main__":
    run_main(main)
