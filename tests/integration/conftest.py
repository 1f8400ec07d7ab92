"""Fixtures for delivery tests: settings that point at the test broker and database."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hcat_notify.config import Settings
from hcat_notify.store import Catalog, TableInfo
from tests.integration.delivery import broker_settings


@pytest.fixture
def delivery_settings(db_url: str, broker, tmp_path: Path) -> Settings:
    return broker_settings(broker, tmp_path / "home", db_url)


@pytest.fixture
def delivery_catalog(delivery_settings: Settings) -> Iterator[Catalog]:
    with Catalog.open(delivery_settings) as catalog:
        yield catalog


@pytest.fixture
def clicks(delivery_settings: Settings, delivery_catalog: Catalog) -> TableInfo:
    """A table with a database name of its own, so no two tests share a topic.

    Its CREATE_TABLE (event 1, on the prefix topic) is published before the test starts:
    the tests that use it are about what comes after.
    """
    from hcat_notify.relay import Relay

    info = delivery_catalog.create_table(
        f"d{uuid.uuid4().hex[:10]}.clicks",
        location="/data/clicks",
        partition_keys=["datestamp", "region"],
    )
    with Relay(delivery_settings, catalog=delivery_catalog) as relay:
        assert relay.drain() == 1
    return info
