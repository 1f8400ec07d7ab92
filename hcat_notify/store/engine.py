"""Database engines for the catalog: SQLite tuning, error mapping, migrations."""

from __future__ import annotations

import functools
import logging
from importlib import resources
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, event, make_url, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from hcat_notify.errors import ConfigError, StoreUnavailableError

__all__ = ["current_revision", "head_revision", "open_engine", "redact", "upgrade"]

logger = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_MS = 30_000
# Any constant works: it only has to be the same for every hcat-notify process.
_PG_MIGRATION_LOCK = 0x6863_6174  # "hcat"
# Databases this process has seen at the head revision: checked once, not per open.
_AT_HEAD: set[str] = set()


def redact(url: str | URL) -> str:
    """Render a database URL for messages, with the password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable database URL>"


def _prepare_sqlite(url: URL) -> None:
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    parent = Path(database).expanduser().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreUnavailableError(
            f"cannot create the directory {parent} for database {redact(url)}: {exc.strerror}"
        ) from exc


def _tune_sqlite(engine: Engine) -> None:
    # Take transaction control from the sqlite3 module (SQLAlchemy's documented recipe),
    # so that writers can BEGIN IMMEDIATE and never deadlock upgrading a read lock.
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        immediate = connection.get_execution_options().get("hcat_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def open_engine(url: str) -> Engine:
    """Create an engine for ``url`` and check that the database answers.

    Raises:
        ConfigError: the URL is malformed or names a driver that is not installed.
        StoreUnavailableError: the database cannot be reached or opened.
    """
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(f"malformed database URL {url!r}") from exc
    is_sqlite = parsed.get_backend_name() == "sqlite"
    if is_sqlite:
        _prepare_sqlite(parsed)
    kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "postgresql":
        kwargs["pool_pre_ping"] = True
        kwargs["connect_args"] = {"connect_timeout": 10}
    try:
        engine = create_engine(parsed, **kwargs)
    except (NoSuchModuleError, ImportError) as exc:
        raise ConfigError(f"no driver for database URL {redact(parsed)}: {exc}") from exc
    if is_sqlite:
        _tune_sqlite(engine)
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        engine.dispose()
        reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
        raise StoreUnavailableError(
            f"cannot connect to database {redact(parsed)}: {reason}"
        ) from exc
    return engine


def _alembic_config(connection: Connection) -> Config:
    config = Config()
    config.set_main_option(
        "script_location", str(resources.files("hcat_notify").joinpath("migrations"))
    )
    config.attributes["connection"] = connection
    return config


@functools.cache
def head_revision() -> str:
    """The newest migration revision shipped with this version."""
    script = ScriptDirectory(str(resources.files("hcat_notify").joinpath("migrations")))
    head = script.get_current_head()
    if head is None:  # pragma: no cover - the package always ships migrations
        raise RuntimeError("hcat_notify ships no migrations")
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None for an empty database."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade(engine: Engine) -> tuple[str | None, str]:
    """Apply pending migrations; safe to call from several processes at once.

    Returns:
        (revision before, revision after).
    """
    head = head_revision()
    key = engine.url.render_as_string(hide_password=False)
    if key in _AT_HEAD:
        return head, head
    before = current_revision(engine)
    if before == head:
        _AT_HEAD.add(key)
        return before, head
    with engine.execution_options(hcat_write=True).begin() as connection:
        if connection.dialect.name == "postgresql":
            # Serialise concurrent first uses; released at commit.
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK}
            )
        before = MigrationContext.configure(connection).get_current_revision()
        if before != head:
            logger.info("migrating catalog %s from %s to %s", redact(engine.url), before, head)
            command.upgrade(_alembic_config(connection), "head")
    _AT_HEAD.add(key)
    return before, head
