"""The relay's outbox reads: each page, and the next one while the current is sent.

While a batch is on its way to the broker (frames written, the COMMIT's receipt awaited)
the next page of the same buckets, after the batch's last event, is read in a thread of
its own. It is used only when the relay asks for exactly that page (same buckets, same
position); anything else (ownership changed, a refused topic moved the position back, a
broken batch) reads afresh and the prefetched page is dropped. A page read earlier is a
prefix of the one a later read would return (events become visible in id order), so
reading ahead skips nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from hcat_notify.store.catalog import Catalog
from hcat_notify.store.records import OutboxEvent

__all__ = ["OutboxReader"]

_Key = tuple[tuple[int, ...], int]


class OutboxReader:
    """Reads pages of ``limit`` events of a member's buckets, one page ahead.

    Args:
        catalog: the catalog (its pool serves the reading thread too).
        limit: events per page (the relay's batch size).
    """

    def __init__(self, catalog: Catalog, limit: int) -> None:
        self._catalog = catalog
        self._limit = limit
        self._pool: ThreadPoolExecutor | None = None
        self._ahead: tuple[_Key, Future[list[OutboxEvent]]] | None = None
        self.prefetched = 0  # pages served from a read ahead (for tests and stats)

    def read(self, buckets: Sequence[int], after_event_id: int) -> list[OutboxEvent]:
        """The events of ``buckets`` after ``after_event_id``, not parked, in id order;
        starts reading the page after them when this one is full.

        Raises:
            HcatNotifyError: the catalog could not be read (this read's or the read
                ahead's failure).
        """
        key: _Key = (tuple(sorted(buckets)), after_event_id)
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == key:
            events = ahead[1].result()
            self.prefetched += 1
        else:
            if ahead is not None:
                ahead[1].cancel()  # if it already runs, its page is simply not used
            events = self._fetch(key)
        if len(events) == self._limit:
            following: _Key = (key[0], events[-1].event_id)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="hcat-relay-read-ahead")
            self._ahead = (following, self._pool.submit(self._fetch, following))
        return events

    def _fetch(self, key: _Key) -> list[OutboxEvent]:
        buckets, after = key
        return self._catalog.events_in_buckets(
            list(buckets), after_event_id=after, limit=self._limit
        )

    def discard(self) -> None:
        """Drop the page read ahead (the relay's position or buckets changed)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead[1].cancel()

    def close(self) -> None:
        """Drop the read ahead and wait for its thread (before the catalog closes)."""
        self.discard()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
