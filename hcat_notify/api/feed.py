"""Long polls: one watcher thread per process wakes every request that waits.

A request that waits (``GET .../done?wait=30``, ``GET /v1/events?wait=30``) checks the
catalog, then sleeps until the catalog may have changed and checks again. What wakes it
is the relay's own signal (:mod:`hcat_notify.store.change_feed`): ``LISTEN`` on PostgreSQL,
``PRAGMA data_version`` on SQLite. One thread watches for the whole process, and only
while some request waits; it bumps a generation number and wakes the waiting
coroutines. Waiters that wait for the same thing (a ``key``: the table and spec) share
one catalog read per wake-up, so a done answers ten thousand schedulers waiting for it
with one read, not ten thousand. The watcher also wakes every waiter every
:data:`RECHECK_SECONDS` (and a waiter re-checks on its own after twice that), so a lost
signal costs latency, never an answer, and the re-checks are shared too.
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
from typing import Any, TypeVar

from hcat_notify.errors import ApiUnavailableError
from hcat_notify.store.change_feed import OutboxWaiter, outbox_waiter

__all__ = ["RECHECK_SECONDS", "ChangeFeed"]

logger = logging.getLogger(__name__)

RECHECK_SECONDS = 2.0
_WATCH_SLICE = 1.0
T = TypeVar("T")


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
        # the catalog reads in flight, by (loop, key, generation): waiters share them
        self._reads: dict[tuple[asyncio.AbstractEventLoop, Hashable, int], asyncio.Task[Any]] = {}

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

    async def _shared(
        self, loop: asyncio.AbstractEventLoop, key: Hashable, check: Callable[[], Awaitable[T]]
    ) -> T:
        """``check()``, or the result of the same key's read that began since the last
        wake-up (so after the change that woke its waiters) and is still running."""
        with self._lock:
            slot = (loop, key, self._generation.get(loop, 0))
            task = self._reads.get(slot)
            if task is None:
                task = loop.create_task(_run(check))
                self._reads[slot] = task
                task.add_done_callback(lambda _: self._reads.pop(slot, None))
        result: T = await asyncio.shield(task)
        return result

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
        the first.

        Raises:
            ApiUnavailableError: the server began to stop (:meth:`drain`) before the
                deadline, and ``check`` found nothing.
        """
        found = await check()
        if found is not None or timeout <= 0:
            return found
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        self._enter()
        try:
            while not self._closed.is_set():
                # Taken before the read: a change during the read ends the next wait.
                changed = self._next_change(loop)
                found = await (check() if key is None else self._shared(loop, key, check))
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


async def _run(check: Callable[[], Awaitable[T]]) -> T:
    return await check()
