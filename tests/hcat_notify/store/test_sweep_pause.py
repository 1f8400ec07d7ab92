"""A sweep lets a waiting writer in between two of its batches (SQLite has one writer at
a time: a sweep that took the lock again at once kept writers waiting batch after
batch, issue 31)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hcat_notify.config import load_settings
from hcat_notify.store import Catalog, retention

BATCHES = 20


class _Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_a_writer_waiting_during_a_sweep_gets_the_lock_at_the_next_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # SQLite only: PostgreSQL's writers do not wait for a sweep (it locks the rows it
    # deletes, which no writer touches)
    settings = load_settings(home=tmp_path / "home", db_url=f"sqlite:///{tmp_path}/c.db")
    clock = _Clock()
    with Catalog.open(settings) as opened:
        catalog = Catalog(opened._engine, settings, clock=clock)
        catalog.create_table(
            "web.clicks",
            location="/data/clicks",
            partition_keys=["ds"],
            retention=timedelta(days=1),
        )
        for n in range(BATCHES * 10):
            catalog.mark_set_done("web.clicks", {"ds": str(n)})
        clock.now += timedelta(days=2)
        batches: list[int] = [0]
        asked = threading.Event()
        written: list[int] = []

        def write() -> None:
            asked.set()
            catalog.mark_set_done("web.clicks", {"ds": "during"})
            written.append(batches[0])

        writer = threading.Thread(target=write)
        real = retention.delete_expired_on_driver  # SQLite's batches

        def counted(cursor, dialect, batch_size, expired_at):
            deleted = real(cursor, dialect, batch_size, expired_at)
            batches[0] += 1
            if batches[0] == 3:  # the writer asks for the lock while this batch holds it
                writer.start()
                assert asked.wait(10)
            return deleted

        monkeypatch.setattr(retention, "delete_expired_on_driver", counted)
        assert catalog.dones.sweep_expired(batch_size=10) == BATCHES * 10
        writer.join(10)
    assert written, "the writer never wrote"
    assert written[0] <= 4, f"the writer waited until batch {written[0]} of {BATCHES}"
