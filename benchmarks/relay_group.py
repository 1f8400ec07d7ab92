"""The relay group: takeover after kill -9, handoff after SIGTERM, scaling with members,
time to a settled assignment, buckets moved when a member joins (issue 9).

Every relay is a real ``hcat-notify relay`` process on the benchmark's private broker and
catalog; a wildcard subscriber on ``hcat.<db>.>`` sees every message on the wire.

(a) scaling: N events already in the outbox over 1,000 topics; 1, 2 and 4 relays
    (alternating, best and median of the rounds) publish them; events/s from the first
    to the last recorded topic progress (receipt-confirmed), with no subscriber attached.
    Reference: the same with one relay. Context, not a target: the same measured on a
    wildcard subscriber's first deliveries; one Python consumer takes in ~15,000 msg/s
    here, the broker slows the relays down to it, and every added relay process takes
    CPU from it on a small machine.
(b) takeover: 3 relays, writers adding events to random topics; kill -9 of the member
    owning the most buckets; time to the first new event of its buckets on the wire.
    Target p99 <= session timeout + 1 s. The killed member is restarted each time.
(c) handoff: the same with SIGTERM. Target p99 <= 0.5 s.
(d) 10,000 topics, 4 relays started at once: time until every bucket is owned by a
    running member (target <= 2 x session timeout); then a 5th joins: buckets moved
    (target <= ceil(B/5) + 5 % of B).
(b)-(d) start from a group with no backlog (the earlier parts' events count as
published); (a) starts from nothing published.
"""

from __future__ import annotations

import math
import random
import signal
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

from _group_wait import owners, wait_balanced
from _support import (
    BenchEnv,
    Relays,
    Row,
    bench_env,
    bulk_dones,
    footer,
    header,
    log,
    parser,
    percentile,
    print_table,
    run_main,
)
from sqlalchemy import Table, create_engine, insert, text

from hcat_notify.broker import consumer_connection
from hcat_notify.model.topics import topic_bucket
from hcat_notify.store import Catalog
from hcat_notify.store.models import TableRow
from hcat_notify.warehouse import key_text

SESSION = 3.0  # the default session timeout
MIN_MOVE = 5.0  # seconds a bucket stays put after a move, shorter than the default 30


class Wire:
    """A wildcard subscriber: first arrival time of every event id, with its topic."""

    def __init__(self, env: BenchEnv, db: str) -> None:
        self.connection = consumer_connection(env.settings)
        self.connection.connect()
        self.connection.subscribe(f"/topic/hcat.{db}.>", "wire")
        self.first: dict[int, tuple[float, str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self.connection.receive(timeout=0.1)
            if message is None:
                continue
            event_id = int(message.headers["HCAT_EVENT_ID"])
            if event_id not in self.first:
                self.first[event_id] = (time.monotonic(), message.destination[7:])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.connection.close()


def wait_settled(catalog: Catalog, relays: Relays, timeout: float = 60.0) -> float:
    """Seconds until every running process joined and every bucket has a running owner."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        running = relays.running()
        joined = {m.member_id for m in catalog.group.members()}
        if running <= joined and set(owners(catalog).values()) <= running:
            return time.monotonic() - started
        time.sleep(0.02)
    raise RuntimeError(f"not settled after {timeout:g}s: {Counter(owners(catalog).values())}")


def make_tables(env: BenchEnv, db: str, count: int) -> list[str]:
    """``count`` tables in one transaction (setup; ``create_table`` one by one is slow)."""
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    names = [f"{db}.t{n:05d}" for n in range(count)]
    engine = create_engine(env.settings.database_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                insert(cast(Table, TableRow.__table__)),
                [
                    {
                        "db_name": db,
                        "table_name": name.split(".")[1],
                        "location": f"/bench/{name}",
                        "location_key": key_text(f"/bench/{name}"),
                        "storage_format": "parquet",
                        "partition_keys": ["ds"],
                        "table_type": "MANAGED_TABLE",
                        "properties": {},
                        "retention_seconds": 7 * 86400,
                        "topic": f"hcat.{name}",
                        "created_at": now,
                        "updated_at": now,
                        "version": 1,
                    }
                    for name in names
                ],
            )
    finally:
        engine.dispose()
    return names


def reset_group(env: BenchEnv, *, replay: bool) -> None:
    """Nobody owns anything (between rounds, not timed). ``replay``: nothing is published
    either, so the relays send the whole outbox again ((a) measures that); otherwise
    everything is, and the group starts with no backlog ((b)-(d) measure failover and
    assignment, which a replay of the earlier parts' events would only slow down)."""
    through = "0" if replay else "(SELECT COALESCE(MAX(event_id), 0) FROM hcat_outbox)"
    engine = create_engine(env.settings.database_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM hcat_topic_progress"))
            conn.execute(text("DELETE FROM hcat_relay_members"))
            conn.execute(
                text(f"UPDATE hcat_relay_buckets SET owner = NULL, published_through = {through}")
            )
            conn.execute(
                text("UPDATE hcat_relay_group SET controller_id = NULL, controller_expires = 0")
            )
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- (a) scaling


def published_span(env: BenchEnv, expected: dict[str, int], timeout: float = 300.0) -> float:
    """Seconds from the first recorded topic progress to the moment every topic's
    progress reaches ``expected`` (topic -> last event id): progress moves only after
    the broker's RECEIPT, so this is the receipt-confirmed publishing time."""
    want_sum, want_count = sum(expected.values()), len(expected)
    engine = create_engine(env.settings.database_url)
    query = text("SELECT COALESCE(SUM(last_event_id), 0), COUNT(*) FROM hcat_topic_progress")
    first: float | None = None
    deadline = time.monotonic() + timeout
    try:
        with engine.connect() as conn:
            while time.monotonic() < deadline:
                total, count = conn.execute(query).one()
                conn.rollback()  # a fresh snapshot for the next poll
                now = time.monotonic()
                if count and first is None:
                    first = now
                if count == want_count and total == want_sum:
                    assert first is not None
                    return max(1e-6, now - first)
                time.sleep(0.01)
    finally:
        engine.dispose()
    raise RuntimeError(f"the relays had not published every event after {timeout:g}s")


def scaling_round(
    env: BenchEnv, members: int, ids: list[int], expected: dict[str, int], *, wire: bool
) -> float:
    """Events/s of ``members`` relays publishing every event: receipt-confirmed (no
    subscriber), or first-to-last first delivery on a wildcard subscriber."""
    reset_group(env, replay=True)
    subscriber = Wire(env, "scale") if wire else None
    relays = Relays(env, "--min-move-interval", str(MIN_MOVE))
    try:
        for _ in range(members):
            relays.start("--batch-size", "500")
        if subscriber is None:
            return len(ids) / published_span(env, expected)
        deadline = time.monotonic() + 300
        while len(subscriber.first) < len(ids) and time.monotonic() < deadline:
            time.sleep(0.05)
        times = sorted(t for t, _ in subscriber.first.values())
        if len(times) < len(ids):
            raise RuntimeError(f"only {len(times)} of {len(ids)} events arrived")
        return len(ids) / max(1e-6, times[-1] - times[0])
    finally:
        relays.stop_all()
        if subscriber is not None:
            subscriber.close()


def part_scaling(env: BenchEnv, catalog: Catalog, events: int, rounds: int) -> list[Row]:
    names = make_tables(env, "scale", 1_000)
    log(f"(a) writing {events:,} events over 1,000 topics (setup) ...")
    per_table = max(1, events // len(names))
    ids: list[int] = []
    expected: dict[str, int] = {}
    for index, name in enumerate(names):
        info = catalog.get_table(name)
        specs = ({"ds": f"{index}-{n}"} for n in range(per_table))
        written = bulk_dones(env.settings.database_url, info, specs, published=False)
        ids += written
        expected[info.topic] = max(written)
    modes = {"published": False, "on the wire": True}
    rates: dict[tuple[str, int], list[float]] = {
        (mode, members): [] for mode in modes for members in (1, 2, 4)
    }
    for round_no in range(rounds):
        for mode, wire in modes.items():
            for members in (1, 2, 4):
                rate = scaling_round(env, members, ids, expected, wire=wire)
                rates[mode, members].append(rate)
                log(f"(a) round {round_no + 1}: {members} relay(s), {mode}: {rate:,.0f} events/s")
    rows = []
    for mode in modes:
        one = rates[mode, 1]
        for members in (1, 2, 4):
            ours = rates[mode, members]
            rows.append(
                Row(
                    f"(a) {members} relay(s), {mode}: events/s, best",
                    max(ours),
                    max(one),
                    unit="ev/s",
                    target=(">=", 0.95) if members > 1 and mode == "published" else None,
                    check="ratio",
                    digits=0,
                )
            )
            rows.append(
                Row(
                    f"(a) {members} relay(s), {mode}: events/s, median",
                    statistics.median(ours),
                    statistics.median(one),
                    unit="ev/s",
                    digits=0,
                )
            )
    return rows


# --------------------------------------------------------------------------- (b, c) failover


class Writers:
    """Adds dones to random tables at about ``rate`` per second until stopped."""

    def __init__(self, catalog: Catalog, names: list[str], rate: float) -> None:
        self._catalog = catalog
        self._names = names
        self._gap = 1.0 / rate
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        rng = random.Random(1)
        n = 0
        while not self._stop.wait(self._gap):
            self._catalog.mark_set_done(rng.choice(self._names), {"ds": f"w{n}"})
            n += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


@contextmanager
def running_group(
    env: BenchEnv, catalog: Catalog, db: str, names: list[str]
) -> Iterator[tuple[Relays, Wire]]:
    reset_group(env, replay=False)
    wire = Wire(env, db)
    relays = Relays(env, "--min-move-interval", str(MIN_MOVE))
    writers = Writers(catalog, names, rate=60)
    try:
        for _ in range(3):
            relays.start("--batch-size", "100")
        wait_settled(catalog, relays)
        yield relays, wire
    finally:
        writers.stop()
        relays.stop_all()
        wire.close()


def measure_failovers(
    env: BenchEnv, catalog: Catalog, how: signal.Signals, count: int, names: list[str]
) -> list[float]:
    """Seconds from the signal to the first new event of the victim's buckets on the wire."""
    buckets = catalog.group.info().bucket_count
    times: list[float] = []
    db = names[0].split(".")[0]
    with running_group(env, catalog, db, names) as (relays, wire):
        time.sleep(2)
        for round_no in range(count):
            wait_settled(catalog, relays)
            counts = Counter(owner for owner in owners(catalog).values() if owner)
            victim = counts.most_common(1)[0][0]
            theirs = {b for b, owner in owners(catalog).items() if owner == victim}
            seen = set(wire.first)
            signalled = time.monotonic()
            relays.processes[victim].send_signal(how)
            deadline = signalled + 30
            first_new: float | None = None
            while first_new is None and time.monotonic() < deadline:
                for event_id, (at, topic) in list(wire.first.items()):
                    if (
                        event_id not in seen
                        and at >= signalled
                        and topic_bucket(topic, buckets) in theirs
                    ):
                        first_new = at if first_new is None else min(first_new, at)
                if first_new is None:
                    time.sleep(0.01)
            if first_new is None:
                raise RuntimeError(f"no event of {victim}'s buckets within 30 s")
            times.append(first_new - signalled)
            log(f"{how.name} round {round_no + 1}: {times[-1] * 1000:.0f} ms")
            relays.processes[victim].wait(30)
            relays.start("--batch-size", "100")
    return times


# --------------------------------------------------------------------------- (d) settle


def part_settle(env: BenchEnv, catalog: Catalog) -> list[Row]:
    make_tables(env, "many", 10_000)
    reset_group(env, replay=False)
    relays = Relays(env, "--min-move-interval", str(MIN_MOVE))
    try:
        for _ in range(4):
            relays.start()
        settled = wait_balanced(catalog, relays.running, joined=True, stable_for=1.0)
        log(f"(d) 4 relays settled in {settled:.2f} s")
        if settled > 2 * SESSION:  # say why: the group's own account of it
            for member, lines in relays.logs("hcat_notify.relay.member").items():
                for line in lines[:30]:
                    log(f"(d) {member}: {line[:240]}")
        time.sleep(MIN_MOVE + 1)  # the buckets may move again
        before = owners(catalog)
        relays.start()
        joined = wait_balanced(catalog, relays.running, joined=True, stable_for=2.0)
        log(f"(d) the 5th settled in {joined:.2f} s")
        after = owners(catalog)
    finally:
        relays.stop_all()
    moved = sum(1 for b in before if before[b] != after[b])
    buckets = len(before)
    bound = math.ceil(buckets / 5) + 0.05 * buckets
    counts = Counter(after.values())
    return [
        Row(
            "(d) 4 relays, 10,000 topics: time to a settled assignment",
            settled,
            2 * SESSION,
            unit="s",
            target=("<", 2 * SESSION + 1e-9),
            digits=2,
        ),
        Row(
            f"(d) a 5th joins: buckets moved (of {buckets})",
            moved,
            bound,
            unit="buckets",
            target=("<", bound + 1e-9),
            digits=0,
        ),
        Row(
            "(d) buckets per member after it joined",
            " ".join(str(n) for n in sorted(counts.values())),
            unit="buckets",
        ),
    ]


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    events = 2_000 if args.quick else 20_000
    rounds = 1 if args.quick else 3
    kills = 3 if args.quick else 20
    with bench_env(args, "relay-group") as env:
        header("the relay group", args, env)
        catalog = env.catalog()
        try:
            rows = part_scaling(env, catalog, events, rounds)
            names = make_tables(env, "fail", 300)
            takeover = measure_failovers(env, catalog, signal.SIGKILL, kills, names)
            handoff = measure_failovers(env, catalog, signal.SIGTERM, kills, names)
            for label, values, target in (
                ("(b) takeover after kill -9", takeover, SESSION + 1),
                ("(c) handoff after SIGTERM", handoff, 0.5),
            ):
                rows.append(
                    Row(
                        f"{label}: p99 of {len(values)}",
                        percentile(values, 99),
                        target,
                        unit="s",
                        target=("<", target + 1e-9),
                        digits=3,
                    )
                )
                rows.append(Row(f"{label}: p50", percentile(values, 50), unit="s", digits=3))
            rows += part_settle(env, catalog)
        finally:
            catalog.close()
        print_table(
            "relay group (reference: (a) one relay; (b, c, d) the target)",
            rows,
            notes=[
                f"relays are hcat-notify relay processes; session timeout {SESSION:g} s, "
                f"min move interval {MIN_MOVE:g} s",
                "(a) published: events/s from the first to the last recorded topic progress"
                " (it moves on the broker's RECEIPT), no subscriber attached",
                "(a) on the wire (context): first to last first delivery on one wildcard"
                " subscriber, which caps the rate at what one Python consumer takes in",
                "(b, c) signal -> first event of the victim's buckets not on the wire before",
            ],
        )
        footer()


if __name__ == "__main__":
    run_main(main)
