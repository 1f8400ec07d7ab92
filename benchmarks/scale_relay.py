"""How the relay grows: events/s and RSS against topics, and the group's controller.

**(a) One relay against T topics** (default 1,000, 10,000, 100,000; ``--quick`` 1,000
and 4,000): the catalog grows to T tables, each with its topic's progress row; at each
T, ``hcat-notify relay --once`` (a real process, the private broker) first with nothing
pending (its start: connect, claim, read), then with E events pending (default 20,000;
``--quick`` 2,000: MARK_SET_DONEs as the store writes them, round robin over the first
1,000 topics, the active ones). Measured: events/s = E / (the second run's wall time -
the first's), flat when the largest T's is at least 1 / 1.5 of the smallest's; and the
relay's peak RSS in that run (sampled every 20 ms), flat when at most 1.5 x the
smallest T's: it grows with the active topics only. Checked: every event published
(printed).

**(b) The controller.** The catalog holds T tables and topics (default 100,000;
``--quick`` 1,000), each with its topic's progress row, bulk-loaded as the store writes
them. Relay members join the group in steps (1, 2, 4, 8, 16) and leave again (8, 4, 2,
1: the leavers of a step together, as relays sent SIGTERM at once); the members are
``Membership`` objects of this process (the relay's own group code: heartbeats, the
controller's rounds, its plan, each member on its own ``Catalog``), not relay
processes: sixteen processes would measure this 2-core machine's scheduler. At each
step: the seconds until the assignment is settled (every bucket owned by a joined
member, counts within one of each other, unchanged for 1 s; target: at most 2 session
timeouts) and the buckets that changed owner beyond the fewest that must (a member
that stays keeps at most its fair share; target: at most 5 % of the buckets). The
members run with ``min_move_interval`` 2 s (default 30 s: a step follows the previous
one's cooldown, not timed).
"""

from __future__ import annotations

import functools
import json
import math
import os
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from _group_wait import owners, wait_balanced
from _scale_dbs import catalog_urls
from _scale_load import Loader
from _scale_main import backends_of, command_with_peak, growth_parser, growth_run, sizes_of
from _scale_report import Series, at_most, flat, report
from _support import (
    HOST,
    Broker,
    free_port,
    free_ports,
    load_text,
    log,
    make_settings,
    run_main,
)
from sqlalchemy import text

from hcat_notify.config import Settings
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.topics import DEFAULT_BUCKETS, topic_bucket
from hcat_notify.model.wire import build_mark_set_done
from hcat_notify.relay.config import RelayConfig
from hcat_notify.relay.member import Membership
from hcat_notify.store import Catalog
from hcat_notify.store.event_rows import OUTBOX_COLUMNS
from hcat_notify.store.group import MemberReport
from hcat_notify.warehouse import key_text

STEPS = (1, 2, 4, 8, 16, 8, 4, 2, 1)
QUICK_STEPS = (1, 2, 4, 2)
TOPICS = 100_000
QUICK_TOPICS = 1_000
MIN_MOVE = 2.0
CONFIG = RelayConfig(min_move_interval=MIN_MOVE)
XLABEL = "step: members 1, 2, 4, 8, 16 joining, then 8, 4, 2, 1 (steps 6-9) leaving"
TOPIC_SIZES = (1_000, 10_000, 100_000)
QUICK_TOPIC_SIZES = (1_000, 4_000)
ACTIVE = 1_000
EVENTS = 20_000
QUICK_EVENTS = 2_000


def make_topics(settings: Settings, count: int, first: int = 0) -> None:
    """Tables ``first`` to ``count``, each with its topic's progress row (one
    transaction)."""
    if first == 0:
        with Catalog.open(settings) as catalog:
            catalog.create_table("relay.proto", location="/data/relay/proto", partition_keys=["ds"])
    loader = Loader(settings.database_url)
    now = datetime.now(UTC)
    try:
        with loader.engine.begin() as conn:
            proto = dict(
                conn.exec_driver_sql("SELECT * FROM hcat_tables WHERE table_name = 'proto'")
                .one()
                ._mapping
            )
            proto.pop("id")
            columns = list(proto)
            rows, progress = [], []
            for n in range(first, count):
                topic = f"hcat.relay.t{n:06d}"
                values = {**proto, "table_name": f"t{n:06d}", "topic": topic}
                values["location"] = f"/data/relay/t{n:06d}"
                values["location_key"] = key_text(values["location"])
                rows.append(
                    [
                        json.dumps(v) if isinstance(v, dict | list) else v
                        for v in (values[c] for c in columns)
                    ]
                )
                progress.append((topic, now.timestamp()))
            loader.put(conn, "hcat_tables", columns, rows)
            loader.put_progress(conn, progress)
    finally:
        loader.close()


def pending_events(settings: Settings, count: int) -> None:
    """``count`` unpublished MARK_SET_DONEs, round robin over the first ACTIVE topics."""
    loader = Loader(settings.database_url)
    now = datetime.now(UTC)
    try:
        with loader.engine.begin() as conn:
            ids = loader.ids(conn, count)
            rows = []
            for i, event_id in enumerate(ids):
                n = i % ACTIVE
                table, topic = TableName.parse(f"relay.t{n:06d}"), f"hcat.relay.t{n:06d}"
                message = build_mark_set_done(
                    event_id=event_id,
                    table=table,
                    topic=topic,
                    spec=PartitionSpec.from_mapping({"ds": f"{event_id}"}),
                    timestamp=int(now.timestamp()),
                )
                rows.append(
                    (
                        event_id,
                        topic,
                        topic_bucket(topic, DEFAULT_BUCKETS),
                        "MARK_SET_DONE",
                        str(table),
                        json.dumps(dict(message.headers)),
                        message.body,
                        loader.time(now),
                        0,
                    )
                )
            loader.put(conn, "hcat_outbox", OUTBOX_COLUMNS, rows)
    finally:
        loader.close()


def relay_once(settings: Settings) -> tuple[float, int]:
    """``hcat-notify relay --once`` as a process: wall seconds, peak RSS (sampled)."""
    seconds, peak, _ = command_with_peak(["relay", "--once"], settings)
    return seconds, peak


def unpublished(settings: Settings) -> int:
    loader = Loader(settings.database_url)
    try:
        with loader.engine.connect() as conn:
            return int(
                conn.execute(
                    text(
                        "SELECT count(*) FROM hcat_outbox o JOIN hcat_topic_progress p"
                        " ON p.topic = o.topic WHERE o.event_id > p.last_event_id"
                    )
                ).scalar_one()
            )
    finally:
        loader.close()


def run_throughput(
    backend: str,
    workdir: Path,
    sizes: list[int],
    events: int,
    broker_url: str,
    admin_url: str | None,
) -> list[Series]:
    xlabel = f"topics (tables); events over the first {ACTIVE:,}"
    rate = Series("relay events/s", "events/s", xlabel, flat, higher_is_better=True)
    memory = Series("relay peak RSS", "MiB", xlabel, flat)
    with catalog_urls(backend, workdir, ["throughput"], admin_url) as urls:
        settings = make_settings(workdir / f"{backend}-a", broker_url, urls[0])
        have = 0
        for size in sizes:
            make_topics(settings, size, have)
            have = size
            idle, _ = relay_once(settings)
            pending_events(settings, events)
            seconds, peak = relay_once(settings)
            left = unpublished(settings)
            if left:
                raise RuntimeError(f"{left} events still unpublished after relay --once")
            print(f"# {backend} T = {size:,}: every event published", flush=True)
            rate.add(size, events / max(seconds - idle, 1e-3))
            memory.add(size, peak / 2**20)
            log(
                f"{backend} T = {size:,}: {events / max(seconds - idle, 1e-3):,.0f} events/s "
                f"({seconds:.2f} s, start {idle:.2f} s), peak RSS {peak / 2**20:.0f} MiB; "
                f"{load_text()}"
            )
    return [rate, memory]


def fewest_moves(before: dict[int, str | None], members: set[str]) -> int:
    """Buckets that must change owner: each member that stays keeps at most its fair
    share of what it had; the rest move."""
    share = math.ceil(len(before) / len(members))
    kept = Counter(o for o in before.values() if o in members)
    return len(before) - sum(min(n, share) for n in kept.values())


class Member:
    """One in-process relay member: a Membership on a Catalog of its own."""

    def __init__(self, settings: Settings, member_id: str) -> None:
        self.catalog = Catalog.open(settings)
        self.member_id = member_id
        self.membership = Membership(
            self.catalog,
            CONFIG,
            member_id,
            lambda: MemberReport(member_id, "bench", os.getpid()),
        )
        self.membership.join()

    def leave(self) -> None:
        try:
            self.membership.leave()
        finally:
            self.catalog.close()


def run_backend(
    backend: str, workdir: Path, steps: list[int], topics: int, admin_url: str | None
) -> list[Series]:
    settle = Series(
        "time to a settled plan", "s", XLABEL, at_most(2 * CONFIG.session_timeout), log_x=False
    )
    excess = Series(
        "buckets moved beyond the fewest", "buckets", XLABEL, at_most(0.05 * 256), log_x=False
    )
    with catalog_urls(backend, workdir, ["relay"], admin_url) as urls:
        settings = make_settings(workdir / backend, f"stomp://{HOST}:{free_port()}", urls[0])
        started = time.perf_counter()
        make_topics(settings, topics)
        log(f"{backend}: {topics:,} topics in {time.perf_counter() - started:.1f} s")
        members: list[Member] = []
        count = 0
        with Catalog.open(settings) as catalog:
            try:
                for step, n in enumerate(steps):
                    before = owners(catalog)
                    while len(members) < n:
                        count += 1
                        members.append(Member(settings, f"m{count:02d}"))
                    # the leavers leave together (SIGTERM to several relays at once)
                    leaving = [members.pop() for _ in range(len(members) - n)]
                    threads = [threading.Thread(target=m.leave) for m in leaving]
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join(60)
                    ids = {m.member_id for m in members}
                    seconds = wait_balanced(catalog, functools.partial(set, ids), stable_for=1.0)
                    after = owners(catalog)
                    moved = sum(1 for b in after if before.get(b) != after[b])
                    fewest = fewest_moves(before, ids)
                    # the x axis: the step (members), leaving steps after the joining ones
                    settle.add(step + 1, seconds)
                    excess.add(step + 1, max(0, moved - fewest))
                    counts = sorted(Counter(after.values()).values())
                    print(
                        f"# {backend} {n} member(s): settled, every bucket owned, "
                        f"{counts[0]}-{counts[-1]} each; {moved} moved, fewest {fewest}",
                        flush=True,
                    )
                    log(
                        f"{backend}: {n} member(s) settled in {seconds:.2f} s, {moved} "
                        f"buckets moved (fewest {fewest}); {load_text()}"
                    )
                    if step + 1 < len(steps):
                        time.sleep(MIN_MOVE + 0.5)  # the cooldown of the moves just made
            finally:
                for m in members:
                    m.leave()
    settle.notes.append(
        f"{backend}: steps (members) {', '.join(map(str, steps))}; x = the step's number"
    )
    return [settle, excess]


def main() -> None:
    p = growth_parser(__doc__, None)
    p.add_argument("--topics", type=int, help=f"(b): tables and topics (default {TOPICS:,})")
    p.add_argument("--topic-sizes", help="(a): comma-separated T, e.g. 1000,10000,100000")
    p.add_argument("--events", type=int, help=f"(a): events per run (default {EVENTS:,})")
    p.add_argument("--steps", help="members at each step, e.g. 1,2,4,8,16,8,4,2,1")
    p.add_argument(
        "--broker-url",
        help="(a): a running broker (STOMP URL, the default publisher's credentials) instead "
        "of starting a private one",
    )
    p.add_argument("--parts", default="a,b", help="a (relay against topics), b (controller)")
    args = p.parse_args()
    steps = sizes_of(args.steps, args.quick, STEPS, QUICK_STEPS)
    topics = args.topics or (QUICK_TOPICS if args.quick else TOPICS)
    topic_sizes = sizes_of(args.topic_sizes, args.quick, TOPIC_SIZES, QUICK_TOPIC_SIZES)
    events = args.events or (QUICK_EVENTS if args.quick else EVENTS)
    parts = {part.strip() for part in args.parts.split(",")}
    title = f"the relay group's controller: {topics:,} topics"
    with growth_run(args, title, "relay") as (workdir, panels):
        stomp_port, openwire_port = free_ports(2)
        no_broker = args.broker_url or "a" not in parts
        broker = (
            None
            if no_broker
            else Broker(workdir, stomp_port, openwire_port, java_opts=args.broker_java_opts)
        )
        broker_url = args.broker_url or (broker.url if broker is not None else "")
        try:
            if broker is not None:
                broker.start()
            for backend in backends_of(args):
                if "a" in parts:
                    series = run_throughput(
                        backend, workdir, topic_sizes, events, broker_url, args.postgresql_admin_url
                    )
                    title = f"{backend}: one relay against topics, {events:,} events"
                    report(title, series, [load_text()])
                    panels[f"relay against topics, {backend}"] = series
                if "b" in parts:
                    series = run_backend(backend, workdir, steps, topics, args.postgresql_admin_url)
                    title = f"{backend}: the controller, {topics:,} topics, members {steps}"
                    report(title, series, [load_text()])
                    panels[f"relay controller, {backend}"] = series
        finally:
            if broker is not None:
                broker.stop()


if __name__ == "__main__":
    run_main(main)
