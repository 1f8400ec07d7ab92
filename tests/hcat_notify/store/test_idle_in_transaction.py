"""A process paused inside a transaction (SIGSTOP, a frozen VM) holds its row locks until
it runs again; relays' catalogs ask PostgreSQL to end such a session, so the rest of the
group is not stopped with it (``open_engine(idle_in_transaction=...)``)."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, OperationalError

from hcat_notify.config import load_settings
from hcat_notify.relay import Relay, RelayConfig
from hcat_notify.store import Catalog
from hcat_notify.store.engine import open_engine

pytestmark = pytest.mark.integration

LOCK_GROUP_ROW = "SELECT version FROM hcat_relay_group WHERE id = 1 FOR UPDATE"
BUMP_GROUP_ROW = "UPDATE hcat_relay_group SET version = version + 1 WHERE id = 1"


@pytest.fixture
def catalog_url(fresh_postgres_url: str, tmp_path) -> str:
    Catalog.open(load_settings(home=tmp_path / "home", db_url=fresh_postgres_url)).close()
    return fresh_postgres_url


def test_a_session_idle_in_a_transaction_is_ended_and_its_lock_released(catalog_url: str):
    paused = open_engine(catalog_url, idle_in_transaction=0.5)
    other = open_engine(catalog_url)
    try:
        with paused.connect() as holder:
            holder.execute(text(LOCK_GROUP_ROW))  # then it stops issuing statements
            with other.begin() as waiter:
                waiter.execute(text("SET LOCAL lock_timeout = '30s'"))
                # blocks until the server ends the holder's session, then goes through
                assert waiter.execute(text(BUMP_GROUP_ROW)).rowcount == 1
            with pytest.raises(DBAPIError, match="idle-in-transaction"):
                holder.execute(text("SELECT 1"))
    finally:
        paused.dispose()
        other.dispose()


def test_without_the_bound_the_lock_is_held_for_as_long_as_the_holder_waits(catalog_url: str):
    unbounded = open_engine(catalog_url)
    other = open_engine(catalog_url)
    try:
        with unbounded.connect() as holder:
            holder.execute(text(LOCK_GROUP_ROW))
            with other.begin() as waiter:
                waiter.execute(text("SET LOCAL lock_timeout = '1s'"))
                with pytest.raises(OperationalError, match="lock timeout"):
                    waiter.execute(text(BUMP_GROUP_ROW))
            holder.rollback()
    finally:
        unbounded.dispose()
        other.dispose()


def test_a_relay_bounds_its_catalog_by_its_session_timeout(
    catalog_url: str, tmp_path, monkeypatch: pytest.MonkeyPatch
):
    opened: list[float | None] = []
    real_open = Catalog.open

    def recording_open(settings, **kwargs):
        opened.append(kwargs.get("idle_in_transaction"))
        return real_open(settings, **kwargs)

    monkeypatch.setattr(Catalog, "open", recording_open)
    settings = load_settings(home=tmp_path / "home", db_url=catalog_url)
    with Relay(settings, config=RelayConfig(session_timeout=4.5)):
        pass
    assert opened == [4.5]
