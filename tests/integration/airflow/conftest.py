"""Fixtures for tests against a real Airflow (installed with the ``[airflow]`` extra).

``airflow_template`` (session) migrates one SQLite metadata database; each test copies
it into a fresh ``AIRFLOW_HOME`` of its own. The hcat-notify side is real too: the
session's broker, a SQLite catalog and an ``hcat-notify relay`` process.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hcat_notify.config import Settings
from hcat_notify.store import Catalog, TableInfo
from tests.integration.airflow.support import EXAMPLES, AirflowHome, run_airflow
from tests.integration.delivery import CliProcess, broker_settings


@pytest.fixture(scope="session")
def airflow_template(tmp_path_factory: pytest.TempPathFactory) -> AirflowHome:
    """A migrated, empty Airflow metadata database (``airflow db migrate``, once)."""
    home = AirflowHome(tmp_path_factory.mktemp("airflow-template"), EXAMPLES)
    run_airflow(home, home.env(), "db", "migrate")
    assert home.database.exists()
    return home


@pytest.fixture
def airflow_home(airflow_template: AirflowHome, tmp_path: Path) -> AirflowHome:
    """A private AIRFLOW_HOME with a copy of the migrated database; DAGs: the examples."""
    home = AirflowHome(tmp_path / "airflow", EXAMPLES)
    home.home.mkdir()
    shutil.copy(airflow_template.database, home.database)
    return home


@pytest.fixture
def hcat_settings(broker, tmp_path: Path) -> Settings:
    """The session's broker and a SQLite catalog of this test."""
    return broker_settings(broker, tmp_path / "home", f"sqlite:///{tmp_path / 'catalog.db'}")


@pytest.fixture
def clicks_table(hcat_settings: Settings) -> TableInfo:
    """``<unique db>.clicks`` (datestamp, region): no two tests share a topic."""
    with Catalog.open(hcat_settings) as catalog:
        return catalog.create_table(
            f"af{uuid.uuid4().hex[:10]}.clicks",
            location="/data/clicks",
            partition_keys=["datestamp", "region"],
        )


@pytest.fixture
def relay(hcat_settings: Settings, clicks_table: TableInfo) -> Iterator[CliProcess]:
    """An ``hcat-notify relay`` process publishing the catalog's outbox."""
    process = CliProcess(hcat_settings, "relay")
    try:
        yield process
    finally:
        process.proc.terminate()
        process.finish(timeout=60)
