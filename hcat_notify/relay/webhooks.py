"""Webhook delivery by a relay member: the topics of the buckets it owns, to each active
webhook that wants them, per (webhook, topic) in event-id order, at least once, progress
recorded after a 2xx, fenced by the bucket's epoch (docs/webhooks.md).

One background pass (:class:`~hcat_notify.relay.background.BackgroundLoop`) finds the
work: it reads the owned buckets' events after its position, as the publisher reads its
pages, notes for each (webhook, topic) a *lane* the highest event waiting, and keeps the
lane's events (:class:`~hcat_notify.relay.webhook_buffers.LaneBuffers`). A small
thread pool delivers the lanes, one job per lane at a time (so the order holds; a job
may carry several lanes of a webhook in one CloudEvents batch), at most half the pool
per webhook, one request at a time to one that fails or has not answered yet (so a slow
or dead endpoint holds one thread, not all). A job
(:class:`~hcat_notify.relay.webhook_jobs.LaneSender`) checks that the bucket is still
the member's before it sends; its 2xx are recorded by the pass's recorder thread, many
lanes in one transaction, each fenced as relay progress is, and a lane sends nothing
more until then: a member that lost the bucket (paused, partitioned) sends at most the
batch it was in, and records nothing.
Failures back off exponentially with jitter (``Retry-After`` honoured) up to the
``webhook_max_age`` setting, then the lane is parked until an operator releases it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from typing import TypeVar

from hcat_notify.config import Settings
from hcat_notify.errors import HcatNotifyError
from hcat_notify.model.events import EventType
from hcat_notify.relay.background import BackgroundLoop
from hcat_notify.relay.config import RelayConfig
from hcat_notify.relay.member import Membership
from hcat_notify.relay.webhook_buffers import Held, LaneBuffers
from hcat_notify.relay.webhook_http import Poster
from hcat_notify.relay.webhook_jobs import Lane, LaneSender, Outcome, WebhookStats
from hcat_notify.store.catalog import Catalog
from hcat_notify.store.change_feed import outbox_waiter
from hcat_notify.store.group import Ownership
from hcat_notify.store.records import OutboxEvent
from hcat_notify.store.tx import OUTBOX_CHANNEL, WEBHOOKS_CHANNEL
from hcat_notify.store.webhooks import LanePosition, WebhookTarget, WebhookTopic

__all__ = ["WebhookDelivery", "WebhookStats"]

K = TypeVar("K")
V = TypeVar("V")

logger = logging.getLogger(__name__)

TROUBLED_FOR = 60.0
"""Seconds a webhook counts as failing after its last failed request: one request at a
time probes it then, as before its first 2xx (a healthy one may have half the pool)."""
DISCOVERY_PAGES = 5
"""Pages of the owned buckets read per pass (then the pass runs again at once); one while
no job runs, so that a backlog's first requests go out after its first page, not its
fifth (10-20 ms sooner at pages of 500)."""
WATCH_SLICE = 0.05  # seconds of each wait of the watcher (how soon it sees a stop)
IDLE_WATCH_GAP = 0.01
"""While no webhook is active, the watcher's pause after a wake: a commit costs a look at
the webhooks' stamps (a few microseconds on the driver) at most this often, and a webhook
added or resumed is seen at most this late."""
DRAIN = 1000  # at most this many signals taken at once (a failing waiter answers True)
LANES_HELD = 50_000
"""Lanes the pass holds before it lets go of the idle ones (delivered through their last
event, nothing under way or unrecorded, not failing, not parked), at most every
:data:`RELEASE_EVERY` seconds (a look at every lane held): a lane let go is opened again,
its progress read, with its next events. What the pass holds stays within this, the
lanes with work, and those opened since the last look."""
RELEASE_EVERY = 1.0


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
        self._sender = LaneSender(catalog, member, settings, config, poster)
        self._pool: ThreadPoolExecutor | None = None
        self._loop = BackgroundLoop(
            f"hcat-relay-webhooks-{member.member_id}", config.webhook_interval, self._step
        )
        self._targets: dict[int, WebhookTarget] = {}
        self._owned: dict[int, Ownership] = {}
        self._lanes: dict[tuple[int, str], Lane] = {}
        # lanes that may have events waiting (a superset: dispatch drops what has none),
        # so that a pass looks at those, not at every lane of every webhook
        self._waiting: set[tuple[int, str]] = set()
        self._running: dict[tuple[int, str], Future[dict[tuple[int, str], Outcome]]] = {}
        self._buffers = LaneBuffers()
        self._pending: dict[tuple[int, str], LanePosition] = {}  # 2xx not recorded yet
        # per lane, the events of each 2xx not recorded yet, oldest first: at most a
        # batch, so that a failover sends at most a batch of a topic again
        self._unrecorded: dict[tuple[int, str], list[int]] = {}
        self._recorder: ThreadPoolExecutor | None = None
        # the record under way: its items, and how many 2xx of each lane they cover
        self._recording: (
            tuple[list[LanePosition], Future[list[str]], dict[tuple[int, str], int]] | None
        ) = None
        self._targets_read_at = 0.0  # 0: read them at the next pass
        # the read of the webhooks the pass took in last, while it stands as taken: a
        # pass then compares nothing of the webhooks (a pass per finished request, each
        # a look at every webhook, cost as much as the requests with 1,000 webhooks)
        self._taken_from: dict[int, WebhookTarget] | None = None
        self._scan = 0  # every event of the owned buckets up to here was looked at
        self._fresh = True  # new events may be waiting (the publisher read some)
        self._poked = False  # a webhook may have changed (the watcher saw a commit)
        self._more = False  # the last look stopped short of the end
        self._looked_at = 0.0  # monotonic time of the last look
        self._released_at = 0.0  # monotonic time of the last look for idle lanes
        self._lock = threading.Lock()
        self._watching = threading.Event()  # set: the watcher stops
        self._watcher: threading.Thread | None = None

    @property
    def stats(self) -> WebhookStats:
        """What this member's delivery has done since it started."""
        return self._sender.stats

    @property
    def error(self) -> BaseException | None:
        """What ended the thread (surfaced by the relay)."""
        return self._loop.error

    def start(self) -> None:
        self._loop.start()
        self._watching.clear()
        self._watcher = threading.Thread(
            target=self._watch,
            name=f"hcat-relay-webhooks-watch-{self._member.member_id}",
            daemon=True,
        )
        self._watcher.start()

    def _watch(self) -> None:
        """Wake the pass when the catalog may have changed (new events, a webhook's
        change), whatever the publisher is doing."""
        waiter = outbox_waiter(
            self._catalog.settings.database_url, (OUTBOX_CHANNEL, WEBHOOKS_CHANNEL)
        )
        try:
            while not self._watching.is_set():
                if not waiter.wait(WATCH_SLICE):
                    continue
                for _ in range(DRAIN):  # the changes that came meanwhile: one wake
                    if not waiter.wait(0):
                        break
                self._fresh = True
                self._poked = True
                self._loop.wake()
                if not self._sender.latest:
                    # no webhook active: a commit costs a look at the webhooks' rows, at
                    # most IDLE_WATCH_GAP apart (a catalog busy with writes, no webhooks)
                    self._watching.wait(IDLE_WATCH_GAP)
        finally:
            waiter.close()

    def stop(self) -> None:
        """Stop: the requests under way finish (their progress is recorded)."""
        self._watching.set()
        if self._watcher is not None:
            self._watcher.join(5)
            self._watcher = None
        self._loop.stop()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        try:
            self._settle()
            self._flush()
        except HcatNotifyError as exc:  # delivered again by the next owner
            logger.warning("relay webhook progress not recorded at stop: %s", exc)
        if self._recorder is not None:
            self._recorder.shutdown(wait=True)
            self._recorder = None
        self._sender.close()

    def run_once(self) -> None:
        """Deliver what is due now, in this thread, then return (``relay --once``): every
        lane delivered, or failed once (its retry recorded for a later run), or parked."""
        while not self._loop.stopping:
            more = self._step()
            running = set(self._running.values())
            if running:
                wait(running, return_when=FIRST_COMPLETED)
            elif self._recording is not None:
                self._settle_record(wait=True)
            elif not more and not self._pending:
                break
        self._flush()

    def wake(self) -> None:
        """New events are in the outbox: look now rather than at the next interval."""
        self._fresh = True
        self._loop.wake()

    @property
    def lanes_held(self) -> int:
        """The (webhook, topic) lanes the pass holds now."""
        return len(self._lanes)

    # -- the pass ------------------------------------------------------------------------

    def _step(self) -> bool:
        self._settle()
        self._settle_record()
        self._record_pending()
        now = time.monotonic()
        poked, self._poked = self._poked, False
        if (
            self._targets_read_at == 0.0
            or (now - self._targets_read_at >= self._config.webhook_interval and self._stale())
            or (poked and not (self._fresh and self._sender.latest) and self._changed_stamps())
        ):
            self._targets_read_at = now
            self._sender.latest = {t.info.id: t for t in self._catalog.webhooks.targets()}
        latest = self._sender.latest
        targets = self._targets if latest is self._taken_from else dict(latest)
        self._taken_from = latest
        owned = self._member.owned()
        if not targets or not owned:
            self._forget_all(targets, owned)
            return False
        self._take(targets, owned)
        if len(self._lanes) > LANES_HELD and now - self._released_at >= RELEASE_EVERY:
            self._released_at = now
            self._release_idle()
        # The outbox is read when there may be something new in it: new events, more of a
        # page, a change taken in, or the interval; not when woken by a finished request.
        if self._fresh or self._more or now - self._looked_at >= self._config.webhook_interval:
            self._fresh = False
            self._looked_at = now
            self._more = self._discover()
        self._dispatch()
        return self._more

    def _changed_stamps(self) -> bool:
        """Whether the active webhooks' stamps differ from what was read last (a page
        read now would tell as much, but one is read only when events may be waiting;
        and none is read while no webhook is active)."""
        latest = self._sender.latest
        return self._catalog.webhooks.stamps() != {hook: t.stamp for hook, t in latest.items()}

    def _stale(self) -> bool:
        """Whether the webhooks as read last may be out of date in a way the pages' stamps
        do not tell (:meth:`_discover` reads them with every page): none was active (no
        page is read then), or a previous secret has stopped signing since."""
        latest = self._sender.latest
        now = time.time()
        return not latest or any(
            t.info.rotating_until is not None and t.info.rotating_until <= now
            for t in latest.values()
        )

    def _forget_all(self, targets: dict[int, WebhookTarget], owned: dict[int, Ownership]) -> None:
        with self._lock:
            self._lanes.clear()
            self._waiting.clear()
            self._buffers.clear()
        self._targets, self._owned, self._scan = targets, owned, 0

    def _take(self, targets: dict[int, WebhookTarget], owned: dict[int, Ownership]) -> None:
        """Take in the webhooks and buckets as now read: forget lanes of what changed (a
        lane's progress is read again with its next events, :meth:`_open`), and read
        again from where what is new starts (a new webhook, a gained bucket)."""
        changed_hooks = (
            set()
            if targets is self._targets
            else _changed(targets, self._targets, lambda t: (t.info.version, t.info.created_at))
        )
        # the same Ownership objects while nothing moved: the dicts compare in C
        changed_buckets = (
            set() if owned == self._owned else _changed(owned, self._owned, lambda o: o.epoch)
        )
        first = not self._targets
        self._targets = targets
        self._owned = owned
        if not changed_hooks and not changed_buckets:
            return
        with self._lock:
            for key, lane in list(self._lanes.items()):
                if lane.webhook_id in changed_hooks or lane.bucket in changed_buckets:
                    del self._lanes[key]
            self._buffers.clear()  # the pass reads again from further back
        reload_hooks = [hook for hook in targets if hook in changed_hooks]
        reload_buckets = [bucket for bucket in owned if bucket in changed_buckets]
        # read again from where the earliest of the webhooks read again starts (their
        # events may lie behind); the others' lanes stand (their jobs read what their
        # cleared buffers held), so a webhook added from now reads nothing again however
        # many there are; a gained bucket (or the first take) reads from the earliest
        if reload_buckets or first:
            self._scan = min(t.info.start_after for t in targets.values())
        elif reload_hooks:
            self._scan = min(self._scan, *(targets[hook].info.start_after for hook in reload_hooks))
        self._more = True

    def _discover(self) -> bool:
        """Note, per lane, the newest event waiting, from pages of the owned buckets."""
        buckets = sorted(self._owned)
        page_size = self._config.batch_size
        for _ in range(DISCOVERY_PAGES if self._running else 1):
            start = self._scan
            events, stamps = self._catalog.webhooks.page(
                buckets, after_event_id=start, limit=page_size
            )
            if stamps != {hook: t.stamp for hook, t in self._sender.latest.items()}:
                # a webhook changed (rotated, replayed, paused...) before these events
                # were written: what carries them is signed and sent as it is now
                self._targets_read_at = time.monotonic()
                self._sender.latest = {t.info.id: t for t in self._catalog.webhooks.targets()}
                if not self._sender.latest:  # the last one paused or removed
                    self._forget_all({}, self._owned)
                    return False
                self._take(dict(self._sender.latest), self._owned)
                if self._scan != start:
                    return True  # read again from where the changed webhooks start
            if not events:
                return False
            wanted, last = self._wanted(events)
            opened = self._open(last)
            with self._lock:
                self._note(wanted, last, opened, start)
                self._buffers.read_through = events[-1].event_id
            self._scan = events[-1].event_id
            if len(events) < page_size:
                return False
        return True

    def _release_idle(self) -> None:
        """Let go of the idle lanes (:data:`LANES_HELD`): a lane is idle when its progress,
        as recorded, is all there is of it (so that opening it again from its row loses
        nothing)."""
        busy = self._running.keys() | self._pending.keys() | self._unrecorded.keys()
        with self._lock:
            idle = [
                key
                for key, lane in self._lanes.items()
                if lane.head <= lane.cursor
                and not lane.attempts
                and not lane.parked
                and key not in busy
            ]
            for key in idle:
                del self._lanes[key]
                self._waiting.discard(key)
                self._buffers.drop(key)
        self._sender.stats.released += len(idle)

    def _wanted(
        self, events: list[OutboxEvent]
    ) -> tuple[list[tuple[tuple[int, str], OutboxEvent]], dict[tuple[int, str], OutboxEvent]]:
        """Each event of a page with each lane that wants it, in id order, and each lane's
        last event of the page."""
        wants_of: dict[tuple[int, str, EventType], bool] = {}  # whether a webhook wants
        wanted: list[tuple[tuple[int, str], OutboxEvent]] = []
        last: dict[tuple[int, str], OutboxEvent] = {}  # lane -> its last event here
        targets = [target.info for target in self._targets.values()]
        for event in events:
            for info in targets:
                if event.event_id <= info.start_after:
                    continue
                kind = (info.id, event.table, event.event_type)
                wants = wants_of.get(kind)
                if wants is None:
                    wants = wants_of[kind] = info.wants(event.table, event.event_type)
                if wants:
                    key = (info.id, event.topic)
                    last[key] = event
                    wanted.append((key, event))
        return wanted, last

    def _open(self, last: dict[tuple[int, str], OutboxEvent]) -> dict[tuple[int, str], Lane]:
        """The lanes of a page that the pass does not hold yet, opened where their
        progress stands (one read for all of them): a lane is held from its first events
        after its bucket was gained or its webhook changed, so that what the pass keeps
        grows with the topics that have events, not with every topic ever delivered."""
        with self._lock:
            new = [key for key in last if key not in self._lanes]
        if not new:
            return {}
        rows = {(row.webhook_id, row.topic): row for row in self._catalog.webhooks.progress(new)}
        opened = {}
        for key in new:
            hook, topic = key
            bucket = last[key].bucket
            epoch = self._owned[bucket].epoch
            row = rows.get(key)
            if row is None:
                start_after = self._targets[hook].info.start_after
                opened[key] = Lane(hook, topic, bucket, epoch, start_after)
            else:
                opened[key] = _lane_of(row, bucket, epoch)
        return opened

    def _note(
        self,
        wanted: list[tuple[tuple[int, str], OutboxEvent]],
        last: dict[tuple[int, str], OutboxEvent],
        opened: dict[tuple[int, str], Lane],
        start: int,
    ) -> None:
        """Keep each wanted event of a page (read after ``start``) for its lane, and move
        each lane's head to the last of them (once per page: lanes are immutable). A lane
        opened for the page whose progress is past the page's events (a bucket's history
        read again) is not held: nothing of it waits."""
        behind = {key for key, lane in opened.items() if last[key].event_id <= lane.cursor}
        keep = self._buffers.keep
        for key, event in wanted:
            if key not in behind:
                keep(key, start, event)
        for key, event in last.items():
            if key in behind:
                continue
            lane = self._lanes.get(key) or opened.get(key)
            if lane is None:  # dropped while the page was read: opened again next time
                continue
            if event.event_id > lane.head:
                self._lanes[key] = replace(lane, head=event.event_id)
                self._waiting.add(key)
            elif key not in self._lanes:
                self._lanes[key] = lane

    def _dispatch(self) -> None:
        """Start a job for each lane with events waiting, due, not running, within the
        limits (the pool's, and each webhook's share of it)."""
        workers = self._config.webhook_workers
        healthy, troubled = max(1, workers // 2), 1
        since = time.monotonic() - TROUBLED_FOR
        if self._pool is None:
            self._pool = ThreadPoolExecutor(workers, thread_name_prefix="hcat-webhook")
            self._recorder = ThreadPoolExecutor(1, thread_name_prefix="hcat-webhook-record")
            self._sender.open(workers)
        now = time.time()
        jobs_of: dict[int, set[int]] = {}  # webhook id -> its jobs running (a job may
        for key, running_job in self._running.items():  # carry several of its lanes)
            jobs_of.setdefault(key[0], set()).add(id(running_job))
        running = {hook: len(jobs) for hook, jobs in jobs_of.items()}
        jobs = sum(running.values())
        with self._lock:
            found: list[Lane] = []
            for key in list(self._waiting):
                lane = self._lanes.get(key)
                if lane is None or lane.head <= lane.cursor or lane.parked:
                    self._waiting.discard(key)  # a later head (discovery) adds it again
                elif (
                    lane.retry_at <= now
                    and key not in self._running
                    and self._room(key) > 0  # a batch's events unrecorded per lane at most
                ):
                    found.append(lane)
            ready = sorted(found, key=lambda lane: lane.cursor)  # the longest waiting first
        ready_of: dict[int, list[Lane]] = {}
        for lane in ready:
            ready_of.setdefault(lane.webhook_id, []).append(lane)
        taken: set[tuple[int, str]] = set()
        for lane in ready:
            if jobs >= workers:
                break
            if (lane.webhook_id, lane.topic) in taken:
                continue
            proven = lane.webhook_id in self._sender.answered
            failing = self._sender.failed_at.get(lane.webhook_id, 0.0) > since
            cap = healthy if proven and not failing else troubled
            if running.get(lane.webhook_id, 0) >= cap:
                continue
            target = self._targets.get(lane.webhook_id)
            if target is None:
                continue
            running[lane.webhook_id] = running.get(lane.webhook_id, 0) + 1
            jobs += 1
            group = self._group(target, lane, ready_of[lane.webhook_id], taken)
            room = self._room((lane.webhook_id, lane.topic))
            future = self._pool.submit(self._sender.deliver_group, target, group, room)
            for member_lane, _ in group:
                key = (member_lane.webhook_id, member_lane.topic)
                taken.add(key)
                self._running[key] = future
            future.add_done_callback(lambda _f: self._loop.wake())

    def _group(
        self, target: WebhookTarget, lane: Lane, ready: list[Lane], taken: set[tuple[int, str]]
    ) -> list[tuple[Lane, Held | None]]:
        """The lanes a job carries: ``lane``, and (CloudEvents batches, events the pass
        holds) other ready lanes of the webhook while one batch has room: one request
        then carries several topics. Each with the events the pass holds for it (and how
        far their delivery reaches), or None: the job reads its events."""
        batch = self._config.webhook_batch
        held = self._batch_of(lane, self._room((lane.webhook_id, lane.topic)))
        group = [(lane, held)]
        if held is None or not target.info.format.batched:
            return group
        room = batch - len(held[0])
        for other in ready:
            if room <= 0:
                break
            key = (other.webhook_id, other.topic)
            if other is lane or key in taken:
                continue
            more = self._batch_of(other, min(room, self._room(key)))
            if more is not None and more[0]:
                group.append((other, more))
                room -= len(more[0])
        return group

    def _settle(self) -> None:
        """Take in the outcomes of the jobs that finished."""
        lost: dict[int, int] = {}
        for key, future in list(self._running.items()):
            if not future.done():
                continue
            del self._running[key]
            try:
                outcome = future.result()[key]
            except HcatNotifyError as exc:  # the database hiccuped: the lane is tried again
                logger.warning("relay webhook delivery failed (will retry): %s", exc)
                continue
            with self._lock:
                current = self._lanes.get(key)
                if outcome.lost:
                    lost[outcome.bucket] = max(outcome.epoch, lost.get(outcome.bucket, 0))
                if outcome.changed:  # read it again next pass
                    self._targets.pop(key[0], None)
                    self._taken_from = None
                    self._targets_read_at = 0.0
                    for other in [k for k in self._lanes if k[0] == key[0]]:
                        del self._lanes[other]
                if outcome.lane is None or outcome.lost or outcome.changed:
                    self._lanes.pop(key, None)
                    self._buffers.drop(key)
                elif current is not None and current.epoch == outcome.lane.epoch:
                    head = max(current.head, outcome.lane.head)
                    self._lanes[key] = replace(outcome.lane, head=head)
                    self._buffers.trim(key, outcome.lane.cursor)
                    if outcome.delivered is not None:
                        self._pending[key] = outcome.delivered
                        self._unrecorded.setdefault(key, []).append(outcome.sent)
        if lost:
            self._sender.stats.fenced += len(lost)
            self._on_lost(lost)

    def _record_pending(self) -> None:
        """Record the 2xx received since the last record, in one transaction, in the
        recorder's thread (the pass goes on meanwhile; those received while it writes
        go in the next). A lane sends more while its 2xx are not recorded only up to a
        batch of events in all (:meth:`_room`): a failover repeats at most a batch of it."""
        if self._recording is not None or not self._pending or self._recorder is None:
            return
        items = list(self._pending.values())
        self._pending.clear()
        future = self._recorder.submit(
            self._catalog.webhooks.record_delivered_many, self._member.member_id, items
        )
        self._recording = (items, future, self._covering(items))
        future.add_done_callback(lambda _f: self._loop.wake())

    def _settle_record(self, *, wait: bool = False) -> None:
        """Take in the record under way once it is done (``wait``: wait for it)."""
        if self._recording is None:
            return
        items, future, covered = self._recording
        if not wait and not future.done():
            return
        self._recording = None
        try:
            fences = future.result()
        except HcatNotifyError as exc:  # the database hiccuped: recorded with the next
            logger.warning("relay webhook progress not recorded (will retry): %s", exc)
            for item in items:
                self._pending.setdefault((item.webhook_id, item.topic), item)
            return
        self._recorded(covered)
        self._take_fences(items, fences)

    def _flush(self) -> None:
        """Record the 2xx not recorded yet, now, in this thread (when stopping)."""
        self._settle_record(wait=True)
        if self._pending:
            items = list(self._pending.values())
            self._pending.clear()
            covered = self._covering(items)
            fences = self._catalog.webhooks.record_delivered_many(self._member.member_id, items)
            self._recorded(covered)
            self._take_fences(items, fences)

    def _room(self, key: tuple[int, str]) -> int:
        """How many events a lane may send now: a batch, less those of its 2xx not
        recorded yet (its next request needs no wait for the record of the last)."""
        return self._config.webhook_batch - sum(self._unrecorded.get(key, ()))

    def _covering(self, items: list[LanePosition]) -> dict[tuple[int, str], int]:
        """How many 2xx of each lane a record of ``items`` covers (each item is its
        lane's latest 2xx: every one before it)."""
        keys = {(item.webhook_id, item.topic) for item in items}
        return {key: len(self._unrecorded.get(key, ())) for key in keys}

    def _recorded(self, covered: dict[tuple[int, str], int]) -> None:
        """A record is written (or fenced: the lanes are read again): its 2xx no longer
        count against their lanes' room."""
        for key, count in covered.items():
            rest = self._unrecorded.get(key, [])[count:]
            if rest:
                self._unrecorded[key] = rest
            else:
                self._unrecorded.pop(key, None)

    def _take_fences(self, items: list[LanePosition], fences: list[str]) -> None:
        """Drop what the fence of a record refused (a lost bucket, a changed webhook)."""
        fenced = list(zip(items, fences, strict=True))
        lost: dict[int, int] = {}  # bucket -> the epoch its write was fenced at
        for item, fence in fenced:
            if fence == "lost":
                lost[item.bucket] = max(item.epoch, lost.get(item.bucket, 0))
        changed = {item.webhook_id for item, fence in fenced if fence == "changed"}
        if not lost and not changed:
            return
        for item, fence in fenced:
            if fence != "ok":
                self._sender.fenced(
                    Lane(item.webhook_id, item.topic, item.bucket, item.epoch, 0), fence
                )
        with self._lock:
            for hook in changed:
                self._targets.pop(hook, None)
                self._taken_from = None
                self._targets_read_at = 0.0
            for key, lane in list(self._lanes.items()):
                if lane.webhook_id in changed or lane.epoch <= lost.get(lane.bucket, -1):
                    del self._lanes[key]
                    self._buffers.drop(key)
        if lost:
            self._sender.stats.fenced += len(lost)
            self._on_lost(lost)

    def _batch_of(self, lane: Lane, limit: int) -> Held | None:
        """The lane's next events the pass holds (at most ``limit``) and how far their
        delivery reaches, or None: the job reads them (:meth:`LaneBuffers.batch_of`)."""
        with self._lock:
            return self._buffers.batch_of(
                (lane.webhook_id, lane.topic), lane.cursor, lane.head, limit
            )


def _changed(new: Mapping[K, V], old: Mapping[K, V], stamp: Callable[[V], object]) -> set[K]:
    """The keys that came, went, or whose ``stamp`` (a version, an epoch) moved."""
    return {
        key
        for key in new.keys() | old.keys()
        if key not in new or key not in old or stamp(new[key]) != stamp(old[key])
    }


def _lane_of(row: WebhookTopic, bucket: int, epoch: int) -> Lane:
    """A lane opened where its progress row stands (the bucket's epoch as now owned)."""
    return Lane(
        row.webhook_id,
        row.topic,
        bucket,
        epoch,
        row.last_event_id,
        attempts=row.attempts,
        retry_at=row.retry_at or 0.0,
        failing_since=row.failing_since,
        parked=row.parked_at is not None,
    )
