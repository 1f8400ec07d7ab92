"""Fixtures for the HTTP API tests: one ``hcat-notify serve`` per module and backend
(SQLite, then PostgreSQL), clients for each principal, tables of their own per test."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from hcat_notify.config import Settings, load_settings
from hcat_notify.store import Catalog
from tests.integration.api.support import READER, WRITER, ApiServer


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def api_db_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A fresh catalog database for one module: a SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('api-db') / 'catalog.db'}"
        return
    databases = request.getfixturevalue("_postgres_databases")
    url: str = databases.create()
    yield url
    databases.drop(url)


@pytest.fixture(scope="module")
def api_settings(api_db_url: str, broker, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return load_settings(
        home=tmp_path_factory.mktemp("api-home"),
        db_url=api_db_url,
        broker_url=broker.url,
        broker_user=broker.publisher[0],
        broker_password=broker.publisher[1],
        consumer_user=broker.reader[0],
        consumer_password=broker.reader[1],
        broker_timeout=5,
    )


@pytest.fixture(scope="module")
def api(api_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """A running ``hcat-notify serve`` on the module's catalog."""
    Catalog.open(api_settings).close()  # created and migrated, as a deployment would
    log = tmp_path_factory.mktemp("api-log") / "serve.log"
    with ApiServer(api_settings, log=log) as server:
        yield server


@pytest.fixture
def api_catalog(api_settings: Settings) -> Iterator[Catalog]:
    """The module's catalog, opened in the test process (to set up and to check)."""
    with Catalog.open(api_settings) as catalog:
        yield catalog


def _client(api: ApiServer, auth: tuple[str, str] | None) -> httpx.Client:
    return httpx.Client(base_url=api.url, auth=auth, timeout=30)


@pytest.fixture
def reader(api: ApiServer) -> Iterator[httpx.Client]:
    with _client(api, READER) as client:
        yield client


@pytest.fixture
def writer(api: ApiServer) -> Iterator[httpx.Client]:
    with _client(api, WRITER) as client:
        yield client


@pytest.fixture
def anonymous(api: ApiServer) -> Iterator[httpx.Client]:
    with _client(api, None) as client:
        yield client


@pytest.fixture
def new_table(api_catalog: Catalog) -> Callable[..., str]:
    """Registers a table in a database of its own (no two tests share a topic)."""

    def create(keys: tuple[str, ...] = ("datestamp", "region"), **options: Any) -> str:
        name = f"t{uuid.uuid4().hex[:10]}.clicks"
        api_catalog.create_table(
            name, location=f"/data/{name.replace('.', '/')}", partition_keys=list(keys), **options
        )
        return name

    return create


@pytest.fixture
def table(new_table: Callable[..., str]) -> str:
    """A new table of the module's catalog."""
    return new_table()


@pytest.fixture
def unchanged(api_catalog: Catalog, table: str) -> Iterator[None]:
    """Asserts, after the test, that no event, table or partition was written."""

    def state() -> tuple[int, int, int]:
        return (
            api_catalog.last_event_id(),
            len(api_catalog.list_tables()),
            len(api_catalog.list_partitions(table)),
        )

    before = state()
    yield
    assert state() == before
