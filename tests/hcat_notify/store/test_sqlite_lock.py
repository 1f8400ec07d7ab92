"""SQLite writers take the lock with a fine-grained wait (``engine.begin_immediate``)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from hcat_notify.store import engine
from hcat_notify.store.engine import SQLITE_BUSY_TIMEOUT_MS, begin_immediate


def _connect(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA journal_mode = WAL")
    return connection


def test_a_writer_waits_for_the_lock_and_gets_it_once_released(tmp_path: Path):
    path = tmp_path / "lock.db"
    holder, waiter = _connect(path), _connect(path)
    holder.execute("CREATE TABLE t (v INTEGER)")
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO t VALUES (1)")
    got = threading.Event()

    def write() -> None:
        begin_immediate(waiter)
        got.set()
        waiter.execute("INSERT INTO t VALUES (2)")
        waiter.execute("COMMIT")

    thread = threading.Thread(target=write)
    thread.start()
    assert not got.wait(0.3)  # the lock is held: the second writer waits
    holder.execute("COMMIT")
    thread.join(10)
    assert got.is_set()
    assert [row[0] for row in holder.execute("SELECT v FROM t ORDER BY v")] == [1, 2]
    # The connection's own busy timeout is back for everything else.
    assert waiter.execute("PRAGMA busy_timeout").fetchone()[0] == SQLITE_BUSY_TIMEOUT_MS


def test_a_lock_held_past_the_busy_timeout_is_the_usual_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(engine, "SQLITE_BUSY_TIMEOUT_MS", 50)
    path = tmp_path / "lock.db"
    holder, waiter = _connect(path), _connect(path)
    holder.execute("CREATE TABLE t (v INTEGER)")
    holder.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        begin_immediate(waiter)
    assert not waiter.in_transaction
    assert waiter.execute("PRAGMA busy_timeout").fetchone()[0] == 50
    holder.execute("ROLLBACK")
    begin_immediate(waiter)
    assert waiter.in_transaction
    waiter.execute("ROLLBACK")
