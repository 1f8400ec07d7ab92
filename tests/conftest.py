"""Shared fixtures: each real part (broker, PostgreSQL, Spark) lives in tests/fixtures/."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hcat_notify.config import Settings, load_settings
from hcat_notify.store import Catalog

pytest_plugins = [
    "tests.fixtures.broker",
    "tests.fixtures.broker_pair",
    "tests.fixtures.jms",
    "tests.fixtures.postgres",
    "tests.fixtures.spark",
]


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's HCAT_NOTIFY_* settings or ~/.hcat-notify."""
    for name in list(os.environ):
        if name.startswith("HCAT_NOTIFY_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HCAT_NOTIFY_HOME", str(tmp_path / "home"))


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty catalog database URL: a SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'catalog.db'}"
    url: str = request.getfixturevalue("fresh_postgres_url")
    return url


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    return load_settings(home=tmp_path / "home", db_url=db_url)


@pytest.fixture
def catalog(settings: Settings) -> Iterator[Catalog]:
    with Catalog.open(settings) as opened:
        yield opened


@pytest.fixture(autouse=True)
def _close_writer_catalogs() -> Iterator[None]:
    """send_mark_set_done keeps catalogs open per settings; each test gets fresh ones."""
    yield
    from hcat_notify.writer import close_catalogs

    close_catalogs()
