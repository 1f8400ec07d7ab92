"""Recording what a relay published: per topic, per bucket, fenced by epoch, off the
publish path.

After each receipt the publisher hands over what it sent; a background thread merges
everything pending into one write (O(topics) rows, not one per event) and reports the
buckets whose write was fenced (owned by another member now).
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
    """

    def __init__(
        self, catalog: Catalog, member_id: str, on_lost: Callable[[set[int]], None]
    ) -> None:
        self._catalog = catalog
        self._member_id = member_id
        self._on_lost = on_lost
        self._pending: dict[int, BucketProgress] = {}
        self._lock = threading.Condition()
        self._writing = False
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="hcat-relay-progress", daemon=True)
        self._thread.start()

    def add(self, updates: Mapping[int, BucketProgress]) -> None:
        """Queue progress of some buckets (merged with what is queued)."""
        with self._lock:
            _merge(self._pending, updates)
            self._lock.notify_all()

    def flush(self, timeout: float = 60.0) -> bool:
        """Wait until everything queued is written; False at the timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._pending or self._writing:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._lock.wait(remaining)
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
                while not self._pending and not self._stop:
                    self._lock.wait()
                if not self._pending:
                    return
                batch, self._pending = self._pending, {}
                self._writing = True
            try:
                lost = self._catalog.group.record_progress(self._member_id, batch)
            except HcatNotifyError as exc:
                logger.warning("relay could not record progress (will retry): %s", exc)
                with self._lock:
                    self._writing = False
                    _merge(self._pending, batch)  # again, with whatever came meanwhile
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            delay = 0.05
            if lost:
                self._on_lost(lost)
            with self._lock:
                self._writing = False
                self._lock.notify_all()
