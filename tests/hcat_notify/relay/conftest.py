"""A SQLite catalog with one table, and a scripted broker behind the relay's connection."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable, Iterator

import pytest

from hcat_notify.config import Settings
from hcat_notify.relay import Relay, RelayConfig
from hcat_notify.store import Catalog, TableInfo
from hcat_notify.store.records import OutboxEvent
from hcat_notify.writer import send_mark_set_done
from tests.fakes.broker import FakeBroker
from tests.fixtures.webhook_receiver import Receiver


@pytest.fixture
def db_url(tmp_path, _sqlite_catalog_template) -> str:
    """SQLite only: a copy of the session's migrated catalog (tests/conftest.py)."""
    path = tmp_path / "catalog.db"
    shutil.copyfile(_sqlite_catalog_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    fake = FakeBroker()
    yield fake
    fake.close()


@pytest.fixture
def clicks(settings: Settings, catalog: Catalog) -> TableInfo:
    """A table; its CREATE_TABLE (on the prefix topic) is published before the test starts,
    on a broker of its own: the tests are about what comes after."""
    info = catalog.create_table("web.clicks", location="/w/clicks", partition_keys=["datestamp"])
    elsewhere = FakeBroker()
    try:
        with Relay(settings, catalog=catalog, connection_factory=elsewhere.connection) as relay:
            assert relay.drain() == 1
    finally:
        elsewhere.close()
    return info


@pytest.fixture
def dones(settings: Settings, catalog: Catalog) -> Callable[[TableInfo, int], list[OutboxEvent]]:
    """``count`` mark-set-done events of a table, one partition each."""

    def make(table: TableInfo, count: int) -> list[OutboxEvent]:
        ids = {
            send_mark_set_done(table.name, {"datestamp": f"{n:03d}"}, settings=settings)
            for n in range(count)
        }
        return [event for event in catalog.outbox.pending() if event.event_id in ids]

    return make


@pytest.fixture
def stray(catalog: Catalog, broker: FakeBroker, clicks: TableInfo) -> TableInfo:
    """A table whose topic the broker refuses to the publisher (made after ``clicks``)."""
    table = catalog.create_table("web.stray", location="/w/stray", partition_keys=["datestamp"])
    broker.refused_topics.add(f"/topic/{table.topic}")
    return table


@pytest.fixture
def hook_settings(settings: Settings) -> Settings:
    """``settings`` with webhooks to loopback allowed (where :func:`receiver` listens) and
    a 5 s request timeout."""
    return dataclasses.replace(settings, webhook_allow=("127.0.0.1",), webhook_timeout=5.0)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A webhook receiver on loopback answering 200, closed after the test."""
    found = Receiver()
    yield found
    found.close()


@pytest.fixture
def solo_relay(hook_settings: Settings, broker: FakeBroker) -> Callable[..., Relay]:
    """``solo_relay(catalog, config=None)``: a relay of ``hook_settings`` on ``catalog``,
    member "solo", publishing to ``broker``."""

    def make(catalog: Catalog, config: RelayConfig | None = None) -> Relay:
        return Relay(
            hook_settings,
            config=config,
            catalog=catalog,
            connection_factory=broker.connection,
            member_id="solo",
        )

    return make
