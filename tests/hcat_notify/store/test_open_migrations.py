"""Opening a catalog does not migrate it (docs/operations.md: stop older processes, then
``hcat-notify db upgrade``): readers never migrate; writers migrate a SQLite file (a
development catalog) and create an empty database's schema; any other catalog behind
this version is one clear error, unless ``db_auto_upgrade`` lets writers migrate it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command

from hcat_notify.config import load_settings
from hcat_notify.errors import StoreError
from hcat_notify.store import Catalog
from hcat_notify.store.engine import alembic_config, current_revision, open_engine
from hcat_notify.store.revision import SCHEMA_REVISION

OLD = "0009"


def _catalog_at(url: str, revision: str) -> None:
    engine = open_engine(url)
    try:
        with engine.begin() as connection:
            command.upgrade(alembic_config(connection, None), revision)
    finally:
        engine.dispose()


def _revision(url: str) -> str | None:
    engine = open_engine(url, create=False)
    try:
        return current_revision(engine)
    finally:
        engine.dispose()


def test_a_reader_never_migrates(empty_db_url: str, tmp_path: Path) -> None:
    _catalog_at(empty_db_url, OLD)
    settings = load_settings(home=tmp_path, db_url=empty_db_url)
    with pytest.raises(StoreError, match=f"revision {OLD}.*'hcat-notify db upgrade'"):
        Catalog.open(settings, upgrade=False)
    assert _revision(empty_db_url) == OLD


def test_a_writer_migrates_a_sqlite_catalog_only(empty_db_url: str, tmp_path: Path) -> None:
    _catalog_at(empty_db_url, OLD)
    settings = load_settings(home=tmp_path, db_url=empty_db_url)
    if empty_db_url.startswith("sqlite"):
        Catalog.open(settings).close()
        assert _revision(empty_db_url) == SCHEMA_REVISION
        return
    with pytest.raises(StoreError, match="stop older processes, then run 'hcat-notify db"):
        Catalog.open(settings)
    assert _revision(empty_db_url) == OLD
    # The operator's explicit setting lets writers migrate it.
    Catalog.open(load_settings(home=tmp_path, db_url=empty_db_url, db_auto_upgrade=True)).close()
    assert _revision(empty_db_url) == SCHEMA_REVISION


def test_a_writer_creates_the_schema_of_an_empty_database(
    empty_db_url: str, tmp_path: Path
) -> None:
    with Catalog.open(load_settings(home=tmp_path, db_url=empty_db_url)) as catalog:
        catalog.create_table("web.clicks", location="/data/clicks", partition_keys=["ds"])
    assert _revision(empty_db_url) == SCHEMA_REVISION


def test_the_setting_reads_true_and_false_and_refuses_anything_else(tmp_path: Path) -> None:
    assert load_settings(home=tmp_path, db_auto_upgrade="yes").db_auto_upgrade is True
    assert load_settings(home=tmp_path, db_auto_upgrade="0").db_auto_upgrade is False
    with pytest.raises(Exception, match="not true or false"):
        load_settings(home=tmp_path, db_auto_upgrade="maybe")


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hcat_notify.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.integration
def test_status_leaves_a_postgresql_catalog_alone_and_db_upgrade_migrates_it(
    fresh_postgres_url: str, tmp_path: Path
) -> None:
    _catalog_at(fresh_postgres_url, OLD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HCAT_NOTIFY_")}
    env.update(HCAT_NOTIFY_HOME=str(tmp_path / "home"), HCAT_NOTIFY_DB_URL=fresh_postgres_url)
    status = _cli("status", env=env)
    assert status.returncode != 0
    assert "hcat-notify db upgrade" in status.stderr
    assert len(status.stderr.strip().splitlines()) == 1
    assert _revision(fresh_postgres_url) == OLD
    upgraded = _cli("db", "upgrade", env=env)
    assert upgraded.returncode == 0, upgraded.stderr
    assert _revision(fresh_postgres_url) == SCHEMA_REVISION
    assert _cli("status", env=env).returncode == 0
