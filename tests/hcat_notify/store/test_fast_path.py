"""The hot reads' own SQLite connections: fresh reads, one per thread, closed with the
catalog."""

from __future__ import annotations

import threading
from pathlib import Path

from hcat_notify.config import load_settings
from hcat_notify.store import Catalog
from hcat_notify.store.engine import SQLITE_CACHE_KIB, open_engine


def _catalog(tmp_path: Path) -> Catalog:
    settings = load_settings(home=tmp_path, db_url=f"sqlite:///{tmp_path / 'catalog.db'}")
    catalog = Catalog.open(settings)
    catalog.create_table("web.clicks", location=str(tmp_path / "c"), partition_keys=["ds", "r"])
    return catalog


def test_a_check_sees_a_done_committed_after_its_connection_was_opened(tmp_path: Path):
    catalog = _catalog(tmp_path)
    other = Catalog.open(load_settings(home=tmp_path, db_url=catalog.url))
    try:
        assert catalog.find_covering_done("web.clicks", {"ds": "1", "r": "us"}) is None
        event_id = other.mark_set_done("web.clicks", {"ds": "1"})  # another connection
        found = catalog.find_covering_done("web.clicks", {"ds": "1", "r": "us"})
        assert found is not None
        assert found.event_id == event_id
        assert str(found.spec) == "ds=1"
    finally:
        other.close()
        catalog.close()


def test_closing_the_catalog_closes_every_thread_s_reading_connection(tmp_path: Path):
    """SQLite removes the write-ahead log when its last connection closes: a reading
    connection left open would keep it."""
    catalog = _catalog(tmp_path)
    catalog.mark_set_done("web.clicks", {"ds": "1"})
    found: list[object] = []

    def check() -> None:
        found.append(catalog.find_covering_done("web.clicks", {"ds": "1", "r": "eu"}))

    threads = [threading.Thread(target=check) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    check()
    assert len(found) == 4
    assert all(done is not None for done in found)
    wal = tmp_path / "catalog.db-wal"
    assert wal.exists()
    catalog.close()
    assert not wal.exists()


def test_a_closed_catalog_reads_again_on_new_connections(tmp_path: Path):
    """As the pool of a disposed engine does."""
    catalog = _catalog(tmp_path)
    event_id = catalog.mark_set_done("web.clicks", {"ds": "1"})
    assert catalog.find_covering_done("web.clicks", {"ds": "1"}) is not None
    catalog.close()
    again = catalog.find_covering_done("web.clicks", {"ds": "1", "r": "x"})
    catalog.close()
    assert again is not None
    assert again.event_id == event_id
    assert not (tmp_path / "catalog.db-wal").exists()


def test_every_sqlite_connection_keeps_the_interior_pages_of_a_large_catalog(tmp_path: Path):
    """SQLite's default cache (2,000 KiB) is smaller than the interior pages of the
    retention table and index at 10^7 dones (about 8 MB): lookups then read those pages
    from the OS again each time (benchmarks/scale.py). Pooled and reading connections
    alike come from the engine's connect hook."""
    catalog = _catalog(tmp_path)
    engine = open_engine(catalog.url)
    try:
        with engine.connect() as connection:
            kib = connection.exec_driver_sql("PRAGMA cache_size").scalar_one()
        reader = engine.raw_connection()
        try:
            reading = reader.driver_connection.execute("PRAGMA cache_size").fetchone()[0]  # type: ignore[union-attr]
        finally:
            reader.close()
    finally:
        engine.dispose()
        catalog.close()
    assert kib == reading == -SQLITE_CACHE_KIB
    assert SQLITE_CACHE_KIB >= 16_000
