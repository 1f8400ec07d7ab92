"""Where a consumer stands: per topic, the highest event id delivered, and the recent ids
it delivered, so that an event that arrives twice (a relay's resent batch, the overlap
of catch-up and live delivery) is handed out once."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from hcat_notify.model.cursor import Cursor

__all__ = ["DEDUPE_WINDOW", "Watermarks"]

logger = logging.getLogger(__name__)

# Delivered event ids remembered for dropping duplicates. Duplicates come from a relay
# resending a batch whose receipt it missed, and from the overlap of catch-up and live
# delivery: both are recent, so a bounded window is enough.
DEDUPE_WINDOW = 200_000


class Watermarks:
    """The delivered watermarks of a consumer of ``tables``, starting at ``start``.

    ``floor`` is set when the consumer started without a past (no cursor): what existed
    then. It was owed only the retained dones at or below it, so its cursor claims every
    topic up to the floor at least, whatever its watermark below it; while
    ``retained_pending`` (the retained dones being handed out, in id order), up to the
    last one handed (docs/operations.md, "The outbox's retention").
    """

    def __init__(self, start: Cursor, tables: Iterable[str]) -> None:
        self._followed = frozenset(tables)
        self._marks: dict[str, int] = dict(start.watermarks)  # delivered, per topic
        self._default = start.default  # the given cursor's watermark for other topics
        self.floor: int | None = None
        self.retained_pending = False  # handing out the retained dones (up to the floor)
        self._seen: OrderedDict[int, None] = OrderedDict()

    @property
    def cursor(self) -> Cursor:
        """Per topic, the highest event id delivered (at least the floor, if set; while
        the retained dones are handed out, in id order, the last one handed)."""
        return Cursor.standing(
            self._marks, self.floor, retained_pending=self.retained_pending, default=self._default
        )

    def after_floor(self, floor: int) -> Cursor:
        """Every topic at ``floor`` at least (the retained dones up to it handed out)."""
        return Cursor.standing(self._marks, floor, retained_pending=False)

    @property
    def marks(self) -> dict[str, int]:
        """Per topic, the highest event id delivered (no floor applied)."""
        return dict(self._marks)

    def resume(self, stored: Mapping[str, int], floor: int | None, pending: bool) -> None:
        """Stand where a durable subscriber's stored watermarks and floor say (``pending``:
        the retained dones up to the floor not all handed out yet)."""
        self._marks = dict(stored)
        self.floor = floor
        self.retained_pending = pending

    def accept(self, table: str, topic: str, event_id: int) -> bool:
        """Whether an event is new (and now delivered): of a followed table, above its
        topic's watermark, not seen before."""
        if table not in self._followed:
            return False  # a shared topic's other tables, if no selector filtered them
        mark = self._marks.get(topic, self._default)
        if mark is not None and event_id <= mark:
            return False  # delivered before (this run, or before the cursor)
        seen = self._seen
        if event_id in seen:
            logger.debug("consumer dropped duplicate event=%d", event_id)
            return False
        seen[event_id] = None
        if len(seen) > DEDUPE_WINDOW:
            seen.popitem(last=False)
        self._marks[topic] = event_id
        return True
