"""The relay's timed pass of completeness (quiet periods, deadlines) with real relay
processes killed, paused and restarted: each verdict is written once, by the member that
owns the set's bucket, and published; SQLite and PostgreSQL (issue 28)."""

from __future__ import annotations

import signal
import uuid
from typing import Any

import pytest

from hcat_notify.config import Settings
from hcat_notify.model.events import EventType
from hcat_notify.store import Catalog, NewPartition, TableInfo
from tests.integration.test_relay_group import (
    NOTICED,
    WireRecorder,
    group_of_relays,
    stop_outside_sqlite_write_lock,
    wait_until,
)
from tests.wire import validate_message

pytestmark = pytest.mark.integration

TABLES = 6  # spread over buckets, so that every relay of the group owns some
REGIONS = ("us", "eu", "apac")


def of_kind(wire: WireRecorder, kind: EventType) -> dict[int, dict[str, Any]]:
    """Event id: body (checked against its schema) of the messages of ``kind`` that
    arrived (repeats collapse)."""
    found = {}
    for headers, body in list(wire.messages):
        if headers["HCAT_EVENT"] == kind.value:
            found[int(headers["HCAT_EVENT_ID"])] = validate_message(headers, body)
    return found


def _activity(settings: Settings) -> str:
    """What the catalog's sessions are doing (PostgreSQL), for a failure's message."""
    if not settings.database_url.startswith("postgresql"):
        return ""
    from sqlalchemy import create_engine, text

    engine = create_engine(settings.database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT pid, state, wait_event_type, xact_start, left(query, 150)"
                    " FROM pg_stat_activity WHERE datname = current_database()"
                )
            ).all()
    finally:
        engine.dispose()
    return "\n".join(str(tuple(row)) for row in rows)


def _tables(catalog: Catalog, db: str, **rule: Any) -> list[TableInfo]:
    tables = []
    for n in range(TABLES):
        info = catalog.create_table(
            f"{db}.t{n}", location=f"/t/{n}", partition_keys=["ds", "region"]
        )
        catalog.expect(info.name, set_keys="ds", parts=["region=" + ",".join(REGIONS)], **rule)
        tables.append(info)
    return tables


def _add(catalog: Catalog, table: TableInfo, ds: str, regions: tuple[str, ...]) -> None:
    catalog.add_partitions(
        table.name,
        [
            NewPartition({"ds": ds, "region": region}, f"{table.location}/ds={ds}/region={region}")
            for region in regions
        ],
    )


def _outbox(catalog: Catalog, tables: list[TableInfo], kind: EventType) -> list[Any]:
    events = catalog.outbox.catch_up([t.name for t in tables], cursor=0)
    return [event for event in events if event.event_type is kind]


def test_deadlines_fire_set_late_once_while_relays_are_killed_and_paused(
    delivery_settings: Settings, delivery_catalog: Catalog
):
    db = f"late{uuid.uuid4().hex[:8]}"
    tables = _tables(delivery_catalog, db, deadline_after="4s", on_deadline="late")
    wire = WireRecorder(delivery_settings, db)
    try:
        with group_of_relays(delivery_settings, delivery_catalog, 2) as group:
            # each table: set ds=1 with only "us" (missing eu, apac); ds=2 complete at once
            for table in tables:
                _add(delivery_catalog, table, "1", ("us",))
                _add(delivery_catalog, table, "2", REGIONS)
            # kill -9 the busiest member and start another, until every deadline has passed
            # and its verdict is written (at least three kills)
            kills = 0
            while kills < 3 or len(_outbox(delivery_catalog, tables, EventType.SET_LATE)) < TABLES:
                victim = group.owners().most_common(1)[0][0]
                group.failover(signal.SIGKILL, victim)
                group.processes[victim].finish(timeout=30)
                kills += 1
                group.start()
                group.wait_settled()
                assert kills < 30, "the deadlines' verdicts never came"
            # (idle first: a member paused inside a progress write would hold its
            # buckets' rows, and no one could take them; not what is tested here)
            first = _outbox(delivery_catalog, tables, EventType.SET_LATE)
            first += _outbox(delivery_catalog, tables, EventType.MARK_SET_DONE)
            wait_until(
                lambda: {e.event_id for e in first} <= {i for _, i in wire.seen},
                60,
                lambda: "the first verdicts were not all published",
            )
            # a zombie: paused past its session timeout, its buckets move; the sets of a
            # second day come due meanwhile or after SIGCONT, when it goes on with the
            # epochs it read before (its passes are fenced by them: it writes nothing)
            zombie = group.owners().most_common(1)[0][0]
            process = group.processes[zombie]
            had = {b.bucket for b in delivery_catalog.group.buckets() if b.owner == zombie}
            wait_until(  # not before it has read them (else it has nothing to lose)
                lambda: f"relay buckets acquired member={zombie} " in process.stderr,
                30,
                lambda: f"{zombie} never read its buckets",
            )
            stop_outside_sqlite_write_lock(process.proc, delivery_settings.database_url)
            for table in tables:
                _add(delivery_catalog, table, "3", ("us",))
            wait_until(
                lambda: (
                    not any(
                        b.owner == zombie
                        for b in delivery_catalog.group.buckets()
                        if b.bucket in had
                    )
                ),
                60,
                lambda: "the zombie's buckets never moved: " + _activity(delivery_settings),
            )
            continued = len(process.stderr)
            group.failover(signal.SIGCONT, zombie)
            wait_until(
                lambda: NOTICED.search(process.stderr[continued:]) is not None,
                30,
                lambda: f"{zombie} never noticed: {process.stderr[continued:][-2000:]}",
            )
            wait_until(
                lambda: len(_outbox(delivery_catalog, tables, EventType.SET_LATE)) >= 2 * TABLES,
                60,
                lambda: "the second day's verdicts never came",
            )
            group.wait_settled()
            lates = _outbox(delivery_catalog, tables, EventType.SET_LATE)
            wait_until(
                lambda: set(of_kind(wire, EventType.SET_LATE)) >= {e.event_id for e in lates},
                60,
                lambda: "the SET_LATE events were not all published",
            )
            group.stop_all()
    finally:
        wire.close()
    late_ids = {event.event_id for event in _outbox(delivery_catalog, tables, EventType.SET_LATE)}
    assert late_ids == {event.event_id for event in lates}  # nothing after the last look
    bodies = of_kind(wire, EventType.SET_LATE)
    assert set(bodies) == late_ids
    # exactly one per set, the zombie's passes included
    assert sorted((body["table"], body["spec"]) for body in bodies.values()) == sorted(
        (table.name.table, f"ds={ds}") for table in tables for ds in ("1", "3")
    )
    for body in bodies.values():
        ds = body["spec"]
        assert body["missing"] == [f"{ds}/region=eu", f"{ds}/region=apac"]  # the rule's order
        assert (body["expected"], body["present"], body["missingCount"]) == (3, 1, 2)
    assert of_kind(wire, EventType.MARK_SET_DONE).keys() == {
        event.event_id for event in _outbox(delivery_catalog, tables, EventType.MARK_SET_DONE)
    }
    assert len(of_kind(wire, EventType.MARK_SET_DONE)) == TABLES  # ds=2 of each, at once


def test_a_quiet_period_completes_a_set_with_one_done(
    delivery_settings: Settings, delivery_catalog: Catalog
):
    db = f"quiet{uuid.uuid4().hex[:8]}"
    tables = _tables(delivery_catalog, db, quiet="2s")
    wire = WireRecorder(delivery_settings, db)
    try:
        with group_of_relays(delivery_settings, delivery_catalog, 2) as group:
            for table in tables:
                _add(delivery_catalog, table, "1", REGIONS)
            wait_until(
                lambda: len(of_kind(wire, EventType.MARK_SET_DONE)) >= TABLES,
                60,
                lambda: f"dones: {of_kind(wire, EventType.MARK_SET_DONE)}",
            )
            group.stop_all()
    finally:
        wire.close()
    dones = _outbox(delivery_catalog, tables, EventType.MARK_SET_DONE)
    assert len(dones) == TABLES
    bodies = of_kind(wire, EventType.MARK_SET_DONE)
    assert set(bodies) == {event.event_id for event in dones}
    for body in bodies.values():
        assert (body["spec"], body["generation"], body["reason"]) == ("ds=1", 1, "rule")
    for table in tables:  # after its quiet period, by the database's clock
        report = delivery_catalog.sets.state(table.name, {"ds": "1"})
        assert report.done_at is not None
        assert report.last_change_at is not None
        assert (report.done_at - report.last_change_at).total_seconds() >= 2
