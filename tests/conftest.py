"""Shared fixtures: each real part (broker, PostgreSQL, Spark) lives in tests/fixtures/."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import pytest

from hcat_notify.config import Settings, load_settings
from hcat_notify.store import Catalog

pytest_plugins = [
    "tests.fixtures.broker",
    "tests.fixtures.broker_pair",
    "tests.fixtures.jms",
    "tests.fixtures.postgres",
    "tests.fixtures.schedule",
    "tests.fixtures.spark",
    "tests.fixtures.trust",
]


TEST_WAREHOUSE = "/,hdfs://nn:8020/warehouse"
"""The suite's warehouse root. Most tests are not about the boundary and register
made-up locations (``/data/clicks``) as well as ``tmp_path`` ones: their operator chose
``/`` (every local directory but ``/`` itself). The boundary's own tests
(``test_warehouse*.py``, and those using ``narrow_warehouse`` of tests/fixtures/trust.py)
configure narrow roots."""


TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Background ``hcat-notify`` commands a test left running are killed and waited for
    (tests/integration/delivery.py, ``reap_leftovers``)."""
    delivery = sys.modules.get("tests.integration.delivery")
    if delivery is not None:
        delivery.reap_leftovers()


def pytest_configure(config: pytest.Config) -> None:
    """Airflow, imported in-process by the Airflow tests, reads AIRFLOW_HOME when first
    imported and would otherwise create ~/airflow: give it a throwaway home.

    A suite started in the background by a shell without job control (``cmd &``,
    ``nohup cmd &``) inherits SIGINT ignored, and so would every process the tests start:
    the tests that interrupt a command with SIGINT, as a terminal's Ctrl-C does, would
    then wait for nothing. Python's own handler here is reset to the default in each
    child at exec.
    """
    os.environ["HCAT_NOTIFY_WAREHOUSE_ROOTS"] = TEST_WAREHOUSE  # module fixtures' settings too
    # Every JVM the tests start (brokers, Spark, the JMS probe) lives for seconds to
    # minutes: the C1 compiler alone and the serial collector halve the CPU a Spark
    # session takes here (a session with three small writes: 32 s of CPU, 18 s with
    # these), and the suite is CPU-bound on two cores (tests/README.md).
    os.environ.setdefault("JAVA_TOOL_OPTIONS", TEST_JVM_OPTIONS)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupted_by(os.getpid()))
    if "AIRFLOW_HOME" not in os.environ:
        home = tempfile.mkdtemp(prefix="hcat-test-airflow-home-")
        os.environ["AIRFLOW_HOME"] = home
        os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
        config.add_cleanup(lambda: shutil.rmtree(home, ignore_errors=True))


def _interrupted_by(pid: int) -> Callable[[int, FrameType | None], None]:
    """A SIGTERM handler that ends the run as Ctrl-C does: pytest then tears its fixtures
    down, and the brokers and PostgreSQL clusters they started (each in a session of its
    own, which a signal to the run's process group does not reach) are stopped. A process
    forked from this one without an exec gets the default action back."""

    def interrupted(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != pid:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        signal.signal(signum, signal.SIG_DFL)  # a second SIGTERM ends the run at once
        raise KeyboardInterrupt(f"signal {signum}")

    return interrupted


@pytest.fixture(autouse=True)
def _root_logger_restored() -> Iterator[None]:
    """Importing Airflow configures the root logger (a stdout handler, level INFO): no test
    leaves that to the tests after it. pytest's own handlers are subclasses, left alone."""
    root = logging.getLogger()
    level, before = root.level, set(root.handlers)
    yield
    root.setLevel(level)
    for handler in root.handlers[:]:
        if handler not in before and type(handler) is logging.StreamHandler:
            root.removeHandler(handler)


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's HCAT_NOTIFY_* settings or ~/.hcat-notify; the
    warehouse root is the temporary directory (:data:`TEST_WAREHOUSE`)."""
    for name in list(os.environ):
        if name.startswith("HCAT_NOTIFY_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HCAT_NOTIFY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HCAT_NOTIFY_WAREHOUSE_ROOTS", TEST_WAREHOUSE)


@pytest.fixture(scope="session")
def _sqlite_catalog_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite catalog at the newest schema revision, made once per session by the real
    migrations (``hcat-notify db upgrade``'s code); each test's catalog is a copy."""
    from hcat_notify.store.engine import upgrade_database

    path = tmp_path_factory.mktemp("catalog-template") / "catalog.db"
    upgrade_database(f"sqlite:///{path}")
    # Closed by now: its write-ahead log is folded into the file, which is all there is.
    assert not path.with_name(path.name + "-wal").exists()
    return path


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh catalog database URL, a SQLite file, then a PostgreSQL database: a new
    catalog at the newest schema revision, with nothing in it but what the migrations
    write. It is a copy of a template migrated once per session, so that a test does not
    pay the migrations (0.1 s of CPU each, two thirds of the CPU of the store's tests);
    what opening an empty database does is tested with :func:`empty_db_url`."""
    if request.param == "sqlite":
        path = tmp_path / "catalog.db"
        shutil.copyfile(request.getfixturevalue("_sqlite_catalog_template"), path)
        return f"sqlite:///{path}"
    url: str = request.getfixturevalue("fresh_postgres_catalog_url")
    return url


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database URL (no catalog yet): a SQLite file that does not exist,
    then an empty PostgreSQL database."""
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
