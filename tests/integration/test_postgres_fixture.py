"""Proves the PostgreSQL fixtures: a real PostgreSQL 15 and isolated throwaway databases."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

pytestmark = pytest.mark.integration


@pytest.fixture
def engine(postgres_url: str) -> Iterator[Engine]:
    eng = sa.create_engine(postgres_url)
    try:
        yield eng
    finally:
        eng.dispose()


def _user_tables(url: str) -> list[str]:
    eng = sa.create_engine(url)
    try:
        with eng.connect() as conn:
            return list(
                conn.execute(
                    sa.text(
                        "SELECT table_name FROM information_schema.tables "
                        "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
                    )
                ).scalars()
            )
    finally:
        eng.dispose()


def test_session_database_is_postgres_15(engine: Engine) -> None:
    assert engine.dialect.driver == "psycopg"
    database = make_url(str(engine.url)).database
    assert database is not None
    assert database.startswith("hcat_test_")
    with engine.connect() as conn:
        version = conn.execute(sa.text("SELECT version()")).scalar_one()
        assert "PostgreSQL 15" in version
        assert conn.execute(sa.text("SELECT current_database()")).scalar_one() == database
        encoding = conn.execute(sa.text("SHOW server_encoding")).scalar_one()
        assert encoding == "UTF8"


def test_create_insert_read_back(engine: Engine) -> None:
    metadata = sa.MetaData()
    table = sa.Table(
        "fixture_probe",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
    )
    metadata.create_all(engine)
    try:
        with engine.begin() as conn:
            conn.execute(sa.insert(table), [{"id": 1, "name": "ünïcode"}, {"id": 2, "name": "b"}])
        with engine.connect() as conn:
            rows = conn.execute(sa.select(table.c.id, table.c.name).order_by(table.c.id)).all()
        assert [tuple(r) for r in rows] == [(1, "ünïcode"), (2, "b")]
    finally:
        metadata.drop_all(engine)


def test_fresh_databases_are_distinct_and_empty(
    fresh_postgres_url: str, postgres_database_factory: Callable[[], str], postgres_url: str
) -> None:
    other_fresh_postgres_url = postgres_database_factory()
    names = {make_url(u).database for u in (fresh_postgres_url, other_fresh_postgres_url)}
    assert len(names) == 2
    assert make_url(postgres_url).database not in names

    assert _user_tables(fresh_postgres_url) == []
    assert _user_tables(other_fresh_postgres_url) == []

    # A table created in one is invisible in the other.
    eng = sa.create_engine(fresh_postgres_url)
    try:
        with eng.begin() as conn:
            conn.execute(sa.text("CREATE TABLE only_here (x int)"))
    finally:
        eng.dispose()
    assert _user_tables(fresh_postgres_url) == ["only_here"]
    assert _user_tables(other_fresh_postgres_url) == []


_seen_fresh: list[str] = []


@pytest.mark.parametrize("round_", [1, 2])
def test_fresh_database_per_test(fresh_postgres_url: str, round_: int) -> None:
    # Each test gets its own database, empty even though the previous round wrote to it.
    assert fresh_postgres_url not in _seen_fresh
    _seen_fresh.append(fresh_postgres_url)
    assert _user_tables(fresh_postgres_url) == []
    eng = sa.create_engine(fresh_postgres_url)
    try:
        with eng.begin() as conn:
            conn.execute(sa.text(f"CREATE TABLE round_{round_} (x int)"))
    finally:
        eng.dispose()
