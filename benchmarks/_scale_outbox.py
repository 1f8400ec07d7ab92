"""The outbox's row of ``benchmarks/scale_sweep.py``: steady writes for D simulated days,
the outbox swept once a day with a retention of R days, and the outbox's rows after
each day: bounded (at most (R + 1) days of writes) where without the sweep they grow
with D; the daily sweep's time flat (it deletes one day's events, whatever D).

The days are simulated: the catalog's clock is set to each day (the database's clock is
later, so the catalog's judges the age, as the sweep takes the earlier of the two), one
day's events are bulk-loaded as the store writes them (ids from the catalog's counter
or sequence, stamped with the day), the topic is recorded published through them as a
relay does, then ``catalog.outbox.sweep`` runs in this process (the command's batches,
pacing and checks; its start is ``scale_sweep.py``'s own row).

A durable subscriber runs beside it, started after the tables were created (its floor)
and following three other tables, one of which gets a done a day that it handles: it
holds only those tables' topics, so the outbox stays bounded with it (before migration
0022 its floor held every event written after its start).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

from _scale_load import LOAD_CHUNK, Loader
from _scale_report import Series, at_most, flat
from _support import log
from sqlalchemy import text

from hcat_notify.config import Settings
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.topics import topic_bucket
from hcat_notify.model.wire import build_mark_set_done
from hcat_notify.store import Catalog
from hcat_notify.store.event_rows import OUTBOX_COLUMNS
from hcat_notify.store.group import BucketProgress, MemberReport
from hcat_notify.store.subscriptions import FLOOR_KEY, RETAINED_KEY

__all__ = ["DAYS", "QUICK_DAYS", "run_outbox"]

DAYS = (4, 8, 16, 32)
QUICK_DAYS = (4, 8)
PER_DAY = {False: 20_000, True: 500}
RETENTION_DAYS = 2
TABLE = "scale.outbox"
FOLLOWED = ("scale.followed0", "scale.followed1", "scale.followed2")
SUBSCRIBER, OWNER = "bench-subscriber", "bench:1"
START = datetime(2000, 1, 1, tzinfo=UTC)
XLABEL = "days of steady writes"
_MARK = "987654321987"


class _Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


def _load_day(loader: Loader, catalog: Catalog, day: int, count: int) -> int:
    """``count`` events of the table stamped ``day``; the last event id."""
    info = catalog.get_table(TABLE)
    bucket = topic_bucket(info.topic, catalog.group.info().bucket_count)
    created = loader.time(START + timedelta(days=day))
    message = build_mark_set_done(
        event_id=int(_MARK),
        table=info.name,
        topic=info.topic,
        spec=PartitionSpec.from_mapping({"ds": "DSDS"}),
        timestamp=int((START + timedelta(days=day)).timestamp()),
    )
    headers, body = json.dumps(dict(message.headers)), message.body
    last = 0
    for start in range(0, count, LOAD_CHUNK):
        size = min(LOAD_CHUNK, count - start)
        with loader.engine.begin() as conn:
            ids = loader.ids(conn, size)
            rows = [
                (
                    event_id,
                    info.topic,
                    bucket,
                    "MARK_SET_DONE",
                    str(info.name),
                    headers.replace(_MARK, str(event_id)).replace("DSDS", f"{day}-{event_id}"),
                    body.replace(_MARK, str(event_id)).replace("DSDS", f"{day}-{event_id}"),
                    created,
                    0,
                )
                for event_id in ids
            ]
            loader.put(conn, "hcat_outbox", OUTBOX_COLUMNS, rows)
            last = ids[-1]
    return last


def _published(catalog: Catalog, topic: str, through: int) -> None:
    """The topic published through ``through``, as the relay member ``bench`` records it."""
    bucket = topic_bucket(topic, catalog.group.info().bucket_count)
    catalog.group.heartbeat(MemberReport("bench", "host", 1))
    owned = catalog.group.owned("bench")
    if bucket not in owned:
        epoch = catalog.group.claim_controller("bench", ttl=3600)
        plan = {other: "bench" for other in [*owned, bucket]}
        if epoch is None or not catalog.group.assign("bench", epoch, plan, []):
            raise RuntimeError("the benchmark's relay member could not own its bucket")
        owned = catalog.group.owned("bench")
    progress = BucketProgress(owned[bucket].epoch, through, {topic: through})
    if catalog.group.record_progress("bench", {bucket: progress}):
        raise RuntimeError("the benchmark's relay member lost its bucket")


def run_outbox(backend: str, settings: Settings, days: list[int], quick: bool) -> list[Series]:
    """Steady writes for ``max(days)`` days with a daily sweep; the figures at ``days``."""
    per_day = PER_DAY[quick]
    bound = (RETENTION_DAYS + 1) * per_day
    rows = Series(
        f"outbox rows, {per_day:,} events a day, swept daily with a {RETENTION_DAYS}-day "
        "retention, a durable subscriber of 3 other tables beside (ref: the rows written)",
        "rows",
        XLABEL,
        at_most(bound),
    )
    took = Series("the daily outbox sweep's wall time", "s", XLABEL, flat)
    clock = _Clock()
    retention = timedelta(days=RETENTION_DAYS)
    loader = Loader(settings.database_url)
    try:
        with Catalog.open(settings) as opened:
            catalog = Catalog(opened._engine, settings, clock=clock)
            info = catalog.create_table(TABLE, location="/data/scale/outbox", partition_keys=["ds"])
            topics = [
                catalog.create_table(
                    name,
                    location=f"/data/{name}",
                    partition_keys=["ds"],
                    retention=timedelta(hours=1),
                ).topic
                for name in FOLLOWED
            ]
            floor = catalog.last_event_id()
            for topic in [info.prefix_topic or "hcat", info.topic, *topics]:
                _published(catalog, topic, floor)
            catalog.subscriptions.claim(SUBSCRIBER, OWNER, topics=topics)
            catalog.subscriptions.advance(
                SUBSCRIBER, OWNER, {FLOOR_KEY: floor, RETAINED_KEY: floor}
            )
            for day in range(1, max(days) + 1):
                clock.now = START + timedelta(days=day)
                last = _load_day(loader, catalog, day, per_day)
                _published(catalog, info.topic, last)
                handled = catalog.mark_set_done(FOLLOWED[0], {"ds": str(day)})
                _published(catalog, topics[0], handled)
                catalog.subscriptions.advance(SUBSCRIBER, OWNER, {topics[0]: handled})
                clock.now = START + timedelta(days=day + 1) - timedelta(seconds=1)
                started = time.perf_counter()
                swept = catalog.outbox.sweep(retention)
                seconds = time.perf_counter() - started
                if day not in days:
                    continue
                with loader.engine.connect() as conn:
                    count = int(conn.execute(text("SELECT count(*) FROM hcat_outbox")).scalar_one())
                if count > bound or swept.kept:
                    raise RuntimeError(
                        f"{backend} day {day}: {count:,} outbox rows (bound {bound:,}), "
                        f"{swept.kept} held back by {dict(swept.held)}"
                    )
                print(
                    f"# {backend} outbox D = {day}: {count:,} rows of {day * per_day:,} "
                    f"written, within {RETENTION_DAYS + 1} days' writes",
                    flush=True,
                )
                log(
                    f"{backend} outbox day {day}: swept {swept.deleted:,} in {seconds:.2f} s "
                    f"({swept.deleted / seconds:,.0f} events/s), {count:,} rows left"
                )
                rows.add(day, count, day * per_day)
                took.add(day, seconds)
    finally:
        loader.close()
    return [rows, took]
