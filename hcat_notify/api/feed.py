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
When the server starts to stop (:meth:`ChangeFeed.drain`), every waiting request answers
at once: what it waits for if the catalog has it, else 503 (ask again, or another
instance), so that a shutdown never cuts a long poll off without an answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

from hcat_notify.errors import ApiUnavailableError
from hcat_notify.store.change_feed import OutboxWaiter, outbox_waiter

__all__ = ["RECHECK_SECONDS", "ChangeFeed"]

logger = logging.getLogger(__name__)

RECHECK_SECONDS = 2.0
_WATCH_SLICE = 1.0
T = TypeVar("T")
_DRAINED = object()


@dataclass(eq=False)
class _Group:
    """The waiters of one key on one event loop: one read per wake-up, one answer."""

    check: Callable[[], Awaitable[Any]]
    answer: asyncio.Future[Any]
    waiters: int = 0
    reading: asyncio.Task[None] | None = None
    again: bool = False  # a wake-up came while the read ran: read once more


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
            groups = [(slot, g) for slot, g in self._groups.items() if slot[0] is loop]
        for slot, group in groups:
            if self._closed.is_set():
                self._answer(slot, group, _DRAINED)
            else:
                self._read(loop, slot, group)

    def _read(
        self,
        loop: asyncio.AbstractEventLoop,
        slot: tuple[asyncio.AbstractEventLoop, Hashable],
        group: _Group,
    ) -> None:
        """Start the group's read, or ask the running one to read once more (the change
        may have come after it read)."""
        if group.reading is not None:
            group.again = True
        elif not group.answer.done():
            group.reading = loop.create_task(self._read_group(slot, group))

    async def _read_group(
        self, slot: tuple[asyncio.AbstractEventLoop, Hashable], group: _Group
    ) -> None:
        try:
            while True:
                group.again = False
                try:
                    found = await group.check()
                except Exception as exc:  # noqa: BLE001 - every waiter of the key raises it
                    self._answer(slot, group, exc)
                    return
                if found is not None:
                    self._answer(slot, group, found)
                    return
                if not group.again:
                    return
        finally:
            group.reading = None

    def _answer(
        self, slot: tuple[asyncio.AbstractEventLoop, Hashable], group: _Group, found: object
    ) -> None:
        """Resume every waiter of the group with ``found`` (an exception is raised in
        each); waiters that come later form a new group."""
        self._forget(slot, group)
        if group.answer.done() or group.waiters == 0:
            return
        if isinstance(found, BaseException):
            group.answer.set_exception(found)
        else:
            group.answer.set_result(found)

    def _next_change(self, loop: asyncio.AbstractEventLoop) -> asyncio.Event:
        with self._lock:
            event = self._changed.get(loop)
            if event is None:
                event = self._changed[loop] = asyncio.Event()
            return event

    def _enter(self) -> None:
        with self._lock:
            self._waiting += 1
            self._count_waiting()
            self._wanted.set()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="hcat-api-changes", daemon=True
                )
                self._thread.start()

    def _count_waiting(self) -> None:
        if self._on_waiting is not None:
            self._on_waiting(self._waiting)

    def _leave(self) -> None:
        with self._lock:
            self._waiting -= 1
            self._count_waiting()
            if self._waiting == 0:
                self._wanted.clear()

    async def poll(
        self,
        check: Callable[[], Awaitable[T | None]],
        timeout: float,
        *,
        key: Hashable | None = None,
    ) -> T | None:
        """``await check()`` until it returns something, or ``timeout`` seconds pass.

        ``check`` runs at once, then after each possible change (and at least every
        :data:`RECHECK_SECONDS`) until the deadline or the server's shutdown. Waiters
        with the same ``key`` (equal keys: the same ``check``) share each read after
        the first, and are resumed only by the answer (or their deadline).

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
        self._enter()
        try:
            if key is not None and not self._closed.is_set():
                answer = await self._wait_in_group(loop, key, check, generation, deadline)
                if answer is not _DRAINED:
                    result: T | None = answer
                    return result
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
            self._leave()
        # Drained while waiting: the last check found nothing.
        raise ApiUnavailableError(
            "this server is stopping: ask again (another instance answers, or this one "
            "once restarted)"
        )

    async def _wait_in_group(
        self,
        loop: asyncio.AbstractEventLoop,
        key: Hashable,
        check: Callable[[], Awaitable[T | None]],
        generation: int,
        deadline: float,
    ) -> Any:
        """Wait with the key's group for its answer: None at the deadline, _DRAINED
        when the server began to stop."""
        self._next_change(loop)  # the watcher's wake-ups reach this loop
        slot = (loop, key)
        with self._lock:
            group = self._groups.get(slot)
            if group is None:
                group = self._groups[slot] = _Group(check, loop.create_future())
        group.waiters += 1
        try:
            if self._generation.get(loop, 0) != generation:  # changed since this one read
                self._read(loop, slot, group)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(deadline):
                    return await asyncio.shield(group.answer)
            return None
        finally:
            group.waiters -= 1
            if group.waiters == 0:
                self._forget(slot, group)

    def _forget(self, slot: tuple[asyncio.AbstractEventLoop, Hashable], group: _Group) -> None:
        with self._lock:
            if self._groups.get(slot) is group:
                del self._groups[slot]

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
