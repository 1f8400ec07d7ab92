"""send_mark_set_done's cached catalogs."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from hcat_notify import writer
from hcat_notify.config import load_settings
from hcat_notify.store import Catalog


def test_concurrent_first_calls_share_one_catalog_and_close_the_spare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Two threads' first calls both open a catalog (opening is slow); one is kept for
    both, the other closed at once rather than left for the garbage collector (whose
    unclosed PostgreSQL connections then warn)."""
    settings = load_settings(home=tmp_path / "home")
    with Catalog.open(settings) as first:
        first.create_table("web.t", location="/t", partition_keys=["ds"])
        created = first.last_event_id()  # the table's CREATE_TABLE
    opened: list[Catalog] = []
    closed: list[Catalog] = []
    real_open, real_close = Catalog.open, Catalog.close

    def slow_open(*args, **kwargs):
        catalog = real_open(*args, **kwargs)
        opened.append(catalog)
        time.sleep(0.3)  # both threads get here before either stores its catalog
        return catalog

    def tracked_close(self):
        closed.append(self)
        real_close(self)

    monkeypatch.setattr(Catalog, "open", staticmethod(slow_open))
    monkeypatch.setattr(Catalog, "close", tracked_close)
    ids: list[int] = []
    threads = [
        threading.Thread(
            target=lambda n=n: ids.append(
                writer.send_mark_set_done("web.t", {"ds": str(n)}, settings=settings)
            )
        )
        for n in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(ids) == [created + 1, created + 2]
    assert len(opened) == 2
    (spare,) = closed
    assert spare in opened
    writer.close_catalogs()
    assert len(closed) == 2  # the kept one, at close_catalogs()
