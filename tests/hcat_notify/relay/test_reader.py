"""OutboxReader: the next page is read while the current one is sent, and used only when
it is exactly the page asked for; on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from hcat_notify.relay.reader import OutboxReader
from hcat_notify.store import Catalog

ALL = list(range(256))


@contextmanager
def reading(catalog: Catalog, limit: int) -> Iterator[OutboxReader]:
    catalog.create_table("web.clicks", location="/c", partition_keys=["ds"])
    reader = OutboxReader(catalog, limit)
    try:
        yield reader
    finally:
        reader.close()


def _dones(catalog: Catalog, table: str, count: int, start: int = 0) -> list[int]:
    return [catalog.mark_set_done(table, {"ds": str(n)}) for n in range(start, start + count)]


def test_pages_read_ahead_are_the_pages_a_direct_read_returns(catalog: Catalog):
    with reading(catalog, 3) as reader:
        ids = _dones(catalog, "web.clicks", 7)
        first = reader.read(ALL, ids[0] - 1)
        second = reader.read(ALL, first[-1].event_id)
        assert reader.prefetched == 1
        direct = catalog.events_in_buckets(ALL, after_event_id=first[-1].event_id, limit=3)
        assert second == direct
        third = reader.read(ALL, second[-1].event_id)
        assert reader.prefetched == 2
        assert [e.event_id for e in first + second + third] == ids[:7]
        assert len(third) == 1  # a short page: nothing is read ahead of it
        assert reader.read(ALL, third[-1].event_id) == []
        assert reader.prefetched == 2


def test_a_page_read_ahead_is_dropped_when_the_position_or_buckets_change(catalog: Catalog):
    with reading(catalog, 2) as reader:
        ids = _dones(catalog, "web.clicks", 6)
        first = reader.read(ALL, ids[0] - 1)
        bucket = first[0].bucket  # every event of web.clicks is in its topic's bucket
        # the relay moved back (a refused topic is retried): read afresh from there
        again = reader.read(ALL, ids[0] - 1)
        assert reader.prefetched == 0
        assert again == first
        # its buckets changed: the same position, other buckets, read afresh
        others = [b for b in ALL if b != bucket]
        assert reader.read(others, again[-1].event_id) == []
        assert reader.prefetched == 0


def test_events_written_after_a_read_ahead_are_not_skipped(catalog: Catalog):
    with reading(catalog, 2) as reader:
        ids = _dones(catalog, "web.clicks", 4)
        seen = reader.read(ALL, ids[0] - 1)
        later = _dones(catalog, "web.clicks", 3, start=100)  # while the page ahead is read
        while True:
            page = reader.read(ALL, seen[-1].event_id)
            if not page:
                break
            seen += page
        assert [e.event_id for e in seen] == ids + later
