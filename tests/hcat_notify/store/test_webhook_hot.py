"""Recording webhook deliveries keeps the progress table's indexes still on PostgreSQL: a
2xx moves a topic's position (``last_event_id``) and nothing that an index of
``hcat_webhook_progress`` holds or filters on, so each such update is a heap-only (HOT)
update, which writes no index entry (docs/architecture.md, "Hot paths")."""

from __future__ import annotations

import dataclasses
import time

import pytest
from sqlalchemy import create_engine, text

from hcat_notify.config import Settings
from hcat_notify.store import Catalog
from hcat_notify.store.group import MemberReport
from hcat_notify.store.webhooks import LanePosition

POSTGRES = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
LANES = 400  # a few heap pages of progress rows
ROUNDS = 4
RECORD = 20  # lanes per record (the relay records the 2xx of a few requests at a time)
BUCKETS = (3, 7, 50, 200)


def _owned(catalog: Catalog, member: str) -> dict[int, int]:
    catalog.group.heartbeat(MemberReport(member, "host", 1))
    epoch = catalog.group.claim_controller(member, ttl=30)
    assert epoch is not None
    assert catalog.group.assign(member, epoch, dict.fromkeys(BUCKETS, member), [])
    owned = catalog.group.owned(member)
    return {bucket: owned[bucket].epoch for bucket in BUCKETS}


def _updates(db_url: str, at_least: int) -> tuple[int, int]:
    """``hcat_webhook_progress``'s (updates, HOT updates) once ``at_least`` updates are
    counted: PostgreSQL 15 adds a backend's counts to the shared statistics when it
    exits (or, idle, up to 10 s later)."""
    engine = create_engine(db_url, isolation_level="AUTOCOMMIT")
    deadline = time.monotonic() + 15
    try:
        with engine.connect() as connection:
            while True:
                connection.execute(text("SELECT pg_stat_clear_snapshot()"))
                updated, hot = connection.execute(
                    text(
                        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                        "WHERE relname = 'hcat_webhook_progress'"
                    )
                ).one()
                if updated >= at_least or time.monotonic() > deadline:
                    return int(updated), int(hot)
                time.sleep(0.05)
    finally:
        engine.dispose()


@POSTGRES
def test_a_delivery_recorded_is_a_heap_only_update_of_its_topics_row(
    catalog: Catalog, db_url: str, settings: Settings
):
    catalog.create_table("web.t", location="/w/t", partition_keys=["ds"])
    info, _ = catalog.webhooks.add("ops", "https://hooks.example.com/in", "web.*", from_event=1)
    epochs = _owned(catalog, "a")
    lanes = [
        LanePosition(
            info.id,
            info.version,
            f"hcat.web.t{n:04d}",
            BUCKETS[n % len(BUCKETS)],
            epochs[BUCKETS[n % len(BUCKETS)]],
            0,
            info.created_at,
        )
        for n in range(LANES)
    ]
    before = _updates(db_url, 0)
    with Catalog.open(settings) as relay:  # its connections closed: their counts shared
        for delivered in range(1, ROUNDS + 2):  # the first inserts the rows, then updates
            for first in range(0, LANES, RECORD):
                batch = [
                    dataclasses.replace(lane, last_event_id=delivered * 10)
                    for lane in lanes[first : first + RECORD]
                ]
                assert relay.webhooks.record_delivered_many("a", batch) == ["ok"] * RECORD
    updated, hot = _updates(db_url, before[0] + ROUNDS * LANES)
    updated, hot = updated - before[0], hot - before[1]
    assert updated == ROUNDS * LANES
    # (main, with the index of (webhook, position): 0 of 1,600; here 1,533 measured)
    assert hot >= 0.9 * updated, (hot, updated)
    figures = catalog.webhooks.figures("ops")
    assert [f.delivered for f in figures] == [(ROUNDS + 1) * 10]
