"""A consumer's catch-up: what was committed before its subscriptions went live, read
from the catalog in pages as it is handed out, so the first notification comes at once
and memory stays bounded however much was retained."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

from hcat_notify.consumer.reader import CatalogReader
from hcat_notify.model.cursor import Cursor
from hcat_notify.model.names import TableName
from hcat_notify.store.records import OutboxEvent

__all__ = ["CATCH_UP_PAGE", "CatchUp"]

logger = logging.getLogger(__name__)

CATCH_UP_PAGE = 5_000


class CatchUp:
    """The catch-up of ``tables`` through ``reader``, one page at a time."""

    def __init__(self, reader: CatalogReader, tables: Sequence[TableName]) -> None:
        self._reader = reader
        self._tables = list(tables)
        self._page: Iterator[OutboxEvent] = iter(())  # the page being handed out
        self._cursor: Cursor | None = None
        self._after: int | None = None  # None: no further page to read
        self._through: int | None = None  # the retained dones' last id (None: no limit)
        self._then: Cursor | None = None  # read after the retained dones

    @property
    def page(self) -> Iterator[OutboxEvent]:
        """The events of the current page not handed out yet."""
        return self._page

    def begin(
        self, cursor: Cursor | None, *, through: int | None = None, then: Cursor | None = None
    ) -> None:
        """Start again from ``cursor``'s watermarks (None: the retained dones, those at or
        below ``through`` if given, then the events after ``then`` if given), dropping
        whatever of an earlier catch-up was not handed out, and read the first page."""
        self._page = iter(())
        self._cursor = cursor
        self._through = through if cursor is None else None
        self._then = then if cursor is None else None
        self._after = 0
        logger.info("consumer catch-up after=%s", cursor or f"retained dones to {through}")
        self.next_page()

    def next_page(self) -> bool:
        """Read the next page; False when the catch-up had no more to read."""
        if self._after is None:
            if self._then is None:
                return False
            logger.info("consumer catch-up after=%s", self._then)
            self._cursor, self._then, self._through, self._after = self._then, None, None, 0
        events = self._reader.catch_up(
            self._tables, cursor=self._cursor, page_after=self._after, limit=CATCH_UP_PAGE
        )
        self._after = None if len(events) < CATCH_UP_PAGE else events[-1].event_id
        through = self._through
        if through is not None and events and events[-1].event_id > through:
            # Later ones come live (or after ``then``), in order with their topic's events.
            events = [event for event in events if event.event_id <= through]
            self._after = None
        self._page = iter(events)
        return True
