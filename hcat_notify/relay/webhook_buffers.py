"""The events a member's webhook pass read, kept per lane (webhook, topic) so that the
job delivering the lane sends them without reading the outbox again (docs/webhooks.md).

A lane's buffer holds every wanted event of its topic after its ``start`` (the position
the page that opened it was read from) up to where the pass has read, in id order: a job
may use it while the lane's position is at or after ``start``. The buffers hold at most
:data:`BUFFER_CAP` events; a lane that does not fit reads its own (and buffers again from a
later page). The caller serialises access (the pass's lock).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from operator import attrgetter

from hcat_notify.store.records import OutboxEvent

__all__ = ["BUFFER_CAP", "Held", "LaneBuffers"]

BUFFER_CAP = 20_000
"""Events kept for all lanes together (the same event kept for two webhooks counts twice)."""

LaneKey = tuple[int, str]
_EVENT_ID = attrgetter("event_id")
Held = tuple[list[OutboxEvent], int]
"""A lane's next events from its buffer, and the position their delivery reaches."""


@dataclass
class _Buffer:
    start: int
    events: list[OutboxEvent] = field(default_factory=list)


class LaneBuffers:
    """The lanes' buffers (not thread-safe: the caller holds its lock)."""

    def __init__(self, cap: int = BUFFER_CAP) -> None:
        self._cap = cap
        self._buffers: dict[LaneKey, _Buffer] = {}
        self._overflowed: dict[LaneKey, int] = {}  # lane -> the page it was dropped in
        self.size = 0  # events held
        self.read_through = 0
        """Every event up to here (after a buffer's ``start``) has been offered to
        :meth:`keep`: the pass's read position since the buffers were last cleared."""

    def keep(self, key: LaneKey, start: int, event: OutboxEvent) -> None:
        """Add an event read from a page that started after ``start``."""
        buffer = self._buffers.get(key)
        if buffer is None:
            # Not again in the page it was dropped in: its earlier events of the page
            # went with the buffer, and a buffer from the page's start would lack them.
            if self.size >= self._cap or self._overflowed.get(key) == start:
                return
            buffer = self._buffers[key] = _Buffer(start)
        elif self.size >= self._cap:  # full: this lane reads its events itself
            self.drop(key)
            self._overflowed[key] = start
            return
        buffer.events.append(event)
        self.size += 1

    def trim(self, key: LaneKey, cursor: int) -> None:
        """Forget the lane's events up to ``cursor`` (delivered)."""
        buffer = self._buffers.get(key)
        if buffer is None:
            return
        events = buffer.events
        done = bisect_right(events, cursor, key=_EVENT_ID)
        if done:
            del events[:done]
            self.size -= done

    def drop(self, key: LaneKey) -> None:
        buffer = self._buffers.pop(key, None)
        if buffer is not None:
            self.size -= len(buffer.events)

    def clear(self) -> None:
        self._buffers.clear()
        self._overflowed.clear()
        self.size = 0
        self.read_through = 0

    def batch_of(self, key: LaneKey, cursor: int, head: int, limit: int) -> Held | None:
        """The lane's next events after ``cursor``, at most ``limit``, and the position a
        delivery of them reaches: the last of them when more follow, else as far as the
        buffer is known to be whole (``head``, or :attr:`read_through` when the pass has
        not read that far again since the buffers were cleared: a lane's head may lie
        beyond what its buffer holds yet). None when the buffer does not reach back to
        ``cursor`` or holds nothing after it: the job reads the outbox itself."""
        buffer = self._buffers.get(key)
        if buffer is None or buffer.start > cursor:
            return None
        whole = min(head, self.read_through)
        events = buffer.events  # in id order: the next after cursor, up to whole
        after = bisect_right(events, cursor, key=_EVENT_ID)
        upto = bisect_right(events, whole, lo=after, key=_EVENT_ID)
        found = events[after : min(upto, after + max(limit, 0) + 1)]
        if len(found) > limit:
            return found[:limit], found[limit - 1].event_id
        if whole <= cursor:
            return None
        return found, whole
