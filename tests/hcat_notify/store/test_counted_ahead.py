"""``partitions add`` counts its sets ahead (the counting write sent with the add's
check, one round trip on PostgreSQL) and judges them at commit: the same counts, dones
and generations as a write whose sets are counted at commit; driver statements sent
together. SQLite and PostgreSQL."""

from __future__ import annotations

import random
from typing import Any

import pytest
from sqlalchemy import literal_column, select, table
from sqlalchemy.exc import DBAPIError

from hcat_notify.config import Settings
from hcat_notify.model.events import HEADER_SET_GENERATION, EventType
from hcat_notify.model.names import TableName
from hcat_notify.store import Catalog, NewPartition, completeness, group
from hcat_notify.store import engine as engines
from hcat_notify.store import partitions as partition_ops
from hcat_notify.store.driver import compiled, first_rows
from hcat_notify.store.models import SetStateRow, TableRow
from hcat_notify.store.records import info_of
from hcat_notify.store.tx import transaction

pytestmark = pytest.mark.integration

KEYS = ["datestamp", "region", "hour"]
PARTS = ["region=us,eu", "hour=00..02"]  # six parts a day


def _ruled(catalog: Catalog, name: str) -> str:
    catalog.create_table(name, location=f"/w/{name}", partition_keys=KEYS)
    catalog.expect(name, set_keys="datestamp", parts=PARTS)
    return name


def _new(*parts: tuple[str, str, str], where: str = "/w/d") -> list[NewPartition]:
    return [NewPartition(dict(zip(KEYS, part, strict=True)), where) for part in parts]


def _sets(settings: Settings, name: str) -> list[tuple[Any, ...]]:
    """Each set's row: spec, counts, state, generation, done reason."""
    db, table_name = name.split(".")
    engine = engines.open_engine(settings.database_url)
    with engine.connect() as connection:
        rows = connection.execute(
            select(
                SetStateRow.set_spec,
                SetStateRow.part_count,
                SetStateRow.expected_present,
                SetStateRow.state,
                SetStateRow.generation,
                SetStateRow.done_reason,
            )
            .join(TableRow, TableRow.id == SetStateRow.table_id)
            .where(TableRow.db_name == db, TableRow.table_name == table_name)
            .order_by(SetStateRow.set_spec)
        )
        found = [tuple(row) for row in rows]
    engine.dispose()
    return found


def _dones(catalog: Catalog, name: str) -> list[tuple[str, str]]:
    return [
        (event.headers["HCAT_SPEC"], event.headers[HEADER_SET_GENERATION])
        for event in catalog.outbox.catch_up([name], cursor=0)
        if event.event_type is EventType.MARK_SET_DONE
    ]


def test_an_add_counted_ahead_leaves_the_sets_and_dones_of_one_counted_at_commit(
    catalog: Catalog, settings: Settings
):
    """``add_partitions`` (counted ahead on PostgreSQL, whose driver pipelines; at
    commit on SQLite) and ``partitions.register`` (counted at commit) of the same
    partitions in the same order: the same set rows and dones after every write, through
    first parts, extra parts, two sets in one write, completing parts and a late part
    after a done (generation 2)."""
    ahead, at_commit = _ruled(catalog, "web.ahead"), _ruled(catalog, "web.commit")
    day = [(d, r, h) for d in ("1", "2") for r in ("us", "eu") for h in ("00", "01", "02")]
    random.Random(5).shuffle(day)
    writes: list[list[tuple[str, str, str]]] = [[part] for part in day[:4]]
    writes += [[("1", "xx", "00")], day[4:6], [part for part in day[6:]]]
    writes += [[("1", "xx", "01")], [("3", "us", "00"), ("2", "xx", "00")]]
    for step, parts in enumerate(writes):
        catalog.add_partitions(ahead, _new(*parts))
        # another directory: another table's partition at /w/d would be refused
        catalog.partitions.register(at_commit, _new(*parts, where="/w/e"))
        assert _sets(settings, ahead) == _sets(settings, at_commit), (step, parts)
        assert _dones(catalog, ahead) == _dones(catalog, at_commit), (step, parts)
    assert _dones(catalog, ahead) == [
        ("datestamp=1", "1"),
        ("datestamp=2", "1"),
        ("datestamp=1", "2"),
        ("datestamp=2", "2"),
    ]
    assert [row[1:3] for row in _sets(settings, ahead)] == [(8, 6), (7, 6), (1, 1)]


def _write(catalog: Catalog, settings: Settings) -> Any:
    engine = engines.open_engine(settings.database_url).execution_options(hcat_write=True)
    return engine, transaction(engine, settings, catalog.now, catalog.url, group.bucket_count)


@pytest.mark.parametrize("then", ["another add", "a done by hand"])
def test_a_set_counted_ahead_and_changed_again_in_the_same_transaction_counts_once(
    catalog: Catalog, settings: Settings, then: str
):
    """The second change of a counted set in one transaction is counted once more, not
    the first again: another part completing it (the rule's done), or a done by hand
    (the writer's, and no rule done)."""
    name = _ruled(catalog, "web.twice")
    parts = [("1", r, h) for r in ("us", "eu") for h in ("00", "01", "02")]
    catalog.add_partitions(name, _new(*parts[:4]))
    engine, opened = _write(catalog, settings)
    try:
        with opened as tx:
            row = tx.table_row(TableName.parse(name), share=True)
            # what partitions add does where the driver pipelines (here on both)
            spec = info_of(row).spec(dict(zip(KEYS, parts[4], strict=True)), partial=False)
            completeness.count_ahead(tx, row, TableName.parse(name), [spec])
            partition_ops.add_partitions(tx, row, _new(parts[4]), job_id=None)
            if then == "another add":
                partition_ops.add_partitions(tx, row, _new(parts[5]), job_id=None)
            else:
                completeness.mark_set_done(tx, row, info_of(row), {"datestamp": "1"})
    finally:
        engine.dispose()
    complete = then == "another add"
    ((_, part_count, present, state, generation, reason),) = _sets(settings, name)
    assert (part_count, present) == ((6, 6) if complete else (5, 5))
    assert (state, generation, reason) == ("done", 1, "rule" if complete else "writer")
    assert _dones(catalog, name) == [("datestamp=1", "1")]


def _literal(dialect: str, value: int) -> Any:
    del dialect
    return select(literal_column(str(value)))


def _missing(dialect: str) -> Any:
    del dialect
    return select(literal_column("1")).select_from(table("hcat_no_such_table"))


def test_driver_statements_sent_together_give_each_first_row_and_errors_as_sqlalchemy(
    settings: Settings,
):
    engine = engines.open_engine(settings.database_url)
    with engine.connect() as connection:
        dialect = connection.dialect
        one, two = (compiled(dialect, _literal, n) for n in (1, 2))
        rows = first_rows(connection, [one.bind({}), two.bind({})])
        assert [tuple(row) for row in rows] == [(1,), (2,)]
        with pytest.raises(DBAPIError, match="hcat_no_such_table"):
            first_rows(connection, [one.bind({}), compiled(dialect, _missing).bind({})])
    engine.dispose()


def test_a_new_set_row_holding_older_partitions_is_counted_afresh(
    catalog: Catalog, settings: Settings
):
    """A set's row is created and counted in one statement at its first write; a set
    that held partitions before its table had the rule is counted afresh instead, and
    done once when its last expected part comes."""
    name = "web.older"
    catalog.create_table(name, location=f"/w/{name}", partition_keys=KEYS)
    catalog.add_partitions(name, _new(("1", "us", "00"), ("1", "xx", "00"), ("1", "eu", "01")))
    catalog.expect(name, set_keys="datestamp", parts=PARTS)
    catalog.add_partitions(name, _new(("1", "us", "01")))
    catalog.add_partitions(name, _new(("2", "us", "00")))  # a new set: one statement
    assert [row[:4] for row in _sets(settings, name)] == [
        ("datestamp=1", 4, 3, "open"),
        ("datestamp=2", 1, 1, "open"),
    ]
    catalog.add_partitions(name, _new(("1", "us", "02"), ("1", "eu", "00"), ("1", "eu", "02")))
    assert _dones(catalog, name) == [("datestamp=1", "1")]
    assert _sets(settings, name)[0][:4] == ("datestamp=1", 7, 6, "done")


def _traced_add(catalog: Catalog, settings: Settings, name: str, part: tuple[str, str, str]):
    """``partitions add`` of one part in a transaction of its own engine; the SQL that
    SQLite ran on the sets' rows (its trace: driver statements included)."""
    engine, opened = _write(catalog, settings)
    statements: list[str] = []
    try:
        with opened as tx:
            driver = tx.session.connection().connection.dbapi_connection
            driver.set_trace_callback(statements.append)
            row = tx.table_row(TableName.parse(name), share=True)
            partition_ops.add_partitions(tx, row, _new(part), job_id=None, count_ahead=True)
    finally:
        engine.dispose()
    return [sql for sql in statements if "hcat_set_states" in sql]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("rule", ["parts", "min_partitions"])
def test_an_add_that_leaves_its_set_incomplete_counts_it_without_returning_on_sqlite(
    catalog: Catalog, settings: Settings, rule: str
):
    """On SQLite (where a ``RETURNING`` row is materialised, the counting write's cost
    three times over) a part that leaves its set incomplete with nothing due is counted
    by one ``UPDATE`` that returns nothing; the part that completes the set is counted
    by the full counting write (its row returned) and writes the done, once."""
    name = "web.short"
    catalog.create_table(name, location=f"/w/{name}", partition_keys=KEYS)
    if rule == "parts":
        catalog.expect(name, set_keys="datestamp", parts=PARTS)
        day = [("1", r, h) for r in ("us", "eu") for h in ("00", "01", "02")]
        last: tuple[int, int | None] = (6, 6)
    else:
        catalog.expect(name, set_keys="datestamp", min_partitions=3)
        day = [("1", "us", h) for h in ("00", "01", "02")]
        last = (3, None)
    catalog.add_partitions(name, _new(day[0]))  # the set's row, created
    for count, part in enumerate(day[1:-1], start=2):
        (only,) = _traced_add(catalog, settings, name, part)
        assert only.startswith("UPDATE hcat_set_states")
        assert "RETURNING" not in only
        assert [row[1] for row in _sets(settings, name)] == [count]
    assert _dones(catalog, name) == []
    short, full, marked = _traced_add(catalog, settings, name, day[-1])
    assert "RETURNING" not in short
    assert "RETURNING" in full
    assert marked.startswith("UPDATE hcat_set_states SET state=")
    assert _dones(catalog, name) == [("datestamp=1", "1")]
    assert _sets(settings, name) == [("datestamp=1", *last, "done", 1, "rule")]


def test_a_rule_changed_by_another_catalog_judges_the_next_add_of_this_one(
    catalog: Catalog, settings: Settings
):
    """The rule in force is read with the table's row by every write (parsed once per
    stored form, found again by it): a rule that another catalog (process) changed
    judges this catalog's next add, whose part would have completed the set under the
    rule before."""
    name = _ruled(catalog, "web.changed")
    day = [("1", r, h) for r in ("us", "eu", "apac") for h in ("00", "01", "02")]
    catalog.add_partitions(name, _new(*day[:5]))
    with Catalog.open(settings) as other:
        other.expect(name, set_keys="datestamp", parts=["region=us,eu,apac", "hour=00..02"])
    catalog.add_partitions(name, _new(day[5]))  # the old rule's last part
    assert _dones(catalog, name) == []
    assert [row[1:4] for row in _sets(settings, name)] == [(6, 6, "open")]
    for part in day[6:]:
        catalog.add_partitions(name, _new(part))
    assert _dones(catalog, name) == [("datestamp=1", "1")]
    assert [row[1:4] for row in _sets(settings, name)] == [(9, 9, "done")]
