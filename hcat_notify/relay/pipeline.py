"""The steps of one relay batch, driven by the relay's loop: read, write, commit (and,
while the sink stores the batch, read and write ahead the next), settle, record.

The :class:`Pipeline` keeps what the member has published (its buckets, each topic's
progress, the read cursor, the topics held back); the :class:`Sink` keeps what it has
written. Each step is called by the loop in turn; neither reaches into the other.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hcat_notify.model.topics import topic_bucket
from hcat_notify.relay.member import Membership, ranges
from hcat_notify.relay.progress import ProgressWriter
from hcat_notify.store.catalog import Catalog
from hcat_notify.store.group import BucketProgress, Ownership
from hcat_notify.store.records import OutboxEvent

__all__ = ["Batch", "Pipeline", "SendResult", "Sink"]

logger = logging.getLogger(__name__)

LOAD_WINDOW = 60.0
"""Seconds over which a member's events/s (per bucket, in all) are reported."""
PROGRESS_WAIT = 30.0
"""Seconds a batch waits, before its COMMIT, for the progress before it to be written."""


@dataclass
class SendResult:
    """What became of a batch in a sink: sent (receipted) events, and the topics held
    back."""

    sent: list[OutboxEvent] = field(default_factory=list)
    held: dict[str, int] = field(default_factory=dict)  # topic -> first event not sent
    refused_topics: set[str] = field(default_factory=set)  # the broker refuses the topic
    broken_at: int | None = None  # the connection broke before this event: not tried


class Sink(Protocol):
    """Where the relay's batches go (the broker: :class:`~hcat_notify.relay.sender.BatchSender`).

    One batch at a time: :meth:`write`, then :meth:`withdraw` or :meth:`commit` (then,
    optionally, :meth:`write_ahead` of the next batch) and :meth:`settle`.
    """

    def write(self, events: Sequence[OutboxEvent]) -> bool:
        """Write a batch, not committed; False when writing failed (settle tells)."""

    def withdraw(self) -> SendResult:
        """Give the written batch up: nothing of it is delivered."""

    def commit(self) -> bool:
        """Commit the written batch; True while its outcome is pending."""

    def write_ahead(self, events: Sequence[OutboxEvent]) -> None:
        """Write the batch expected next while the committed one is stored (may do
        nothing); it is kept only if the next :meth:`write` is given these events."""

    def settle(self) -> SendResult:
        """The outcome of the committed batch."""

    def close(self) -> None:
        """Drop the connection; the next write reconnects."""


@dataclass
class Batch:
    """What the read step found: the page of the owned buckets, and what of it to send."""

    events: list[OutboxEvent]
    fresh: list[OutboxEvent]
    full: bool  # a whole page: more is probably waiting


@dataclass
class _Blocked:
    retry_at: float  # monotonic
    first_event: int


@dataclass
class _Page:
    """A page read ahead: for these buckets, after this event id."""

    buckets: frozenset[int]
    after: int
    events: list[OutboxEvent] = field(default_factory=list)


class Pipeline:
    """What one member has published, and the steps that publish the next batch.

    Args:
        catalog: where the outbox is read.
        sink: where batches go.
        membership: the member's buckets as last read (to check them before a commit).
        bucket_count: the catalog's relay buckets.
        batch_size: events per batch.
        blocked_retry: seconds before a topic the broker refused is tried again.
        on_blocked: told of a topic blocked (topic, first event held back) or unblocked
            (topic, None).
    """

    def __init__(
        self,
        catalog: Catalog,
        sink: Sink,
        membership: Membership,
        *,
        bucket_count: int,
        batch_size: int,
        blocked_retry: float,
        on_blocked: Callable[[str, int | None], None],
    ) -> None:
        self._catalog = catalog
        self._sink = sink
        self._member = membership
        self._bucket_count = bucket_count
        self._batch_size = batch_size
        self._blocked_retry = blocked_retry
        self._on_blocked = on_blocked
        self.progress: ProgressWriter | None = None  # set while the member is in the group
        self.draining = False  # a refused topic is tried again at once, until parked
        self.owned: dict[int, Ownership] = {}
        # what is published, per topic: of the topics read since their bucket was gained
        # (an idle topic costs no memory, a hundred thousand of them no start-up read)
        self.topic_progress: dict[str, int] = {}
        self._unread: set[int] = set()  # owned buckets whose topics' progress is unread
        self.cursor = 0  # every event of the owned buckets up to here was handled
        self.idle_through = 0  # the cursor when every owned bucket's position was queued
        self._blocked: dict[str, _Blocked] = {}  # topics the broker refuses, retried later
        self._ahead: _Page | None = None  # read during the last COMMIT's wait
        self._recent: deque[tuple[float, int, int]] = deque()  # (time, bucket, events)
        self._lock = threading.Lock()

    # -- ownership ----------------------------------------------------------------------

    def own(self, owned: dict[int, Ownership]) -> None:
        """Take in the member's buckets as now read: forget what others published in the
        buckets that moved (a topic's progress is read again when its events are), and
        read again from where a gained bucket is published."""
        gained = set(owned) - set(self.owned)
        lost = set(self.owned) - set(owned)
        changed = gained | lost
        if changed:
            # What others published meanwhile is in the catalog, not in memory.
            for topic in [t for t in self.topic_progress if self.bucket_of(t) in changed]:
                del self.topic_progress[topic]
            self._unread = (self._unread - lost) | gained
        if gained:
            start = min(owned[bucket].published_through for bucket in gained)
            self.cursor = min(self.cursor, start) if self.owned else start
        self.owned = owned

    def bucket_of(self, topic: str) -> int:
        return topic_bucket(topic, self._bucket_count)

    # -- held back topics ---------------------------------------------------------------

    @property
    def blocked(self) -> bool:
        return bool(self._blocked)

    def next_retry(self) -> float | None:
        """When (monotonic) the soonest blocked topic is tried again."""
        return min((item.retry_at for item in self._blocked.values()), default=None)

    def blocked_from(self) -> dict[str, int]:
        """The first event held back of each blocked topic."""
        return {topic: item.first_event for topic, item in self._blocked.items()}

    def _unblocked(self) -> list[str]:
        now = time.monotonic()
        for topic, item in list(self._blocked.items()):
            if item.retry_at <= now:
                del self._blocked[topic]
                self._on_blocked(topic, None)
                # Its events lie behind the cursor: read them again.
                self.cursor = min(self.cursor, item.first_event - 1)
        return list(self._blocked)

    def _block(self, topic: str, first_event: int) -> None:
        retry = 0.0 if self.draining else self._blocked_retry
        self._blocked[topic] = _Blocked(time.monotonic() + retry, first_event)
        self._on_blocked(topic, first_event)
        logger.error(
            "relay topic refused topic=%s event=%d retry_in=%.0fs", topic, first_event, retry
        )

    # -- the steps ----------------------------------------------------------------------

    def read(self) -> Batch:
        """Read: the next events of the owned buckets after the cursor (the page read
        ahead during the last COMMIT, when it was read for these buckets from here)."""
        blocked = self._unblocked()
        buckets = frozenset(self.owned)
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead.buckets == buckets and ahead.after == self.cursor:
            events = ahead.events
        else:
            events = self._page(buckets, self.cursor)
        return Batch(events, self._fresh(events, blocked), len(events) == self._batch_size)

    def write(self, batch: Batch) -> bool:
        """Write: the batch goes to the sink, not committed; False if that failed."""
        return self._sink.write(batch.fresh)

    def committable(self, batch: Batch) -> bool:
        """Whether the written batch may be committed: once the progress of the batches
        before it is written far enough that, with this one, at most a batch size of
        published events is unrecorded (what a crash leaves the next owner to send
        again; single events at a trickle still share one write), and only if its
        buckets are still this member's, under the epochs it was read with (that write
        may just have found them fenced)."""
        room = max(0, self._batch_size - len(batch.fresh))
        progress = self.progress
        if progress is not None and not progress.unwritten_at_most(room, PROGRESS_WAIT):
            logger.warning("relay batch withdrawn: progress unwritten in %.0fs", PROGRESS_WAIT)
            return False
        now = self._member.owned()
        gone = sorted(
            bucket
            for bucket in {event.bucket for event in batch.fresh}
            if (owned := now.get(bucket)) is None or owned.epoch != self.owned[bucket].epoch
        )
        if gone:
            logger.info("relay batch withdrawn: buckets %s are not this member's", ranges(gone))
        return not gone

    def commit(self, batch: Batch) -> bool:
        """Commit: the sink stores the batch; True while its outcome is pending (then
        the loop reads and writes ahead)."""
        return self._sink.commit()

    def withdraw(self, batch: Batch) -> SendResult:
        return self._sink.withdraw()

    def read_ahead(self, batch: Batch) -> None:
        """Read and write ahead, while the sink stores a full ``batch``: the page after
        it, kept for :meth:`read`, and the batch it makes, written to the sink. An empty
        page or a failed read is not kept: the next batch reads again."""
        buckets = frozenset(self.owned)
        after = batch.events[-1].event_id
        try:
            page = self._page(buckets, after)
            if page:
                self._ahead = _Page(buckets, after, page)
                self._sink.write_ahead(self._fresh(page, set(self._blocked)))
        except Exception as exc:  # noqa: BLE001 - never fail the COMMIT's wait for it
            # The next batch makes the same read in the loop, where a failure is
            # handled (retried with back-off, or raised) like any other.
            logger.warning("relay read-ahead failed, reading again next batch: %r", exc)

    def settle(self, batch: Batch) -> SendResult:
        """Settle: the sink's outcome of the batch (what has a receipt is sent)."""
        return self._sink.settle()

    def record(
        self, batch: Batch, result: SendResult | None, *, idle_step: int
    ) -> list[OutboxEvent]:
        """Record: move each topic's progress, the cursor and the held back topics by
        the ``result`` of the batch (None: nothing of it was to send), and queue the
        progress write (of every owned bucket once the cursor moved ``idle_step``).
        Returns what was sent."""
        sent = result.sent if result is not None else []
        for event in sent:
            if event.event_id > self.topic_progress.get(event.topic, 0):
                self.topic_progress[event.topic] = event.event_id
        cursor = batch.events[-1].event_id
        if result is not None and result.broken_at is not None:
            cursor = result.broken_at - 1
        held = dict(result.held) if result is not None else {}
        for topic in result.refused_topics if result is not None else ():
            self._block(topic, held[topic])
        unsent = {**held, **self.blocked_from()}
        rejected = [first for topic, first in held.items() if topic not in self._blocked]
        if rejected:  # refused, not parked yet: try again from there next time
            cursor = min(cursor, min(rejected) - 1)
        self.cursor = max(self.cursor, cursor)
        self.record_progress(
            sent, unsent, every_bucket=self.cursor - self.idle_through >= idle_step
        )
        return sent

    def record_progress(
        self, sent: list[OutboxEvent], unsent: dict[str, int], *, every_bucket: bool = False
    ) -> None:
        """Queue the progress of this batch: per bucket, its topics and how far it is
        published through (short of its first event still held back).

        ``every_bucket``: also move the position of the owned buckets that published
        nothing (it is where a new owner starts reading; left behind, a restart would
        read the whole outbox since a quiet bucket's last event again).
        """
        if self.progress is None or not (sent or every_bucket):
            return
        now = time.monotonic()
        per_bucket: dict[int, dict[str, int]] = {}
        counts: dict[int, int] = {}
        for event in sent:
            topics = per_bucket.setdefault(event.bucket, {})
            topics[event.topic] = max(event.event_id, topics.get(event.topic, 0))
            counts[event.bucket] = counts.get(event.bucket, 0) + 1
        held_by_bucket: dict[int, int] = {}
        for topic, first in unsent.items():
            bucket = self.bucket_of(topic)
            held_by_bucket[bucket] = min(first - 1, held_by_bucket.get(bucket, first - 1))
        updates = {}
        for bucket in self.owned if every_bucket else per_bucket:
            ownership = self.owned.get(bucket)
            if ownership is None:
                continue
            through = min(self.cursor, held_by_bucket.get(bucket, self.cursor))
            updates[bucket] = BucketProgress(ownership.epoch, through, per_bucket.get(bucket, {}))
        if every_bucket:
            self.idle_through = self.cursor
        self.progress.add(updates, events=len(sent))
        with self._lock:
            for bucket, count in counts.items():
                self._recent.append((now, bucket, count))

    # -- what the member reports --------------------------------------------------------

    def loads(self) -> dict[int, float]:
        """Events/s per bucket over the last :data:`LOAD_WINDOW` (any thread)."""
        now = time.monotonic()
        with self._lock:
            while self._recent and now - self._recent[0][0] > LOAD_WINDOW:
                self._recent.popleft()
            loads: dict[int, float] = {}
            for _, bucket, count in self._recent:
                loads[bucket] = loads.get(bucket, 0.0) + count / LOAD_WINDOW
        return loads

    def topics_in(self, buckets: Collection[int]) -> int:
        """How many topics with known progress lie in ``buckets`` (any thread)."""
        return sum(1 for t in list(self.topic_progress) if self.bucket_of(t) in buckets)

    # -- reading ------------------------------------------------------------------------

    def _fresh(self, events: list[OutboxEvent], blocked: Collection[str]) -> list[OutboxEvent]:
        """What of ``events`` to send: not published yet, not held back, still owned."""
        progress = self.topic_progress
        unread = {e.topic for e in events if e.bucket in self._unread and e.topic not in progress}
        if unread:  # their progress as the catalog has it (0: never published)
            found = self._catalog.group.progress_of(unread)
            progress.update({topic: found.get(topic, 0) for topic in unread})
        return [
            event
            for event in events
            if event.event_id > progress.get(event.topic, 0)
            and event.topic not in blocked
            and event.bucket in self.owned
        ]

    def _page(self, buckets: frozenset[int], after: int) -> list[OutboxEvent]:
        return self._catalog.outbox.events_in_buckets(
            list(buckets), after_event_id=after, limit=self._batch_size
        )
