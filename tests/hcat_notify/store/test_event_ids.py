"""Event ids: increasing, and never visible out of order to a reader in id order."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from hcat_notify.config import load_settings
from hcat_notify.store import Catalog
from hcat_notify.store.engine import alembic_config, open_engine
from hcat_notify.store.event_ids import allocate_event_ids, ids_in_flight, visible_through


@pytest.fixture
def engine(catalog: Catalog, db_url: str) -> Iterator[Engine]:
    """The migrated catalog's database, for transactions held open by hand."""
    opened = open_engine(db_url)
    yield opened
    opened.dispose()


def test_ids_increase_and_are_visible_after_commit(engine: Engine):
    with engine.begin() as connection:
        first = allocate_event_ids(connection, 3)
    with engine.begin() as connection:
        second = allocate_event_ids(connection, 1)
    assert first == sorted(set(first))
    assert len(first) == 3
    assert second[0] > first[-1]
    with engine.connect() as connection:
        assert visible_through(connection) == second[0]


def test_a_held_transaction_keeps_readers_below_its_ids(engine: Engine, db_url: str):
    """The horizon stays below an open writer's ids, whatever commits after them."""
    held = engine.connect()
    transaction = held.begin()
    try:
        (mine,) = allocate_event_ids(held, 1)
        # another writer, meanwhile (on SQLite it waits for the held lock: no later id)
        later: list[int] = []

        def write() -> None:
            with engine.begin() as connection:
                later.extend(allocate_event_ids(connection, 2))

        writer = threading.Thread(target=write)
        writer.start()
        writer.join(5)
        if db_url.startswith("postgresql"):
            assert later, "the sequence made the other writer wait"
            assert later[0] > mine
            with engine.connect() as reader:
                assert visible_through(reader) == mine - 1
        else:
            assert later == [], "SQLite let a second writer allocate past a held id"
        transaction.commit()
    finally:
        held.close()
    writer.join(30)
    assert later
    assert later[0] > mine
    with engine.connect() as reader:
        assert visible_through(reader) == later[-1]


def test_a_rolled_back_transaction_leaves_no_hole_for_readers(engine: Engine, db_url: str):
    with engine.connect() as connection:
        with connection.begin() as transaction:
            (lost,) = allocate_event_ids(connection, 1)
            transaction.rollback()
        with connection.begin():
            (kept,) = allocate_event_ids(connection, 1)
        # SQLite's counter rolls back with the transaction; a sequence leaves a gap,
        # which the horizon passes (nothing waits for the rolled-back id).
        assert kept == (lost + 1 if db_url.startswith("postgresql") else lost)
        assert visible_through(connection) == kept


def test_a_count_below_one_is_refused_and_takes_nothing(engine: Engine):
    with engine.connect() as connection:
        before = visible_through(connection)
        with pytest.raises(ValueError, match="at least 1, got 0"):
            allocate_event_ids(connection, 0)
        assert visible_through(connection) == before


def test_the_database_function_refuses_a_bad_count(fresh_postgres_url: str, tmp_path: Path):
    with Catalog.open(load_settings(home=tmp_path, db_url=fresh_postgres_url)):
        pass
    engine = open_engine(fresh_postgres_url)
    try:
        with engine.connect() as connection, pytest.raises(DBAPIError, match="at least 1"):
            connection.execute(text("SELECT hcat_allocate_event_ids(0)"))
        with engine.connect() as connection:
            assert visible_through(connection) == 0
    finally:
        engine.dispose()


def test_ids_continue_after_the_counter_when_a_catalog_is_migrated(
    empty_db_url: str, tmp_path: Path
):
    """A catalog at 0009 with events: the sequence starts after the counter's last id."""
    from alembic import command

    engine = open_engine(empty_db_url)
    try:
        with engine.begin() as connection:
            command.upgrade(alembic_config(connection, None), "0009")
            connection.execute(text("UPDATE hcat_event_counter SET last_event_id = 41"))
    finally:
        engine.dispose()
    settings = load_settings(home=tmp_path, db_url=empty_db_url)
    with Catalog.open(settings, upgrade=True) as catalog:  # as `hcat-notify db upgrade`
        assert catalog.last_event_id() == 41
        catalog.create_table("web.clicks", location=str(tmp_path / "c"), partition_keys=["ds"])
        assert catalog.mark_set_done("web.clicks", {"ds": "1"}) > 42
        done = catalog.mark_set_done("web.clicks", {"ds": "2"})
        assert catalog.last_event_id() == done


def test_an_older_process_taking_ids_from_the_counter_fails_and_says_why(
    fresh_postgres_url: str, tmp_path: Path
):
    """On PostgreSQL the counter is retired: its ids would collide with the sequence's."""
    with Catalog.open(load_settings(home=tmp_path, db_url=fresh_postgres_url)) as catalog:
        catalog.create_table("web.clicks", location=str(tmp_path / "c"), partition_keys=["ds"])
        before = catalog.last_event_id()
    engine = open_engine(fresh_postgres_url)
    try:
        with pytest.raises(DBAPIError, match="runs an older hcat-notify"), engine.begin() as c:
            c.execute(text("UPDATE hcat_event_counter SET last_event_id = last_event_id + 1"))
        with engine.connect() as connection:
            assert visible_through(connection) == before
    finally:
        engine.dispose()


def test_a_downgrade_hands_the_sequence_back_to_the_counter(
    fresh_postgres_url: str, tmp_path: Path
):
    from alembic import command

    settings = load_settings(home=tmp_path, db_url=fresh_postgres_url)
    with Catalog.open(settings) as catalog:
        catalog.create_table("web.clicks", location=str(tmp_path / "c"), partition_keys=["ds"])
        last = catalog.mark_set_done("web.clicks", {"ds": "1"})
    engine = open_engine(fresh_postgres_url)
    try:
        with engine.begin() as connection:
            command.downgrade(alembic_config(connection, None), "0009")
        with engine.begin() as connection:
            taken = connection.execute(
                text(
                    "UPDATE hcat_event_counter SET last_event_id = last_event_id + 1"
                    " RETURNING last_event_id"
                )
            ).scalar_one()
            assert taken == last + 1  # the counter, continued
            command.upgrade(alembic_config(connection, None), "head")
        with engine.begin() as connection:
            assert allocate_event_ids(connection, 1) == [last + 2]  # the sequence, continued
    finally:
        engine.dispose()


def _our_id_locks(connection: Connection) -> int:
    return int(
        connection.execute(
            text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1"
                " AND (classid::bigint >> 16) = 18499 AND pid = pg_backend_pid()"
            )
        ).scalar_one()
    )


def test_a_transaction_holds_one_id_lock_however_many_allocations(
    fresh_postgres_url: str, tmp_path: Path
):
    """A lock per call would fill PostgreSQL's lock table on a write of many partitions."""
    with Catalog.open(load_settings(home=tmp_path, db_url=fresh_postgres_url)):
        pass
    engine = open_engine(fresh_postgres_url)
    try:
        with engine.begin() as connection:
            first = allocate_event_ids(connection, 1)[0]
            for _ in range(50):
                allocate_event_ids(connection, 2)
            assert _our_id_locks(connection) == 1
            with engine.connect() as reader:
                assert visible_through(reader) == first - 1
        with engine.begin() as connection:  # a new transaction locks again
            (again,) = allocate_event_ids(connection, 1)
            assert _our_id_locks(connection) == 1
            with engine.connect() as reader:
                assert visible_through(reader) == again - 1
    finally:
        engine.dispose()


def test_a_failed_allocation_leaves_no_gate_lock_behind(fresh_postgres_url: str, tmp_path: Path):
    """The gate is a session lock: an error inside the allocation must release it, or
    every reader of the horizon (and then every writer) would wait for ever."""
    with Catalog.open(load_settings(home=tmp_path, db_url=fresh_postgres_url)):
        pass
    engine = open_engine(fresh_postgres_url)
    try:
        with engine.begin() as connection:
            connection.execute(text("SELECT setval('hcat_event_id_seq', (1::bigint << 48) - 2)"))
        writer = engine.connect()
        try:
            with pytest.raises(DBAPIError, match="past 2"), writer.begin():
                allocate_event_ids(writer, 3)
            with engine.connect() as reader:
                reader.execute(text("SET statement_timeout = 5000"))
                # answered (no gate left held); the refused ids are a gap it passes
                assert visible_through(reader) == 2**48 + 1
        finally:
            writer.close()
    finally:
        engine.dispose()


def test_the_catalog_reads_in_read_committed_whatever_the_server_default(
    fresh_postgres_url: str, tmp_path: Path
):
    """Under REPEATABLE READ a read after the horizon would keep the snapshot taken
    before it, and could miss a commit the horizon counts."""
    engine = open_engine(fresh_postgres_url)
    try:
        with engine.connect() as connection:
            database = connection.execute(text("SELECT current_database()")).scalar_one()
            connection.execute(
                text(
                    f'ALTER DATABASE "{database}" SET default_transaction_isolation'
                    " = 'repeatable read'"
                )
            )
            connection.commit()
    finally:
        engine.dispose()
    engine = open_engine(fresh_postgres_url)
    try:
        with engine.connect() as connection:
            level = connection.execute(text("SHOW transaction_isolation")).scalar_one()
        assert level == "read committed"
    finally:
        engine.dispose()


@pytest.mark.parametrize("end", ["rollback", "commit"])
def test_ids_in_flight_while_a_transaction_holds_ids(
    engine: Engine, db_url: str, catalog: Catalog, end: str
):
    with engine.connect() as reader:
        assert not ids_in_flight(reader)
    held = engine.connect()
    transaction = held.begin()
    try:
        allocate_event_ids(held, 2)
        with engine.connect() as reader:
            # SQLite's writers hold the counter to commit: nothing is ever "in flight"
            assert ids_in_flight(reader) is db_url.startswith("postgresql")
        assert catalog.group.ids_in_flight() is db_url.startswith("postgresql")
    finally:
        transaction.rollback() if end == "rollback" else transaction.commit()
        held.close()
    with engine.connect() as reader:
        assert not ids_in_flight(reader)
    assert not catalog.group.ids_in_flight()
