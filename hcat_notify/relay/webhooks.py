"""Webhook delivery by a relay member: the topics of the buckets it owns, to each active
webhook that wants them, per (webhook, topic) in event-id order, at least once, progress
recorded after a 2xx, fenced by the bucket's epoch (docs/webhooks.md).

One background pass (:class:`~hcat_notify.relay.background.BackgroundLoop`) finds the
work: it reads the owned buckets' events after its position, as the publisher reads its
pages, and notes for each (webhook, topic) a *lane* the highest event waiting. A small
thread pool delivers the lanes, one job per lane at a time (so the order holds), at most
half the pool per webhook, one request at a time to one that fails or has not answered
yet (so a slow or dead endpoint holds one thread, not all). A job
checks that the bucket is still the member's before it sends, and records progress in a
transaction that starts with the same fence as relay progress: a member that lost the
bucket (paused, partitioned) sends at most the batch it was in, and records nothing.
Failures back off exponentially with jitter (``Retry-After`` honoured) up to the
``webhook_max_age`` setting, then the lane is parked until an operator releases it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TypeVar

from hcat_notify.config import Settings
from hcat_notify.errors import HcatNotifyError
from hcat_notify.model.webhooks import backoff_delay, parse_retry_after
from hcat_notify.relay.background import BackgroundLoop
from hcat_notify.relay.config import RelayConfig
from hcat_notify.relay.member import Membership
from hcat_notify.relay.webhook_http import HttpxPoster, Poster, PostResult, requests_for
from hcat_notify.store.catalog import Catalog
from hcat_notify.store.group import Ownership
from hcat_notify.store.webhooks import (
    DeliveryFailure,
    LanePosition,
    WebhookTarget,
    WebhookTopic,
)

__all__ = ["WebhookDelivery", "WebhookStats"]

K = TypeVar("K")
V = TypeVar("V")

logger = logging.getLogger(__name__)

TROUBLED_FOR = 60.0
"""Seconds a webhook counts as failing after its last failed request: one request at a
time probes it then, as before its first 2xx (a healthy one may have half the pool)."""
DISCOVERY_PAGES = 5
"""Pages of the owned buckets read per pass (then the pass runs again at once)."""
BACKOFF_INITIAL = 1.0
BACKOFF_MAX = 600.0


@dataclass
class WebhookStats:
    """What a member's webhook delivery has done since it started."""

    requests: int = 0
    delivered: int = 0  # events in requests answered 2xx
    failures: int = 0  # requests that failed (retried later)
    parked: int = 0
    disabled: int = 0
    fenced: int = 0  # jobs whose record found the bucket (or the webhook) changed


@dataclass(frozen=True)
class _Lane:
    """One (webhook, topic) of an owned bucket: delivered through ``cursor``, events
    waiting up to ``head``."""

    webhook_id: int
    topic: str
    bucket: int
    epoch: int
    cursor: int
    head: int = 0
    attempts: int = 0
    retry_at: float = 0.0  # time.time()
    failing_since: float | None = None
    parked: bool = False


@dataclass(frozen=True)
class _Outcome:
    lane: _Lane | None  # the lane as it stands now (None: drop it)
    bucket: int = -1
    epoch: int = 0  # the lane's epoch (what a lost bucket was fenced at)
    lost: bool = False  # the bucket is another member's
    changed: bool = False  # the webhook changed (replay, retry, pause, remove): reload it


class WebhookDelivery:
    """Delivers the events of a member's buckets to webhooks, in the background.

    Args:
        catalog: the catalog (its pool is shared with the publisher).
        member: the membership whose buckets (and epochs) fence the deliveries.
        settings: timeouts, max age, the CloudEvents source.
        config: the pass's interval, pool size, batch size.
        on_lost: told of buckets a record found owned by another member.
        poster: the transport (default: httpx, built at the first delivery).
    """

    def __init__(
        self,
        catalog: Catalog,
        member: Membership,
        settings: Settings,
        config: RelayConfig,
        on_lost: Callable[[Mapping[int, int]], None],
        *,
        poster: Poster | None = None,
    ) -> None:
        self._catalog = catalog
        self._member = member
        self._settings = settings
        self._config = config
        self._on_lost = on_lost
        self._poster = poster
        self._pool: ThreadPoolExecutor | None = None
        self._loop = BackgroundLoop(
            f"hcat-relay-webhooks-{member.member_id}", config.webhook_interval, self._step
        )
        self._targets: dict[int, WebhookTarget] = {}
        self._owned: dict[int, Ownership] = {}
        self._lanes: dict[tuple[int, str], _Lane] = {}
        self._running: dict[tuple[int, str], Future[_Outcome]] = {}
        self._scan = 0  # every event of the owned buckets up to here was looked at
        self._failed_at: dict[int, float] = {}  # webhook id -> its last failure (monotonic)
        self._answered: set[int] = set()  # webhooks that answered 2xx to this member
        self._lock = threading.Lock()
        self.stats = WebhookStats()

    @property
    def error(self) -> BaseException | None:
        """What ended the thread (surfaced by the relay)."""
        return self._loop.error

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        """Stop: the requests under way finish (their progress is recorded)."""
        self._loop.stop()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._poster is not None:
            self._poster.close()

    def wake(self) -> None:
        """New events are in the outbox: look now rather than at the next interval."""
        self._loop.wake()

    def parked(self) -> list[tuple[int, str]]:
        """The (webhook id, topic) lanes parked here now."""
        with self._lock:
            return [key for key, lane in self._lanes.items() if lane.parked]

    # -- the pass ------------------------------------------------------------------------

    def _step(self) -> bool:
        self._settle()
        targets = {t.info.id: t for t in self._catalog.webhooks.targets()}
        owned = self._member.owned()
        if not targets or not owned:
            self._forget_all(targets, owned)
            return False
        self._take(targets, owned)
        more = self._discover()
        self._dispatch()
        return more

    def _forget_all(self, targets: dict[int, WebhookTarget], owned: dict[int, Ownership]) -> None:
        with self._lock:
            self._lanes.clear()
        self._targets, self._owned, self._scan = targets, owned, 0

    def _take(self, targets: dict[int, WebhookTarget], owned: dict[int, Ownership]) -> None:
        """Take in the webhooks and buckets as now read: forget lanes of what changed, and
        read the progress of what is new (a new webhook, a gained bucket)."""
        changed_hooks = _changed(targets, self._targets, lambda t: t.info.version)
        changed_buckets = _changed(owned, self._owned, lambda o: o.epoch)
        self._targets = targets
        self._owned = owned
        if not changed_hooks and not changed_buckets:
            return
        with self._lock:
            for key, lane in list(self._lanes.items()):
                if lane.webhook_id in changed_hooks or lane.bucket in changed_buckets:
                    del self._lanes[key]
        reload_hooks = [hook for hook in targets if hook in changed_hooks]
        reload_buckets = [bucket for bucket in owned if bucket in changed_buckets]
        rows: list[WebhookTopic] = []
        if reload_hooks:
            rows += self._catalog.webhooks.progress(reload_hooks, list(owned))
        if reload_buckets:
            rest = [hook for hook in targets if hook not in changed_hooks]
            rows += self._catalog.webhooks.progress(rest, reload_buckets)
        with self._lock:
            for row in rows:
                if row.bucket in owned:
                    self._lanes[(row.webhook_id, row.topic)] = _Lane(
                        row.webhook_id,
                        row.topic,
                        row.bucket,
                        owned[row.bucket].epoch,
                        row.last_event_id,
                        attempts=row.attempts,
                        retry_at=row.retry_at or 0.0,
                        failing_since=row.failing_since,
                        parked=row.parked_at is not None,
                    )
        # read again from where the earliest of them starts (their events may lie behind)
        self._scan = min(t.info.start_after for t in targets.values())

    def _discover(self) -> bool:
        """Note, per lane, the newest event waiting, from pages of the owned buckets."""
        buckets = sorted(self._owned)
        page_size = self._config.batch_size
        for _ in range(DISCOVERY_PAGES):
            events = self._catalog.outbox.events_in_buckets(
                buckets, after_event_id=self._scan, limit=page_size
            )
            if not events:
                return False
            with self._lock:
                for event in events:
                    for target in self._targets.values():
                        info = target.info
                        if event.event_id <= info.start_after or not info.wants(
                            event.table, event.event_type
                        ):
                            continue
                        key = (info.id, event.topic)
                        lane = self._lanes.get(key)
                        if lane is None:
                            lane = _Lane(
                                info.id,
                                event.topic,
                                event.bucket,
                                self._owned[event.bucket].epoch,
                                info.start_after,
                            )
                        if event.event_id > lane.head:
                            self._lanes[key] = replace(lane, head=event.event_id)
            self._scan = events[-1].event_id
            if len(events) < page_size:
                return False
        return True

    def _dispatch(self) -> None:
        """Start a job for each lane with events waiting, due, not running, within the
        limits (the pool's, and each webhook's share of it)."""
        workers = self._config.webhook_workers
        healthy, troubled = max(1, workers // 2), 1
        since = time.monotonic() - TROUBLED_FOR
        if self._pool is None:
            self._pool = ThreadPoolExecutor(workers, thread_name_prefix="hcat-webhook")
            if self._poster is None:
                self._poster = HttpxPoster(
                    timeout=self._settings.webhook_timeout, connections=workers
                )
        now = time.time()
        running: dict[int, int] = {}
        for key in self._running:
            running[key[0]] = running.get(key[0], 0) + 1
        with self._lock:
            ready = sorted(
                (
                    lane
                    for key, lane in self._lanes.items()
                    if lane.head > lane.cursor
                    and not lane.parked
                    and lane.retry_at <= now
                    and key not in self._running
                ),
                key=lambda lane: lane.cursor,  # the longest waiting first
            )
        for lane in ready:
            if len(self._running) >= workers:
                break
            proven = lane.webhook_id in self._answered
            failing = self._failed_at.get(lane.webhook_id, 0.0) > since
            cap = healthy if proven and not failing else troubled
            if running.get(lane.webhook_id, 0) >= cap:
                continue
            target = self._targets.get(lane.webhook_id)
            if target is None:
                continue
            running[lane.webhook_id] = running.get(lane.webhook_id, 0) + 1
            future = self._pool.submit(self._deliver, target, lane)
            self._running[(lane.webhook_id, lane.topic)] = future
            future.add_done_callback(lambda _f: self._loop.wake())

    def _settle(self) -> None:
        """Take in the outcomes of the jobs that finished."""
        lost: dict[int, int] = {}
        for key, future in list(self._running.items()):
            if not future.done():
                continue
            del self._running[key]
            try:
                outcome = future.result()
            except HcatNotifyError as exc:  # the database hiccuped: the lane is tried again
                logger.warning("relay webhook delivery failed (will retry): %s", exc)
                continue
            with self._lock:
                current = self._lanes.get(key)
                if outcome.lost:
                    lost[outcome.bucket] = max(outcome.epoch, lost.get(outcome.bucket, 0))
                if outcome.changed:  # read it again next pass
                    self._targets.pop(key[0], None)
                    for other in [k for k in self._lanes if k[0] == key[0]]:
                        del self._lanes[other]
                if outcome.lane is None or outcome.lost or outcome.changed:
                    self._lanes.pop(key, None)
                elif current is not None and current.epoch == outcome.lane.epoch:
                    head = max(current.head, outcome.lane.head)
                    self._lanes[key] = replace(outcome.lane, head=head)
        if lost:
            self.stats.fenced += len(lost)
            self._on_lost(lost)

    # -- a job (pool thread) -------------------------------------------------------------

    def _still_owned(self, lane: _Lane) -> bool:
        member = self._member
        if time.monotonic() - member.refreshed_at > 2 * self._config.heartbeat_interval:
            # the membership thread has not read our buckets lately (this process was
            # paused, or the database is slow): read them before sending anything more
            member.refresh()
        owned = member.owned().get(lane.bucket)
        return owned is not None and owned.epoch == lane.epoch

    def _deliver(self, target: WebhookTarget, lane: _Lane) -> _Outcome:
        """Send the lane's next batch; record how far it got."""
        if not self._still_owned(lane):
            return _Outcome(None, lane.bucket, lane.epoch, lost=True)
        batch = self._config.webhook_batch
        read = self._catalog.webhooks.topic_events(
            lane.topic, after_event_id=lane.cursor, through=lane.head, limit=batch
        )
        if not read:
            return _Outcome(replace(lane, head=lane.cursor))
        last_read = read[-1].event_id
        wanted = [e for e in read if target.info.wants(e.table, e.event_type)]
        delivered_through = lane.cursor
        failure: PostResult | None = None
        if wanted:
            assert self._poster is not None
            source = self._settings.event_source
            for request in requests_for(target, wanted, source=source):
                result = self._poster.post(target.info.url, request.body, request.headers)
                self.stats.requests += 1
                if not result.ok:
                    failure = result
                    break
                self.stats.delivered += request.events
                self._answered.add(target.info.id)
                delivered_through = request.last_event_id
        if failure is None:
            delivered_through = last_read  # the events between that it does not want too
        elif failure.status == 410:
            return self._gone(target, lane, failure, delivered_through)
        return self._record(target, lane, delivered_through, failure)

    def _record(
        self, target: WebhookTarget, lane: _Lane, through: int, failure: PostResult | None
    ) -> _Outcome:
        webhooks = self._catalog.webhooks
        info = target.info
        at = LanePosition(info.id, info.version, lane.topic, lane.bucket, lane.epoch, through)
        member_id = self._member.member_id
        if through > lane.cursor:
            fence = webhooks.record_delivered(member_id, at)
            if fence != "ok":
                return self._fenced(lane, fence)
            lane = replace(lane, cursor=through, attempts=0, retry_at=0.0, failing_since=None)
        if failure is None:
            return _Outcome(lane)
        self.stats.failures += 1
        self._failed_at[info.id] = time.monotonic()
        now = time.time()
        since = lane.failing_since or now
        attempts = lane.attempts + 1
        parked = now - since >= self._settings.webhook_max_age
        delay = backoff_delay(
            attempts,
            initial=BACKOFF_INITIAL,
            maximum=BACKOFF_MAX,
            retry_after=parse_retry_after(failure.retry_after, now),
        )
        error = failure.error or f"HTTP {failure.status}"
        recorded = DeliveryFailure(attempts, now + delay, since, error, parked)
        fence = webhooks.record_failure(member_id, at, recorded)
        if fence != "ok":
            return self._fenced(lane, fence)
        if parked:
            self.stats.parked += 1
            logger.error(
                "relay webhook parked webhook=%s topic=%s after %d attempts since %.0f s "
                "(hcat-notify webhooks retry|drop %s) error=%r",
                info.name,
                lane.topic,
                attempts,
                now - since,
                info.name,
                error,
            )
        else:
            logger.warning(
                "relay webhook failed webhook=%s topic=%s attempt=%d retry_in=%.1fs error=%r",
                info.name,
                lane.topic,
                attempts,
                delay,
                error,
            )
        lane = replace(lane, attempts=attempts, retry_at=now + delay, failing_since=since)
        return _Outcome(replace(lane, parked=parked))

    def _fenced(self, lane: _Lane, fence: str) -> _Outcome:
        logger.info(
            "relay webhook progress fenced topic=%s bucket=%d epoch=%d: %s",
            lane.topic,
            lane.bucket,
            lane.epoch,
            "bucket lost" if fence == "lost" else "webhook changed",
        )
        return _Outcome(
            None, lane.bucket, lane.epoch, lost=fence == "lost", changed=fence == "changed"
        )

    def _gone(
        self, target: WebhookTarget, lane: _Lane, failure: PostResult, through: int
    ) -> _Outcome:
        outcome = self._record(target, lane, through, None) if through > lane.cursor else None
        if outcome is not None and outcome.lane is None:
            return outcome
        info = target.info
        if self._catalog.webhooks.disable(info.id, info.version, failure.error or "HTTP 410"):
            self.stats.disabled += 1
            logger.error(
                "relay webhook disabled webhook=%s url=%s: the endpoint answered 410 Gone "
                "(hcat-notify webhooks resume %s)",
                info.name,
                info.url,
                info.name,
            )
        return _Outcome(None, changed=True)


def _changed(new: Mapping[K, V], old: Mapping[K, V], stamp: Callable[[V], int]) -> set[K]:
    """The keys that came, went, or whose ``stamp`` (a version, an epoch) moved."""
    return {
        key
        for key in new.keys() | old.keys()
        if key not in new or key not in old or stamp(new[key]) != stamp(old[key])
    }
