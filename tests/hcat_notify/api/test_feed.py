"""Long polls (ChangeFeed) with a change signal double: many waiters for the same thing
share each catalog read, and every one of them gets the answer once."""

from __future__ import annotations

import asyncio
import threading

from hcat_notify.api.feed import ChangeFeed

WAITERS = 1000


class _Signal:
    """An OutboxWaiter double: ``changed`` is set by the test, taken by one wait."""

    def __init__(self) -> None:
        self.changed = threading.Event()

    def wait(self, timeout: float) -> bool:
        if self.changed.wait(timeout):
            self.changed.clear()
            return True
        return False

    def close(self) -> None:
        return None


def test_a_change_answers_every_waiter_of_a_key_with_one_shared_read():
    signal = _Signal()
    feed = ChangeFeed("sqlite://", waiter_factory=lambda _url: signal)
    reads = {"a": 0, "b": 0}
    done: dict[str, int | None] = {"a": None, "b": None}

    def check_of(key: str):
        async def check() -> int | None:
            reads[key] += 1
            await asyncio.sleep(0)  # a read that yields, as one in a worker thread does
            return done[key]

        return check

    settled: dict[str, int] = {}

    async def scenario() -> list[int | None]:
        waiting = [
            asyncio.create_task(feed.poll(check_of(k), 30, key=k))
            for k in ("a", "b")
            for _ in range(WAITERS // 2)
        ]
        for _ in range(50):  # every waiter made its first (own) read and waits
            await asyncio.sleep(0)
        settled.update(reads)
        done["a"], done["b"] = 7, 8
        signal.changed.set()
        return await asyncio.wait_for(asyncio.gather(*waiting), 10)

    try:
        answers = asyncio.run(scenario())
    finally:
        feed.close()
    assert answers == [7] * (WAITERS // 2) + [8] * (WAITERS // 2)
    # each waiter read once on its own, then they shared: one read per key per wake-up
    assert settled["a"] <= WAITERS // 2 + 3, settled
    assert reads["a"] - settled["a"] <= 2, (settled, reads)
    assert reads["b"] - settled["b"] <= 2, (settled, reads)
