"""The store's change feed: waking a reader (the relay, the API's long polls) when the
catalog may have changed, per database backend.

* PostgreSQL: ``LISTEN hcat_outbox``; every transaction that adds events raises
  ``pg_notify`` at commit (see :mod:`hcat_notify.store.tx`).
* SQLite: ``PRAGMA data_version`` changes when another connection commits to the file;
  reading it costs no disk I/O, so a few-millisecond poll is cheap.
* Anything else: a plain poll.

Every waiter answers "maybe something changed" early and "nothing yet" at the timeout;
the relay always re-reads the outbox, so a spurious wake-up costs one query.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from collections.abc import Sequence
from typing import Protocol

from sqlalchemy import make_url

from hcat_notify.store.tx import OUTBOX_CHANNEL

__all__ = [
    "OutboxWaiter",
    "PollingWaiter",
    "PostgresNotifyWaiter",
    "SqliteDataVersionWaiter",
    "outbox_waiter",
]

logger = logging.getLogger(__name__)

SQLITE_POLL_SECONDS = 0.003
DEFAULT_POLL_SECONDS = 0.05


class OutboxWaiter(Protocol):
    """Blocks until the outbox may have changed."""

    def wait(self, timeout: float) -> bool:
        """Return True early if the outbox may have changed, False at the timeout."""

    def close(self) -> None:
        """Release the waiter's connection."""


class PollingWaiter:
    """Wakes up every ``interval`` seconds; for backends without change signals."""

    def __init__(self, interval: float = DEFAULT_POLL_SECONDS) -> None:
        self._interval = interval

    def wait(self, timeout: float) -> bool:
        time.sleep(max(0.0, min(timeout, self._interval)))
        return timeout > self._interval

    def close(self) -> None:
        return None


class SqliteDataVersionWaiter:
    """Polls ``PRAGMA data_version`` of the catalog file on a private connection."""

    def __init__(self, path: str, interval: float = SQLITE_POLL_SECONDS) -> None:
        self._interval = interval
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._version = self._read()

    def _read(self) -> int:
        row = self._conn.execute("PRAGMA data_version").fetchone()
        return int(row[0])

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            current = self._read()
            if current != self._version:
                self._version = current
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(self._interval, remaining))

    def close(self) -> None:
        self._conn.close()


class PostgresNotifyWaiter:
    """``LISTEN`` on the outbox channel; reconnects after a dropped connection."""

    def __init__(self, url: str, channels: Sequence[str] = (OUTBOX_CHANNEL,)) -> None:
        # libpq takes the URL without SQLAlchemy's "+driver" suffix.
        self._conninfo = (
            make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        )
        self._channels = tuple(channels)
        self._conn: object | None = None

    def _connect(self) -> object:
        import psycopg

        conn = psycopg.connect(self._conninfo, autocommit=True, connect_timeout=10)
        for channel in self._channels:
            conn.execute(f"LISTEN {channel}")
        return conn

    def wait(self, timeout: float) -> bool:
        import psycopg

        started = time.monotonic()
        try:
            if self._conn is None:
                self._conn = self._connect()
            conn: psycopg.Connection[object] = self._conn  # type: ignore[assignment]
            for _ in conn.notifies(timeout=timeout, stop_after=1):
                return True
            return False
        except psycopg.Error as exc:
            logger.warning("outbox LISTEN connection failed: %s; polling instead", exc)
            self.close()
            # Fall back to a short sleep; the caller re-reads the outbox anyway.
            time.sleep(max(0.0, min(DEFAULT_POLL_SECONDS, timeout - (time.monotonic() - started))))
            return True

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()  # type: ignore[attr-defined]


def outbox_waiter(database_url: str, channels: Sequence[str] = (OUTBOX_CHANNEL,)) -> OutboxWaiter:
    """The best waiter for the catalog at ``database_url``.

    Args:
        database_url: the catalog.
        channels: the PostgreSQL NOTIFY channels that wake it (on SQLite, any commit
            to the file does).
    """
    url = make_url(database_url)
    backend = url.get_backend_name()
    if backend == "sqlite" and url.database and url.database != ":memory:":
        return SqliteDataVersionWaiter(url.database)
    if backend == "postgresql":
        return PostgresNotifyWaiter(database_url, channels)
    return PollingWaiter()
