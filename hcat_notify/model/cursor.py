"""Where a consumer stands: the highest event id it handled, per topic.

Event ids increase per topic on the wire, not globally: a relay that sets a refused topic
aside, or two relays owning different topics, publish other topics' later events first.
A single integer cursor would then skip the delayed event after a restart; a watermark
per topic does not.

String form (``--cursor``, ``watch --json``, the HTTP API): ``topic:id`` pairs joined by
commas, sorted by topic, e.g. ``hcat.web.clicks:120,hcat.web.views:98``. A pair ``*:N``
gives the watermark of every topic not listed; a bare integer ``N`` (the old cursor)
means ``*:N``. The empty string is the empty cursor.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from hcat_notify.errors import InvalidInputError

__all__ = ["MAX_EVENT_ID", "Cursor"]

MAX_EVENT_ID = 2**63 - 1
"""The largest event id the catalog can hold (a signed 64-bit column)."""

_TOPIC = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")
_ANY = "*"


def _event_id(text: str, where: str) -> int:
    if not text.isdigit():
        raise InvalidInputError(f"malformed cursor {where}: {text!r} is not an event id")
    value = int(text)
    if value > MAX_EVENT_ID:
        raise InvalidInputError(f"malformed cursor {where}: event id {text} is too large")
    return value


@dataclass(frozen=True)
class Cursor:
    """Watermarks per topic: events at or below a topic's watermark were handled.

    Attributes:
        watermarks: topic -> highest event id handled on it.
        default: the watermark of topics not in ``watermarks`` (None: nothing handled).
    """

    watermarks: Mapping[str, int] = field(default_factory=dict)
    default: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "watermarks", MappingProxyType(dict(self.watermarks)))

    @classmethod
    def parse(cls, text: str | int | None) -> Cursor:
        """Read the string form (or an old integer cursor).

        Raises:
            InvalidInputError: the text is not a cursor; the message says where.
        """
        if text is None:
            return cls()
        if isinstance(text, int) and not isinstance(text, bool):
            if not 0 <= text <= MAX_EVENT_ID:
                raise InvalidInputError(f"cursor {text} is not an event id")
            return cls(default=text)
        if not isinstance(text, str):
            raise InvalidInputError(f"a cursor is a string, not {type(text).__name__}")
        stripped = text.strip()
        if not stripped:
            return cls()
        if stripped.isdigit():
            return cls(default=_event_id(stripped, "value"))
        marks: dict[str, int] = {}
        default: int | None = None
        for part in stripped.split(","):
            topic, sep, value = part.strip().rpartition(":")
            if not sep or not topic:
                raise InvalidInputError(
                    f"malformed cursor part {part!r}: "
                    "expected TOPIC:EVENT_ID, e.g. hcat.web.clicks:120"
                )
            number = _event_id(value, f"part {part!r}")
            if topic == _ANY:
                default = number
                continue
            if not _TOPIC.fullmatch(topic):
                raise InvalidInputError(f"malformed cursor part {part!r}: {topic!r} is no topic")
            if topic in marks:
                raise InvalidInputError(f"malformed cursor: topic {topic} is given twice")
            marks[topic] = number
        return cls(marks, default)

    def __str__(self) -> str:
        parts = [f"{topic}:{self.watermarks[topic]}" for topic in sorted(self.watermarks)]
        if self.default is not None:
            parts.insert(0, f"{_ANY}:{self.default}")
        return ",".join(parts)

    def __bool__(self) -> bool:
        return bool(self.watermarks) or self.default is not None

    def get(self, topic: str) -> int | None:
        """The watermark of ``topic`` (None: nothing handled on it)."""
        return self.watermarks.get(topic, self.default)

    def handled(self, topic: str, event_id: int) -> bool:
        """Whether ``event_id`` on ``topic`` is at or below the topic's watermark."""
        mark = self.get(topic)
        return mark is not None and event_id <= mark

    @classmethod
    def standing(
        cls,
        marks: Mapping[str, int],
        floor: int | None,
        *,
        retained_pending: bool,
        default: int | None = None,
    ) -> Cursor:
        """Where a reader with per-topic ``marks`` stands. ``floor``: it started without a
        cursor, owed only the retained dones at or below ``floor``, so every topic stands
        at the floor at least; while ``retained_pending`` (those dones handed out in id
        order) at the last one handed, for every topic. Without a floor: ``marks`` and
        ``default`` as they are."""
        if floor is None:
            return cls(marks, default)
        if retained_pending:
            return cls(default=max(marks.values())) if marks else cls()
        return cls({topic: max(mark, floor) for topic, mark in marks.items()}, floor)

    def advanced(self, topic: str, event_id: int) -> Cursor:
        """This cursor with ``topic``'s watermark raised to ``event_id`` (never lowered)."""
        if self.handled(topic, event_id):
            return self
        return Cursor({**self.watermarks, topic: event_id}, self.default)
