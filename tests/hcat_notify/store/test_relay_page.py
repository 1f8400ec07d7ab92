"""A relay's page of the outbox, read on the driver: what it returns, that it sees
events committed after its connection was opened, and what it costs the database
(PostgreSQL: two statements; the primary key walked from the position, also on a table
the planner has no statistics for)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.pool import Pool

from hcat_notify.config import Settings
from hcat_notify.model.topics import topic_bucket
from hcat_notify.store import Catalog, NewPartition

ALL = list(range(256))


def _done(catalog: Catalog, table: str, day: int) -> int:
    return catalog.mark_set_done(table, {"ds": f"{day:03d}"})


def test_a_page_is_the_owned_buckets_events_after_the_position_in_id_order(catalog: Catalog):
    for name in ("web.a", "web.b", "web.c"):
        catalog.create_table(name, location=f"/w/{name}", partition_keys=["ds"])
    ids = [_done(catalog, f"web.{t}", day) for day in range(4) for t in "abc"]
    bucket_b = topic_bucket("hcat.web.b", 256)
    page = catalog.outbox.events_in_buckets([bucket_b], after_event_id=ids[1], limit=3)
    assert [(e.topic, e.event_id) for e in page] == [
        ("hcat.web.b", ids[4]),
        ("hcat.web.b", ids[7]),
        ("hcat.web.b", ids[10]),
    ]
    (first,) = catalog.outbox.events_in_buckets([bucket_b], after_event_id=ids[1], limit=1)
    assert first == catalog.outbox.events(after_event_id=ids[3], limit=1)[0]
    assert dict(first.headers)["HCAT_SPEC"] == "ds=001"
    assert catalog.outbox.events_in_buckets([], after_event_id=0, limit=10) == []


def test_a_page_sees_events_committed_after_its_connection_was_opened(
    catalog: Catalog, settings: Settings
):
    catalog.create_table("web.clicks", location="/w/c", partition_keys=["ds"])
    first = _done(catalog, "web.clicks", 1)
    assert [e.event_id for e in catalog.outbox.events_in_buckets(ALL, after_event_id=0, limit=9)][
        -1:
    ] == [first]
    other = Catalog.open(settings)  # another process's writer, as it were
    try:
        second = _done(other, "web.clicks", 2)
    finally:
        other.close()
    page = catalog.outbox.events_in_buckets(ALL, after_event_id=first, limit=9)
    assert [e.event_id for e in page] == [second]


@contextlib.contextmanager
def _driver_statements(seen: Callable[[Any, str, Any], None]) -> Iterator[None]:
    """``seen(cursor, statement, parameters)`` before each statement run on a driver
    cursor of a connection checked out meanwhile (psycopg), on that connection, with the
    settings it runs with: the relay reads its page on the driver, not through
    SQLAlchemy."""
    import psycopg

    class Watched(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            seen(self, str(query), params)
            return super().execute(query, params, **kwargs)

    def checkout(dbapi_connection: Any, *_: Any) -> None:
        dbapi_connection.cursor_factory = Watched

    event.listen(Pool, "checkout", checkout)
    try:
        yield
    finally:
        event.remove(Pool, "checkout", checkout)


def _is_page(statement: str) -> bool:
    return statement.lstrip().startswith("SELECT hcat_outbox.event_id")


@pytest.mark.integration
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_page_walks_the_primary_key_even_without_statistics(catalog: Catalog, db_url: str):
    catalog.create_table("web.clicks", location="/w/c", partition_keys=["ds"])
    catalog.add_partitions(
        "web.clicks", [NewPartition({"ds": f"{n:05d}"}, f"/w/c/{n}") for n in range(3000)]
    )
    # as an outbox filled faster than autovacuum analyzes it
    admin = create_engine(db_url)
    try:
        with admin.begin() as conn:
            conn.execute(text("DELETE FROM pg_statistic WHERE starelid = 'hcat_outbox'::regclass"))
    finally:
        admin.dispose()
    plans: list[str] = []

    def explain(cursor: Any, statement: str, parameters: Any) -> None:
        if _is_page(statement):
            cursor.execute("EXPLAIN " + statement, parameters)
            plans.append("\n".join(row[0] for row in cursor.fetchall()))

    with _driver_statements(explain):
        page = catalog.outbox.events_in_buckets(ALL, after_event_id=0, limit=100)
    assert len(page) == 100
    assert [e.event_id for e in page] == sorted(e.event_id for e in page)
    (plan,) = plans
    assert "Index Scan using pk_hcat_outbox" in plan, plan
    assert "Sort" not in plan, plan


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_page_on_postgresql_is_two_statements_the_horizon_and_the_page(catalog: Catalog):
    """Through a session a page took five round trips (BEGIN, the sort setting, the
    horizon, the page, COMMIT); on the relay's own connection, two."""
    catalog.create_table("web.clicks", location="/w/c", partition_keys=["ds"])
    ids = [_done(catalog, "web.clicks", day) for day in range(3)]
    seen: list[str] = []
    with _driver_statements(lambda _, statement, __: seen.append(statement)):
        catalog.outbox.events_in_buckets(ALL, after_event_id=0, limit=1)  # opens it
        seen.clear()
        page = catalog.outbox.events_in_buckets(ALL, after_event_id=ids[0], limit=5)
    assert [e.event_id for e in page] == ids[1:]
    assert len(seen) == 2, seen
    assert seen[0] == "SELECT hcat_event_horizon()"
    assert _is_page(seen[1]), seen
