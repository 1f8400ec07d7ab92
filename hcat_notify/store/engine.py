"""Database engines for the catalog: SQLite tuning, error mapping, migrations.

Alembic is imported only when a database is not at :data:`SCHEMA_REVISION` yet: a
process that finds the schema current (the common case) reads one row of
``alembic_version`` and goes on.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import time
from importlib import resources
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event, make_url, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError, SQLAlchemyError

from hcat_notify.errors import ConfigError, StoreError, StoreUnavailableError
from hcat_notify.store.quick import sqlite_file
from hcat_notify.store.revision import SCHEMA_REVISION

if TYPE_CHECKING:
    from alembic.config import Config

    from hcat_notify.config import Settings

__all__ = [
    "SCHEMA_REVISION",
    "alembic_config",
    "begin_immediate",
    "checkpoint_passive",
    "current_revision",
    "head_revision",
    "open_engine",
    "prepare_schema",
    "redact",
    "upgrade",
    "upgrade_database",
]

logger = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_CACHE_KIB = 16_384
"""Pages each SQLite connection keeps (KiB; SQLite's default is 2,000): at 10^7
retained dones the interior pages of the retention table and its spec index alone are
about 8 MB, and a lookup that finds them outside the connection's cache reads each from
the OS again (benchmarks/scale.py, docs/operations.md "Sizing"). A cache holds only pages
read, so a small catalog's connections stay small."""
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


def _no_catalog(where: object) -> StoreUnavailableError:
    return StoreUnavailableError(
        f"no catalog at {where}: register a table first ('hcat-notify table create') "
        "or point HCAT_NOTIFY_HOME / HCAT_NOTIFY_DB_URL at an existing catalog"
    )


def _prepare_sqlite(url: URL, *, create: bool) -> None:
    path = sqlite_file(url.render_as_string(hide_password=False))
    if path is None:
        return
    if not create:
        if not path.is_file():
            raise _no_catalog(path)
        return
    parent = path.parent
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
        cursor.execute(f"PRAGMA cache_size = -{SQLITE_CACHE_KIB}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        immediate = connection.get_execution_options().get("hcat_write", False)
        if immediate:
            try:
                begin_immediate(connection.connection.driver_connection)
            except sqlite3.Error as exc:  # as SQLAlchemy reports a statement's failure
                raise OperationalError("BEGIN IMMEDIATE", None, exc) from exc
        else:
            connection.exec_driver_sql("BEGIN")


_LOCK_POLL_FIRST = 0.0001
_LOCK_POLL_MAX = 0.002


def begin_immediate(connection: Any) -> None:
    """``BEGIN IMMEDIATE`` on a ``sqlite3`` connection: take the writers' lock, waiting
    for it as long as the busy timeout allows.

    SQLite's own busy handler sleeps 1, 2, 5, 10, 15, 20, 25 ms... between tries, so a
    writer that finds the lock held for 9 ms gets it after 18. This one polls every
    0.1 ms at first and never sleeps more than 2 ms at a time: the lock goes to a
    waiting writer within 2 ms of its release.

    Raises:
        sqlite3.OperationalError: the lock was not free within the busy timeout (as
            SQLite's handler would), or any other error of the statement.
    """
    connection.execute("PRAGMA busy_timeout = 0")
    try:
        deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
        delay = _LOCK_POLL_FIRST
        while True:
            try:
                connection.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                busy = getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY
                if not busy or time.monotonic() >= deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, _LOCK_POLL_MAX)
    finally:
        connection.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")


def checkpoint_passive(engine: Engine) -> None:
    """Copy what a SQLite catalog's write-ahead log holds into the database file as far
    as no reader needs it, without waiting for anyone (``PRAGMA
    wal_checkpoint(PASSIVE)``).

    A long run of writes (``sweep``) calls this between two of its transactions: the
    log then stays short, and SQLite's automatic checkpoint (at 1,000 pages, run by
    whichever connection's commit crosses it) does not fall to another writer's commit.
    """
    connection = engine.raw_connection()
    try:
        connection.driver_connection.execute("PRAGMA wal_checkpoint(PASSIVE)")  # type: ignore[union-attr]
    except sqlite3.Error as exc:  # the next checkpoint, or SQLite's own, copies the pages
        logger.debug("checkpoint skipped: %s", exc)
    finally:
        connection.close()


def open_engine(
    url: str, *, create: bool = True, idle_in_transaction: float | None = None
) -> Engine:
    """Create an engine for ``url`` and check that the database answers.

    Args:
        url: the SQLAlchemy URL.
        create: create a SQLite file (and its directory) that does not exist yet; with
            False a missing file is an error and nothing is created.
        idle_in_transaction: PostgreSQL ends a session of this engine that waits on it
            for longer than this many seconds inside a transaction, and its locks go
            with it (``idle_in_transaction_session_timeout``): a relay paused while it
            holds a row lock stops no other member (docs/relay-group.md).

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
        _prepare_sqlite(parsed, create=create)
    kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "postgresql":
        kwargs["pool_pre_ping"] = True
        # No JIT: the catalog's statements are short lookups, but on a large catalog the
        # planner's estimate of a correlated count (the outbox backlog) passes
        # jit_above_cost, and compiling it took 240 ms of a 0.5 ms query. A plan for the
        # values of each execution: psycopg prepares a statement run 5 times, and the
        # generic plan PostgreSQL then chose for a catch-up (any table's dones) hashed
        # the whole outbox: 130 ms instead of 9 at 10^5 events (benchmarks/scale.py).
        options = ["-c jit=off", "-c plan_cache_mode=force_custom_plan"]
        if idle_in_transaction is not None:
            milliseconds = max(1, round(idle_in_transaction * 1000))
            options.append(f"-c idle_in_transaction_session_timeout={milliseconds}")
        kwargs["connect_args"] = {"connect_timeout": 10, "options": " ".join(options)}
        # Readers in id order rely on it (store/event_ids.py): a statement after the
        # horizon sees every commit made before it, whatever the server's default.
        kwargs["isolation_level"] = "READ COMMITTED"
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


def alembic_config(connection: Connection, settings: Settings | None) -> Config:
    """Alembic's configuration for migrating the database on ``connection``."""
    from alembic.config import Config

    config = Config()
    config.set_main_option(
        "script_location", str(resources.files("hcat_notify").joinpath("migrations"))
    )
    config.attributes["connection"] = connection
    config.attributes["settings"] = settings
    return config


@functools.cache
def head_revision() -> str:
    """The newest migration revision shipped with this version, as Alembic sees it."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(resources.files("hcat_notify").joinpath("migrations")))
    head = script.get_current_head()
    if head is None:  # pragma: no cover - the package always ships migrations
        raise RuntimeError("hcat_notify ships no migrations")
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None for an empty database."""
    with engine.connect() as connection:
        try:
            row = connection.execute(text("SELECT version_num FROM alembic_version")).first()
        except SQLAlchemyError:
            connection.rollback()
            return None  # no version table: an empty database
    return None if row is None else str(row[0])


def prepare_schema(
    engine: Engine, settings: Settings, *, migrate: bool | None, create: bool
) -> None:
    """What opening a catalog does to its schema (docs/operations.md), reading its
    revision once per process and database.

    ``migrate``: True migrates; False never (readers); None (writers) creates the schema
    of an empty database and migrates a SQLite file, any other catalog only with the
    ``db_auto_upgrade`` setting. ``create=False``: an empty database is no catalog.

    Raises:
        StoreUnavailableError: ``create`` is False and there is no catalog (an empty
            database, such as a PostgreSQL database nobody has written a catalog into).
        StoreError: a migration failed, or the catalog is at an older revision and may
            not be migrated here (the error names ``hcat-notify db upgrade``). A revision
            this version does not know (a newer one) passes.
    """
    key = engine.url.render_as_string(hide_password=False)
    if key in _AT_HEAD:
        return
    current = current_revision(engine)
    if current is None and not create:
        path = sqlite_file(key)
        raise _no_catalog(path if path is not None else redact(engine.url))
    if current == SCHEMA_REVISION:
        _AT_HEAD.add(key)
        return
    if migrate is None:
        migrate = current is None or engine.dialect.name == "sqlite" or settings.db_auto_upgrade
    if migrate:
        upgrade(engine, settings)
    elif current is not None and current in _known_revisions():
        raise StoreError(
            f"the catalog {redact(engine.url)} is at schema revision {current} and this "
            f"version needs {SCHEMA_REVISION}: stop older processes, then run 'hcat-notify db "
            "upgrade' (or set db_auto_upgrade to let writers migrate it)"
        )


@functools.cache
def _known_revisions() -> frozenset[str]:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(resources.files("hcat_notify").joinpath("migrations")))
    return frozenset(revision.revision for revision in script.walk_revisions())


def upgrade(engine: Engine, settings: Settings | None = None) -> tuple[str | None, str]:
    """Apply pending migrations; safe to call from several processes at once.

    Args:
        engine: the catalog's engine.
        settings: the migrating process's settings; a migration that fills a new column
            from them (a table's topic) uses them, else the defaults.

    Returns:
        (revision before, revision after).

    Raises:
        StoreError: a migration failed; the database is left at the revision before.
    """
    key = engine.url.render_as_string(hide_password=False)
    if key in _AT_HEAD:
        return SCHEMA_REVISION, SCHEMA_REVISION
    before = current_revision(engine)
    if before == SCHEMA_REVISION:
        _AT_HEAD.add(key)
        return before, SCHEMA_REVISION
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    try:
        with engine.execution_options(hcat_write=True).connect() as connection:
            sqlite = connection.dialect.name == "sqlite"
            if sqlite:
                _foreign_keys(connection, on=False)
            try:
                with connection.begin():
                    if not sqlite:
                        # Serialise concurrent first uses; released at commit.
                        connection.execute(
                            text("SELECT pg_advisory_xact_lock(:key)"),
                            {"key": _PG_MIGRATION_LOCK},
                        )
                    before = MigrationContext.configure(connection).get_current_revision()
                    if before != SCHEMA_REVISION:
                        logger.info(
                            "migrating catalog %s from %s to %s",
                            redact(engine.url),
                            before,
                            SCHEMA_REVISION,
                        )
                        command.upgrade(alembic_config(connection, settings), SCHEMA_REVISION)
                        if sqlite:
                            _check_foreign_keys(connection, redact(engine.url))
            finally:
                if sqlite:
                    _foreign_keys(connection, on=True)
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
        raise StoreError(f"cannot migrate database {redact(engine.url)}: {reason}") from exc
    _AT_HEAD.add(key)
    return before, SCHEMA_REVISION


def _foreign_keys(connection: Connection, *, on: bool) -> None:
    # Outside a transaction (SQLite ignores the pragma inside one). Off while migrating:
    # a batch migration rebuilds a table by copying it and dropping the original, and
    # with enforcement on that drop deletes every child row through ON DELETE CASCADE.
    driver = connection.connection.driver_connection
    driver.execute(f"PRAGMA foreign_keys = {'ON' if on else 'OFF'}")  # type: ignore[union-attr]


def _check_foreign_keys(connection: Connection, name: str) -> None:
    """What SQLite's own recipe for rebuilding a table ends with: the migrated rows still
    satisfy every foreign key (else the upgrade fails and the transaction rolls back)."""
    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
    if broken:
        table, rowid, parent, _ = broken[0]
        raise StoreError(
            f"cannot migrate database {name}: the migration left {len(broken)} row(s) "
            f"without their parent ({table} row {rowid} names a missing {parent} row)"
        )


def upgrade_database(url: str, settings: Settings | None = None) -> tuple[str | None, str]:
    """Open ``url`` (creating a SQLite file), migrate it to the newest revision, close it.

    Returns:
        (revision before, revision after).
    """
    engine = open_engine(url)
    try:
        return upgrade(engine, settings)
    finally:
        engine.dispose()
