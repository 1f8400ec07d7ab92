"""Recording what a relay published: per topic, per bucket, fenced by epoch, off the
publish path.

After each receipt the publisher hands over what it sent; a background thread merges
everything pending into one write (O(topics) rows, not one per event) and reports the
buckets whose write was fenced (owned by another member now). A write waits up to
``linger`` for more to merge, unless a batch's worth of events is pending: at a trickle
of single events that turns hundreds of small write transactions a second into a few,
which on SQLite (one writer at a time) would otherwise hold up the writers adding events.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from hcat_notify.errors import HcatNotifyError
from hcat_notify.store.catalog import Catalog
from hcat_notify.store.group import BucketProgress

__all__ = ["ProgressWriter"]

logger = logging.getLogger(__name__)


def _merge(into: dict[int, BucketProgress], updates: Mapping[int, BucketProgress]) -> None:
    """Fold ``updates`` into ``into``: the highest id per topic; a newer epoch wins."""
    for bucket, update in updates.items():
        queued = into.get(bucket)
        if queued is None or update.epoch > queued.epoch:
            into[bucket] = update
            continue
        if update.epoch < queued.epoch:
            continue
        topics = dict(queued.topics)
        for topic, last in update.topics.items():
            topics[topic] = max(last, topics.get(topic, 0))
        into[bucket] = BucketProgress(
            update.epoch, max(queued.published_through, update.published_through), topics
        )


class ProgressWriter:
    """Writes progress in the background; :meth:`flush` waits until it is written.

    Args:
        catalog: where progress goes.
        member_id: the member whose ownership fences the writes.
        on_lost: called with the buckets a write found owned by someone else.
        linger: seconds a write waits for more progress to merge.
        max_events: write at once when this many published events are pending.
    """

    def __init__(
        self,
        catalog: Catalog,
        member_id: str,
        on_lost: Callable[[Mapping[int, int]], None],
        *,
        linger: float = 0.05,
        max_events: int = 500,
    ) -> None:
        self._catalog = catalog
        self._member_id = member_id
        self._on_lost = on_lost
        self._linger = linger
        self._max_events = max_events
        self._pending: dict[int, BucketProgress] = {}
        self._pending_events = 0
        self._writing_events = 0  # published events the write under way records
        self._pending_since = 0.0  # monotonic time of the oldest pending progress
        self._flushing = 0  # callers waiting in flush(): write without lingering
        self._lock = threading.Condition()
        self._writing = False
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="hcat-relay-progress", daemon=True)
        self._thread.start()

    def add(self, updates: Mapping[int, BucketProgress], events: int = 1) -> None:
        """Queue progress of some buckets (merged with what is queued), which covers
        ``events`` published events."""
        with self._lock:
            if not self._pending:
                self._pending_since = time.monotonic()
            _merge(self._pending, updates)
            self._pending_events += events
            self._lock.notify_all()

    def flush(self, timeout: float = 60.0) -> bool:
        """Wait until everything queued is written; False at the timeout."""
        return self._wait(lambda: not (self._pending or self._writing), timeout)

    def unwritten_at_most(self, events: int, timeout: float) -> bool:
        """Wait until the progress of at most ``events`` published events is unwritten
        (what is queued is written at once if need be); False at the timeout."""
        return self._wait(lambda: self._pending_events + self._writing_events <= events, timeout)

    def _wait(self, done: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            if done():
                return True
            self._flushing += 1
            self._lock.notify_all()
            try:
                while not done():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._lock.wait(remaining)
            finally:
                self._flushing -= 1
        return True

    def close(self) -> None:
        """Write what is queued, then stop the thread."""
        self.flush()
        with self._lock:
            self._stop = True
            self._lock.notify_all()
        self._thread.join(30)

    def _run(self) -> None:
        delay = 0.05
        while True:
            with self._lock:
                while not self._stop:
                    if self._pending:
                        due = self._pending_since + self._linger - time.monotonic()
                        if due <= 0 or self._flushing or self._pending_events >= self._max_events:
                            break
                        self._lock.wait(due)
                    else:
                        self._lock.wait()
                if not self._pending:
                    return
                batch, self._pending = self._pending, {}
                self._writing_events, self._pending_events = self._pending_events, 0
                self._writing = True
            try:
                lost = self._catalog.group.record_progress(self._member_id, batch)
            except HcatNotifyError as exc:
                logger.warning("relay could not record progress (will retry): %s", exc)
                with self._lock:
                    self._writing = False
                    if not self._pending:
                        self._pending_since = time.monotonic()
                    _merge(self._pending, batch)  # again, with whatever came meanwhile
                    self._pending_events += self._writing_events
                    self._writing_events = 0
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            delay = 0.05
            if lost:
                self._on_lost({bucket: batch[bucket].epoch for bucket in lost})
            with self._lock:
                self._writing = False
                self._writing_events = 0
                self._lock.notify_all()
