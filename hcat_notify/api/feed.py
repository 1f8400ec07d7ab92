"""Long polls: one watcher thread per process wakes every request that waits.

A request that waits (``GET .../done?wait=30``, ``GET /v1/events?wait=30``) checks the
catalog, then sleeps until the catalog may have changed and checks again. What wakes it
is the relay's own signal (:mod:`hcat_notify.store.change_feed`): ``LISTEN`` on PostgreSQL,
``PRAGMA data_version`` on SQLite. One thread watches for the whole process, and only
while some request waits; it bumps a generation number and wakes the waiting
coroutines. Waiters that wait for the same thing (a ``key``: the table and spec) form
one group: a change (or a re-check) runs one catalog read per group, and the group's
waiters are resumed only when that read found their answer, so a done answers ten
thousand schedulers waiting for it with one read, and a change that answers none of
them costs a read per key, not a wake-up per waiter. The watcher also wakes every
group every :data:`RECHECK_SECONDS` (and an unkeyed waiter re-checks on its own after
twice that), so a lost signal costs latency, never an answer.

A waiter in a group is a :class:`Waiter`: what it does with the answer is its own (the
route's :meth:`ChangeFeed.poll` resumes a future; the long-poll front of the server,
:mod:`hcat_notify.api.long_polls`, writes the group's one encoded answer to each
connection). Deadlines are kept in one heap per event loop with one timer armed at the
earliest, and the waiters whose deadlines have passed are answered together, group by
group; a waiter whose client went away leaves its group (:meth:`ChangeFeed.leave`).
When the server starts to stop (:meth:`ChangeFeed.drain`), every waiting request answers
at once: what it waits for if the catalog has it, else 503 (ask again, or another
instance), so that a shutdown never cuts a long poll off without an answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hcat_notify.errors import ApiUnavailableError
from hcat_notify.store.change_feed import OutboxWaiter, outbox_waiter

__all__ = [
    "RECHECK_SECONDS",
    "TIMED_OUT",
    "TIMEOUT_SLACK",
    "WAKE_UP",
    "Batch",
    "ChangeFeed",
    "Waiter",
    "stopping_error",
]

logger = logging.getLogger(__name__)

RECHECK_SECONDS = 2.0
TIMEOUT_SLACK = 0.005
"""Seconds a deadline may pass before its waiter is answered, so that waiters whose
deadlines fall close together are answered by one timer."""
_WATCH_SLICE = 1.0
WAKE_UP = "wake-up"
"""The key of the dict in every group's ``shared`` that the groups of one wake-up share
(:meth:`Waiter.send`)."""
GC_HOLD_SECONDS = 1.0
"""The longest the cyclic garbage collector waits for a change's reads and answers."""
_COMPACT_AT = 1024  # stale heap entries (answered waiters) tolerated before a rebuild
T = TypeVar("T")
Batch = tuple[Hashable, Callable[[Sequence[Hashable]], Awaitable[Sequence[object]]]]
"""A batch key and its reader: the groups of one batch key (the specs of one table) are
read together at a wake-up, the reader given their keys and returning one outcome each
(what was found, None, or an exception for that key alone)."""


class _TimedOut:
    def __repr__(self) -> str:
        return "TIMED_OUT"


TIMED_OUT: Any = _TimedOut()
"""The outcome of a :class:`Waiter` whose deadline passed before its answer."""


def stopping_error() -> ApiUnavailableError:
    """What a long poll that waited raises (or answers) when the server began to stop."""
    return ApiUnavailableError(
        "this server is stopping: ask again (another instance answers, or this one once restarted)"
    )


class Waiter:
    """A request waiting with its key's group (:meth:`ChangeFeed.join`) until the group's
    answer or its own deadline (``loop.time()`` seconds). Subclasses say what an answer
    does (:meth:`answer`)."""

    __slots__ = ("_entry", "_group", "deadline")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self._group: _Group | None = None
        self._entry: list[Any] | None = None  # in the deadline heap: [deadline, n, self]

    def _release(self) -> None:
        """Out of its group and of the deadline heap (whose entry no longer holds it:
        an answered waiter is not kept until its deadline)."""
        self._group = None
        entry, self._entry = self._entry, None
        if entry is not None:
            entry[2] = None

    def send(self, outcome: object, shared: dict[str, Any]) -> None:
        """What of the answer must leave at once (a response's bytes): called before
        :meth:`answer`, in the same turn of the event loop, for every waiter a wake-up
        answers, of every group, so that the rest of answering them (resuming tasks)
        does not delay the others' bytes. ``shared[WAKE_UP]`` is one dict for every
        group of the wake-up: a callable it holds under ``"flush"`` is called once,
        after every send and before any answer (writes collected across the groups,
        made together). Must not raise; nothing by default."""

    def answer(self, outcome: object, shared: dict[str, Any]) -> None:
        """Called once, in the event loop's thread, unless the waiter left first
        (after :meth:`send`, with the same ``shared``).

        Args:
            outcome: what the group's check found; an exception (the check raised it, or
                :class:`ApiUnavailableError` as the server stops); or :data:`TIMED_OUT`.
            shared: one dict per group and outcome, for what every waiter answered with
                it can share (the answer encoded once).
        """
        raise NotImplementedError


class _FutureWaiter(Waiter):
    __slots__ = ("future",)

    def __init__(self, deadline: float, future: asyncio.Future[Any]) -> None:
        super().__init__(deadline)
        self.future = future

    def answer(self, outcome: object, shared: dict[str, Any]) -> None:
        if self.future.done():
            return
        if isinstance(outcome, BaseException):
            self.future.set_exception(outcome)
        else:
            self.future.set_result(outcome)


@dataclass(eq=False)
class _Group:
    """The waiters of one key on one event loop: one read per wake-up, one answer."""

    slot: tuple[asyncio.AbstractEventLoop, Hashable]
    check: Callable[[], Awaitable[Any]]
    members: dict[Waiter, None] = field(default_factory=dict)  # in the order they came
    batch: Batch | None = None
    reading: asyncio.Task[None] | None = None
    again: bool = False  # a wake-up came while the read ran: read once more


@dataclass(eq=False)
class _Deadlines:
    """One event loop's deadlines: a heap, and one timer armed at the earliest."""

    heap: list[list[Any]] = field(default_factory=list)  # [deadline, n, waiter or None]
    timer: asyncio.TimerHandle | None = None
    armed_at: float = 0.0
    stale: int = 0  # entries of waiters answered or gone


class ChangeFeed:
    """Wakes waiting requests when the catalog's outbox may have changed.

    Args:
        database_url: the catalog (its backend chooses how changes are signalled).
        waiter_factory: builds the change waiter (tests pass a double).
        on_waiting: called with the number of waiting requests whenever it changes
            (the long-poll gauge of ``/metrics``).
    """

    def __init__(
        self,
        database_url: str,
        *,
        waiter_factory: Callable[[str], OutboxWaiter] = outbox_waiter,
        on_waiting: Callable[[int], object] | None = None,
    ) -> None:
        self._url = database_url
        self._factory = waiter_factory
        self._on_waiting = on_waiting
        self._lock = threading.Lock()
        self._waiting = 0
        self._wanted = threading.Event()  # some request waits: watch
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        # per event loop: the event the next change sets, and how many were set
        self._changed: dict[asyncio.AbstractEventLoop, asyncio.Event] = {}
        self._generation: dict[asyncio.AbstractEventLoop, int] = {}
        # the waiters of each key, by (loop, key): one read per wake-up for all of them
        self._groups: dict[tuple[asyncio.AbstractEventLoop, Hashable], _Group] = {}
        self._deadlines: dict[asyncio.AbstractEventLoop, _Deadlines] = {}
        self._gc_holds = 0
        self._gc_deadline: asyncio.TimerHandle | None = None
        self._order = itertools.count()

    # ------------------------------------------------------------------ the watcher

    def _watch(self) -> None:
        waiter: OutboxWaiter | None = None
        woke = time.monotonic()
        try:
            while not self._closed.is_set():
                if not self._wanted.wait(_WATCH_SLICE):
                    continue
                if time.monotonic() - woke >= RECHECK_SECONDS:  # the shared re-check
                    woke = time.monotonic()
                    self._wake()
                try:
                    if waiter is None:
                        waiter = self._factory(self._url)
                    changed = waiter.wait(_WATCH_SLICE)
                except Exception as exc:  # noqa: BLE001 - waiters re-check on their own
                    logger.warning("api change watcher failed: %s; retrying", exc)
                    if waiter is not None:
                        waiter.close()
                    waiter = None
                    self._closed.wait(_WATCH_SLICE)
                    continue
                if changed:
                    woke = time.monotonic()
                    self._wake()
        finally:
            if waiter is not None:
                waiter.close()

    def _wake(self) -> None:
        with self._lock:
            loops = list(self._changed)
        for loop in loops:
            with contextlib.suppress(RuntimeError):  # that loop has closed
                loop.call_soon_threadsafe(self._signal, loop)

    def _signal(self, loop: asyncio.AbstractEventLoop) -> None:
        # In the loop's thread: whoever holds the current event is woken; later waits
        # take a fresh one.
        with self._lock:
            event = self._changed.get(loop)
            self._changed[loop] = asyncio.Event()
            self._generation[loop] = self._generation.get(loop, 0) + 1
        if event is not None:
            event.set()
        with self._lock:
            groups = [g for slot, g in self._groups.items() if slot[0] is loop]
        batches: dict[Hashable, list[_Group]] = {}
        for group in groups:
            if self._closed.is_set():
                self._answer((group, stopping_error()))
            elif group.batch is None or group.reading is not None:
                self._read(loop, group)
            elif group.members:
                batches.setdefault(group.batch[0], []).append(group)
        for batched in batches.values():
            self._hold_gc()  # released as the read ends
            task = loop.create_task(self._read_batch(batched))
            for group in batched:
                group.reading = task

    # ------------------------------------------------------------------ groups

    def _read(self, loop: asyncio.AbstractEventLoop, group: _Group) -> None:
        """Start the group's read, or ask the running one to read once more (the change
        may have come after it read)."""
        if group.reading is not None:
            group.again = True
        elif group.members:
            self._hold_gc()  # released as the read ends
            group.reading = loop.create_task(self._read_group(group))

    async def _read_group(self, group: _Group) -> None:
        try:
            while True:
                group.again = False
                try:
                    found = await group.check()
                except Exception as exc:  # noqa: BLE001 - every waiter of the key gets it
                    self._answer((group, exc))
                    return
                if found is not None:
                    self._answer((group, found))
                    return
                if not group.again:
                    return
        finally:
            group.reading = None
            asyncio.get_running_loop().call_soon(self._release_gc)

    async def _read_batch(self, groups: list[_Group]) -> None:
        """One read for the groups of a batch key; once more for those a wake-up came
        for while it ran."""
        assert groups[0].batch is not None
        reader = groups[0].batch[1]
        task = asyncio.current_task()
        try:
            pending = groups
            while pending:
                for group in pending:
                    group.again = False
                try:
                    outcomes = list(await reader([group.slot[1] for group in pending]))
                except Exception as exc:  # noqa: BLE001 - every waiter of these keys gets it
                    outcomes = [exc] * len(pending)
                again = []
                found = []
                for group, outcome in zip(pending, outcomes, strict=True):
                    if outcome is not None:
                        found.append((group, outcome))
                    elif group.again:
                        again.append(group)
                self._answer(*found)
                pending = again
        finally:
            for group in groups:
                if group.reading is task:
                    group.reading = None
            asyncio.get_running_loop().call_soon(self._release_gc)

    def _answer(self, *answered: tuple[_Group, object]) -> None:
        """Answer every waiter of each group with its outcome; waiters that come later
        form new groups."""
        delivered = []
        for group, outcome in answered:
            self._forget(group)
            members, group.members = group.members, {}
            self._went(group, len(members))
            delivered.append((members, outcome))
        self._deliver(*delivered, release=True)

    def _deliver(self, *answered: tuple[Iterable[Waiter], object], release: bool = False) -> None:
        """Each waiter its outcome: first every waiter's :meth:`Waiter.send`, then
        (each out of its group and the deadline heap first, with ``release``) every
        waiter's :meth:`Waiter.answer`."""
        if not answered:
            return
        self._hold_gc()  # until the answers are out (the loop's next turn)
        asyncio.get_running_loop().call_soon(self._release_gc)
        wake_up: dict[str, Any] = {}
        shared: list[dict[str, Any]] = [{WAKE_UP: wake_up} for _ in answered]
        for (waiters, outcome), common in zip(answered, shared, strict=True):
            for waiter in waiters:
                try:
                    waiter.send(outcome, common)
                except Exception:  # one waiter's failure must not cost the others theirs
                    logger.exception("api: sending a long poll's answer failed")
        flush = wake_up.get("flush")
        if flush is not None:
            try:
                flush()
            except Exception:  # the waiters' answers say what became of theirs
                logger.exception("api: sending long polls' answers failed")
        for (waiters, outcome), common in zip(answered, shared, strict=True):
            for waiter in waiters:
                if release:
                    waiter._release()
                try:
                    waiter.answer(outcome, common)
                except Exception:  # one waiter's failure must not cost the others theirs
                    logger.exception("api: answering a long poll failed")

    # The cyclic garbage collector waits while a change is read and its answers are
    # written: a full collection of the heap ten thousand waiting connections make took
    # 100 to 500 ms here, and the read's or the answers' own objects set one off before
    # or midway through the writes. Held for at most GC_HOLD_SECONDS.

    def _hold_gc(self) -> None:
        if self._gc_holds == 0:
            if not gc.isenabled():
                return  # someone else's: not ours to enable
            gc.disable()
            loop = asyncio.get_running_loop()
            self._gc_deadline = loop.call_later(GC_HOLD_SECONDS, self._end_gc_hold)
        self._gc_holds += 1

    def _release_gc(self) -> None:
        if self._gc_holds == 0:
            return
        self._gc_holds -= 1
        if self._gc_holds == 0:
            self._end_gc_hold()

    def _end_gc_hold(self) -> None:
        self._gc_holds = 0
        if self._gc_deadline is not None:
            self._gc_deadline.cancel()
            self._gc_deadline = None
        gc.enable()

    def _forget(self, group: _Group) -> None:
        with self._lock:
            if self._groups.get(group.slot) is group:
                del self._groups[group.slot]

    def join(
        self,
        key: Hashable,
        check: Callable[[], Awaitable[Any]],
        waiter: Waiter,
        *,
        generation: int,
        batch: Batch | None = None,
    ) -> None:
        """Add ``waiter`` to the group of ``key`` (``check`` reads for the group if it
        is the first), in the running event loop; it is answered once, by
        :meth:`Waiter.answer`, unless it leaves first. ``generation`` is
        :meth:`generation` taken before the waiter's own first read: if a change came
        since, the group reads again at once. Groups of the same ``batch`` key are read
        together at a wake-up (:data:`Batch`)."""
        loop = asyncio.get_running_loop()
        self._next_change(loop)  # the watcher's wake-ups reach this loop
        slot = (loop, key)
        with self._lock:
            group = self._groups.get(slot)
            if group is None:
                group = self._groups[slot] = _Group(slot, check, batch=batch)
        group.members[waiter] = None
        waiter._group = group
        self._count(1)
        self._schedule(loop, waiter)
        if self._generation.get(loop, 0) != generation:  # changed since this one read
            self._read(loop, group)

    def leave(self, waiter: Waiter) -> bool:
        """Take ``waiter`` out of its group without an answer (its client went away);
        False if it was answered already."""
        group = waiter._group
        if group is None:
            return False
        waiter._release()
        del group.members[waiter]
        if not group.members:
            self._forget(group)
        self._went(group, 1)
        return True

    def _went(self, group: _Group, count: int) -> None:
        """``count`` waiters of ``group`` were answered or left before their deadlines:
        their heap entries are stale now."""
        clock = self._deadlines.get(group.slot[0])
        if clock is not None:
            clock.stale += count
        self._count(-count)

    def generation(self) -> int:
        """How many changes the running event loop has been told of (for :meth:`join`)."""
        return self._generation.get(asyncio.get_running_loop(), 0)

    @property
    def stopping(self) -> bool:
        """The server began to stop (:meth:`drain`): waiting is over."""
        return self._closed.is_set()

    # ------------------------------------------------------------------ deadlines

    def _schedule(self, loop: asyncio.AbstractEventLoop, waiter: Waiter) -> None:
        clock = self._deadlines.get(loop)
        if clock is None:
            clock = self._deadlines[loop] = _Deadlines()
        entry = waiter._entry = [waiter.deadline, next(self._order), waiter]
        heapq.heappush(clock.heap, entry)
        if clock.timer is None or waiter.deadline + TIMEOUT_SLACK < clock.armed_at:
            self._arm(loop, clock)

    def _arm(self, loop: asyncio.AbstractEventLoop, clock: _Deadlines) -> None:
        if clock.timer is not None:
            clock.timer.cancel()
            clock.timer = None
        heap = clock.heap
        if clock.stale > _COMPACT_AT and clock.stale > len(heap) // 2:
            clock.heap = heap = [entry for entry in heap if entry[2] is not None]
            heapq.heapify(heap)
            clock.stale = 0
        while heap and heap[0][2] is None:
            heapq.heappop(heap)
            clock.stale = max(clock.stale - 1, 0)
        if heap:
            clock.armed_at = heap[0][0] + TIMEOUT_SLACK
            clock.timer = loop.call_at(clock.armed_at, self._expire, loop, clock)

    def _expire(self, loop: asyncio.AbstractEventLoop, clock: _Deadlines) -> None:
        """The timer: every waiter whose deadline has passed is answered
        :data:`TIMED_OUT`, group by group."""
        clock.timer = None
        now = loop.time()
        due: dict[_Group, list[Waiter]] = {}
        heap = clock.heap
        while heap and heap[0][0] <= now:
            waiter: Waiter | None = heapq.heappop(heap)[2]
            if waiter is None:
                clock.stale = max(clock.stale - 1, 0)
                continue
            group = waiter._group
            waiter._entry = None
            waiter._release()
            if group is not None:
                del group.members[waiter]
                due.setdefault(group, []).append(waiter)
        for group in due:
            if not group.members:
                self._forget(group)
        self._count(-sum(len(waiters) for waiters in due.values()))
        self._deliver(*((waiters, TIMED_OUT) for waiters in due.values()))
        self._arm(loop, clock)

    # ------------------------------------------------------------------ counting

    def _next_change(self, loop: asyncio.AbstractEventLoop) -> asyncio.Event:
        with self._lock:
            event = self._changed.get(loop)
            if event is None:
                event = self._changed[loop] = asyncio.Event()
            return event

    def _count(self, delta: int) -> None:
        if delta == 0:
            return
        with self._lock:
            self._waiting += delta
            if self._on_waiting is not None:
                self._on_waiting(self._waiting)
            if self._waiting <= 0:
                self._wanted.clear()
                return
            self._wanted.set()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="hcat-api-changes", daemon=True
                )
                self._thread.start()

    # ------------------------------------------------------------------ the route's wait

    async def poll(
        self,
        check: Callable[[], Awaitable[T | None]],
        timeout: float,
        *,
        key: Hashable | None = None,
        batch: Batch | None = None,
    ) -> T | None:
        """``await check()`` until it returns something, or ``timeout`` seconds pass.

        ``check`` runs at once, then after each possible change (and at least every
        :data:`RECHECK_SECONDS`) until the deadline or the server's shutdown. Waiters
        with the same ``key`` (equal keys: the same ``check``) share each read after
        the first, and are resumed only by the answer (or their deadline); keys of one
        ``batch`` are read together (:meth:`join`).

        Raises:
            ApiUnavailableError: the server began to stop (:meth:`drain`) before the
                deadline, and ``check`` found nothing.
        """
        loop = asyncio.get_running_loop()
        generation = self._generation.get(loop, 0)
        found = await check()
        if found is not None or timeout <= 0:
            return found
        deadline = loop.time() + timeout
        if key is not None and not self._closed.is_set():
            waiter = _FutureWaiter(deadline, loop.create_future())
            self.join(key, check, waiter, generation=generation, batch=batch)
            try:
                outcome = await waiter.future
            finally:
                self.leave(waiter)  # cancelled while it waited
            result: T | None = None if outcome is TIMED_OUT else outcome
            return result
        self._count(1)
        try:
            while key is None and not self._closed.is_set():
                # Taken before the read: a change during the read ends the next wait.
                changed = self._next_change(loop)
                found = await check()
                remaining = deadline - loop.time()
                if found is not None or remaining <= 0:
                    return found
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), min(remaining, 2 * RECHECK_SECONDS))
        finally:
            self._count(-1)
        # Drained while waiting: the last check found nothing.
        raise stopping_error()

    # ------------------------------------------------------------------ stopping

    def drain(self) -> None:
        """Wake every waiting request to answer now, and make later ones answer at once;
        for the event loop's thread, when the server begins to stop. Never blocks."""
        self._closed.set()
        self._wake()

    def close(self) -> None:
        """Stop the watcher (after :meth:`drain`, if not drained yet)."""
        self.drain()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(5)
