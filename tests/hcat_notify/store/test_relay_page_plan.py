"""PostgreSQL: a relay's page of the outbox walks the primary key from its position and
stops after the page, also on a table the planner has no statistics for."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text

from hcat_notify.store import Catalog, NewPartition

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def _explained(plans: list[str]) -> Iterator[None]:
    """EXPLAIN each relay page read, in its own transaction, just before it runs."""

    def explain(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().startswith("SELECT hcat_outbox.event_id"):
            cursor.execute("EXPLAIN " + statement, parameters)
            plans.append("\n".join(row[0] for row in cursor.fetchall()))

    event.listen(Engine, "before_cursor_execute", explain)
    try:
        yield
    finally:
        event.remove(Engine, "before_cursor_execute", explain)


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_relay_page_walks_the_primary_key_even_without_statistics(catalog: Catalog, db_url: str):
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
    with _explained(plans):
        page = catalog.outbox.events_in_buckets(list(range(256)), after_event_id=0, limit=100)
    assert len(page) == 100
    assert [e.event_id for e in page] == sorted(e.event_id for e in page)
    (plan,) = plans
    assert "Index Scan using pk_hcat_outbox" in plan, plan
    assert "Sort" not in plan, plan
