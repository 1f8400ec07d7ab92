"""What a listing or an overview costs does not grow with the catalog: the first page of
``table list`` and ``partitions list``, ``status``'s topics and refused events, the
parked count of ``/metrics``. Measured as work the database does (SQLite's virtual
machine steps), never as time; on PostgreSQL, as the plan of each page query."""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, select, text

from hcat_notify.cli import main
from hcat_notify.store import Catalog, NewPartition
from hcat_notify.store import paging as paging_module
from hcat_notify.store.models import OutboxRow, RetentionRow, TableRow, TopicProgressRow
from tests.fixtures.catalog_rows import bulk_insert as _bulk
from tests.fixtures.plans import plans_without_seqscan
from tests.fixtures.sqlite_work import sqlite_work as _work

SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
POSTGRES = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
FLAT = 1.5  # the bound: at most 1.5 x the work at the small size


def _more_tables(catalog: Catalog, db_url: str, db: str, count: int) -> None:
    """``count`` more tables in ``db``, copies of one registered the ordinary way."""
    catalog.create_table(f"{db}.t_proto", location=f"/w/{db}/proto", partition_keys=["ds"])
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            proto = connection.execute(
                select(TableRow.__table__).where(
                    TableRow.db_name == db, TableRow.table_name == "t_proto"
                )
            ).one()
    finally:
        engine.dispose()
    base = {k: v for k, v in proto._mapping.items() if k != "id"}
    _bulk(
        db_url,
        TableRow,
        [
            {**base, "table_name": f"t{n:06d}", "location": f"/w/{db}/{n}", "topic": f"{db}.t{n}"}
            for n in range(count)
        ],
    )


def _more_topics(db_url: str, count: int, start: int = 0) -> None:
    now = datetime.now(UTC).timestamp()
    _bulk(
        db_url,
        TopicProgressRow,
        [
            {
                "topic": f"topic.{n:07d}",
                "bucket": n % 256,
                "last_event_id": n,
                "epoch": 1,
                "updated_at": now - n,
            }
            for n in range(start, start + count)
        ],
    )


def _published_through_the_end(db_url: str) -> None:
    """Every relay bucket published through the last event, as running relays leave it."""
    engine = create_engine(db_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "UPDATE hcat_relay_buckets SET published_through = "
                    "(SELECT max(event_id) FROM hcat_outbox)"
                )
            )
            if connection.dialect.name == "sqlite":
                connection.execute(text("ANALYZE"))
    finally:
        engine.dispose()


def _more_outbox(db_url: str, count: int, first_id: int) -> None:
    now = datetime.now(UTC)
    _bulk(
        db_url,
        OutboxRow,
        [
            {
                "event_id": first_id + n,
                "topic": f"topic.{n % 3:07d}",  # a few busy topics, as a real outbox
                "bucket": n % 3,
                "event_type": "MARK_SET_DONE",
                "table_name": "web.other",
                "headers": {},
                "body": "{}",
                "created_at": now,
            }
            for n in range(count)
        ],
    )


class _Pipe(io.StringIO):
    """A stdout that breaks (as ``| head -N`` does) after ``lines`` lines."""

    def __init__(self, lines: int) -> None:
        super().__init__()
        self.lines = lines

    def write(self, s: str) -> int:
        if self.getvalue().count("\n") >= self.lines:
            raise BrokenPipeError
        return super().write(s)


def _tables_read(run: Callable[[], object]) -> int:
    loaded = [0]

    def count(*_: Any) -> None:
        loaded[0] += 1

    event.listen(TableRow, "load", count)
    try:
        run()
    finally:
        event.remove(TableRow, "load", count)
    return loaded[0]


def test_table_list_reads_a_page_at_a_time_and_lists_every_table(
    catalog: Catalog, db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
):
    _more_tables(catalog, db_url, "big", 60)
    monkeypatch.setattr(paging_module, "PAGE_SIZE", 10)
    code = main(["--db-url", db_url, "table", "list"])
    out = capsys.readouterr().out
    names = [line.split("\t")[0] for line in out.splitlines()]
    assert code == 0
    assert names == sorted(set(names))
    assert len(names) == 61
    code = main(["--db-url", db_url, "table", "list", "-o", "json", "--db", "big"])
    listed = json.loads(capsys.readouterr().out)
    assert [item["table"] for item in listed] == [n for n in names if n.startswith("big.")]
    # `| head -3`: one page read, not 61 tables
    monkeypatch.setattr(sys, "stdout", _Pipe(3))
    read = _tables_read(lambda: main(["--db-url", db_url, "table", "list"]))
    assert read <= 10, read


def test_partitions_list_streams_pages_in_path_order(
    catalog: Catalog, db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
):
    catalog.create_table("web.p", location="/w/p", partition_keys=["ds", "r"])
    catalog.add_partitions(
        "web.p",
        [NewPartition({"ds": f"d{n // 5:02d}", "r": f"r{n % 5}"}, f"/w/p/{n}") for n in range(47)],
    )
    monkeypatch.setattr(paging_module, "PAGE_SIZE", 7)
    pages = list(catalog.partitions.pages("web.p"))
    assert [len(page) for page in pages] == [7] * 6 + [5]
    monkeypatch.setattr(paging_module, "FIRST_PAGE", 2)  # then twice as many, up to 7
    pages = list(catalog.partitions.pages("web.p"))
    assert [len(page) for page in pages] == [2, 4, 7, 7, 7, 7, 7, 6]
    assert [p.spec for page in pages for p in page] == [
        p.spec for p in catalog.list_partitions("web.p")
    ]
    assert main(["--db-url", db_url, "partitions", "list", "web.p", "r=r3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == [f"ds=d{n:02d}/r=r3" for n in range(9)]
    assert main(["--db-url", db_url, "partitions", "list", "-o", "json", "web.p", "ds=d09"]) == 0
    assert '"ds": "d09"' in capsys.readouterr().out


def test_a_tables_page_resumes_after_a_name(catalog: Catalog, db_url: str):
    _more_tables(catalog, db_url, "a", 5)
    _more_tables(catalog, db_url, "b", 5)
    first = catalog.list_tables(limit=4)
    rest = catalog.list_tables(after=first[-1].name, limit=100)
    every = [str(t.name) for t in catalog.list_tables()]
    assert [str(t.name) for t in first + rest] == every
    assert [str(t.name) for t in catalog.list_tables("b", after="a.t000003", limit=2)] == [
        "b.t000000",
        "b.t000001",
    ]


@SQLITE
def test_the_first_page_of_tables_and_the_rule_figures_cost_the_same_at_50_and_2000_tables(
    catalog: Catalog, db_url: str
):
    _more_tables(catalog, db_url, "m", 50)
    small = _work(lambda: catalog.list_tables(limit=20))
    small_figures = _work(catalog.sets.figures)  # /metrics: the tables with a rule
    _more_tables(catalog, db_url, "z", 2000)
    large = _work(lambda: catalog.list_tables(limit=20))
    large_figures = _work(catalog.sets.figures)
    assert large_figures <= FLAT * small_figures + 2, (small_figures, large_figures)
    deep = _work(lambda: catalog.list_tables(after="z.t001500", limit=20))
    assert large <= FLAT * small + 2, (small, large)
    assert deep <= FLAT * small + 2, (small, deep)


@SQLITE
def test_status_and_metrics_reads_stay_flat_with_topics_and_outbox(catalog: Catalog, db_url: str):
    def overview() -> None:
        catalog.outbox.backlog()
        catalog.outbox.last_published_by_topic(20)
        catalog.outbox.published_topics()
        catalog.outbox.refused()
        catalog.outbox.parked_count()

    _more_topics(db_url, 100)
    _more_outbox(db_url, 500, first_id=1_000_000)
    _published_through_the_end(db_url)
    small = _work(overview)
    _more_topics(db_url, 5000, start=100)
    _more_outbox(db_url, 20_000, first_id=2_000_000)
    _published_through_the_end(db_url)
    large = _work(overview)
    assert catalog.outbox.backlog() == (0, None)
    assert large <= FLAT * small + 2, (small, large)
    newest = catalog.outbox.last_published_by_topic(3)
    assert list(newest) == ["topic.0000000", "topic.0000001", "topic.0000002"]
    assert catalog.outbox.published_topics() == 5100


@contextlib.contextmanager
def _captured(statements: list[tuple[str, Any]], jit: set[str]) -> Iterator[None]:
    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            statements.append((statement, parameters))
            for setting in ("jit", "plan_cache_mode"):
                shown = cursor.connection.execute(f"SHOW {setting}").fetchone()[0]
                jit.add(f"{setting}={shown}")

    event.listen(Engine, "before_cursor_execute", capture)
    try:
        yield
    finally:
        event.remove(Engine, "before_cursor_execute", capture)


@POSTGRES
def test_postgresql_serves_every_page_and_overview_query_from_an_index(
    catalog: Catalog, db_url: str
):
    _more_tables(catalog, db_url, "pg", 30)
    _more_topics(db_url, 50)
    _more_outbox(db_url, 200, first_id=1_000_000)
    _published_through_the_end(db_url)
    statements: list[tuple[str, Any]] = []
    jit: set[str] = set()
    with _captured(statements, jit):
        catalog.outbox.backlog()
        catalog.list_tables(limit=10)
        catalog.list_tables(after="pg.t000005", limit=10)
        catalog.outbox.last_published_by_topic(20)
        catalog.outbox.refused()
        catalog.outbox.parked_count()
        catalog.tables.activity(limit=20)
    # the planner's estimates of the backlog's correlated counts on a large outbox pass
    # jit_above_cost: compiling took 240 ms of a 0.5 ms query; the generic plan of a
    # catch-up run 5 times hashed the whole outbox (benchmarks/scale.py)
    assert jit == {"jit=off", "plan_cache_mode=force_custom_plan"}
    wanted = [s for s in statements if re.search(r"hcat_(tables|topic_progress|outbox)\b", s[0])]
    assert len(wanted) >= 6, statements
    for plan in plans_without_seqscan(db_url, wanted):
        # a scan of the 256 relay buckets is fixed work; of a growing table, never
        assert not re.search(r"Seq Scan on hcat_(?!relay_buckets)", plan), plan


def test_the_status_pages_tables_are_one_statement_however_many_it_shows(
    catalog: Catalog, db_url: str
):
    catalog.create_table("act.a", location="/w/act/a", partition_keys=["ds", "r"])
    catalog.create_table("act.b", location="/w/act/b", partition_keys=["ds"])
    catalog.create_table("act.c", location="/w/act/c", partition_keys=["ds"])
    catalog.add_partitions(
        "act.a",
        [NewPartition({"ds": d, "r": r}, f"/w/act/a/{d}{r}") for d in ("d2", "d1") for r in "yx"],
    )
    catalog.add_partitions("act.c", [NewPartition({"ds": "d9"}, "/w/act/c/d9")])
    first = catalog.mark_set_done("act.a", {"ds": "d1"})
    newest = catalog.mark_set_done("act.a", {"ds": "d2"})
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            statements.append(statement)

    event.listen(Engine, "before_cursor_execute", count)
    try:
        shown = catalog.tables.activity(db="act", limit=10)
    finally:
        event.remove(Engine, "before_cursor_execute", count)
    # one round trip for the page, not two more per table (the status page shows 200)
    assert len(statements) == 1, statements
    assert [str(item.table.name) for item in shown] == ["act.a", "act.b", "act.c"]
    a, b, c = shown
    assert (a.last_partition, a.last_done, a.last_done_event_id) == ("ds=d2/r=y", "ds=d2", newest)
    assert newest > first
    assert a.last_partition_at is not None
    assert a.last_done_at is not None
    assert (b.last_partition, b.last_partition_at, b.last_done, b.last_done_at) == (
        None,
        None,
        None,
        None,
    )
    assert (c.last_partition, c.last_done) == ("ds=d9", None)


@POSTGRES
def test_the_status_page_finds_each_tables_newest_done_by_its_own_index(
    catalog: Catalog, db_url: str
):
    """Dones in two tables, none in thirty: estimating thousands of dones for any table,
    PostgreSQL walked the primary key backwards for a table without one (the whole
    retention table, for each of the page's tables: 15 s at 10^5 dones)."""
    _more_tables(catalog, db_url, "st", 30)
    catalog.create_table("busy.a", location="/w/busy/a", partition_keys=["ds"])
    catalog.create_table("busy.b", location="/w/busy/b", partition_keys=["ds"])
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            ids = connection.execute(
                select(TableRow.id).where(TableRow.db_name == "busy").order_by(TableRow.id)
            ).scalars()
            busy = list(ids)
    finally:
        engine.dispose()
    now = datetime.now(UTC)
    _bulk(
        db_url,
        RetentionRow,
        [
            {
                "event_id": 5_000_000 + n,
                "table_id": busy[n % 2],
                "spec": f"ds={n}",
                "spec_json": {"ds": str(n)},
                "created_at": now,
                "expires_at": now,
                "generation": 1,
            }
            for n in range(4000)
        ],
    )
    engine = create_engine(db_url)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.exec_driver_sql("ANALYZE")
    finally:
        engine.dispose()
    statements: list[tuple[str, Any]] = []
    with _captured(statements, set()):
        shown = catalog.tables.activity(db="st", limit=20)
    assert len(shown) == 20
    assert all(item.last_done is None for item in shown)
    (plan,) = [_plan(db_url, s) for s in statements if "hcat_mark_set_done" in s[0]]
    assert "ix_hcat_mark_set_done_table_event" in plan, plan
    assert "pk_hcat_mark_set_done" not in plan, plan


def _plan(db_url: str, statement: tuple[str, Any]) -> str:
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            cursor = connection.connection.cursor()
            cursor.execute("EXPLAIN " + statement[0], statement[1])
            return "\n".join(row[0] for row in cursor.fetchall())
    finally:
        engine.dispose()
