"""The consumer library: subscribe first, then catch up, then stream; no gaps, no repeats.

Start-up follows the HCatalog design: SUBSCRIBE to the tables' topics and wait for the
receipts (only then is a subscription live), then read what was committed before —
unexpired MARK_SET_DONE messages from the retention table or, given a cursor, every event
of the tables after its topic's watermark — then stream live messages. Anything
committed after the catch-up read is published after the subscription began, so it
arrives live; anything in both is delivered once, because every message carries
``HCAT_EVENT_ID`` and the consumer drops ids at or below its topic's watermark or
already seen.

A durable subscriber (``subscriber="name"``) keeps its watermarks in the catalog, moved
after each handled notification, so a restarted consumer resumes exactly there. After a
dropped connection the consumer reconnects, subscribes again and catches up from its
watermarks.

The parts: :mod:`~hcat_notify.consumer.reader` (where the catalog is read:
:func:`open_reader`), :mod:`~hcat_notify.consumer.catchup` (the paged catch-up),
:mod:`~hcat_notify.consumer.watermarks` (watermarks and dedupe),
:mod:`~hcat_notify.consumer.durable` (a durable subscriber's claim and heartbeat),
:mod:`~hcat_notify.consumer.topics` (the broker subscriptions),
:mod:`~hcat_notify.consumer.matching` (whether a notification satisfies a wait) and
:mod:`~hcat_notify.consumer.consumer` (:class:`NotificationConsumer`, driving them).
"""

from __future__ import annotations

from hcat_notify.consumer.catchup import CATCH_UP_PAGE
from hcat_notify.consumer.consumer import NotificationConsumer
from hcat_notify.consumer.matching import Condition, Target, matches
from hcat_notify.consumer.reader import CatalogReader, SetsReader, open_reader, sets_of
from hcat_notify.consumer.watermarks import DEDUPE_WINDOW
from hcat_notify.notification import Notification, Source

__all__ = [
    "CATCH_UP_PAGE",
    "DEDUPE_WINDOW",
    "CatalogReader",
    "Condition",
    "Notification",
    "NotificationConsumer",
    "SetsReader",
    "Source",
    "Target",
    "matches",
    "open_reader",
    "sets_of",
]
