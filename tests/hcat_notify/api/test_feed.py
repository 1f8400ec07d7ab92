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


def test_a_change_that_answers_no_one_costs_a_read_per_key_and_wakes_no_waiter():
    """Waiters of a key wait on their group's one answer: no task or timer of their own
    while they wait, and a change that does not answer them runs one read per key and
    resumes none of them (ten thousand waiters woken by every done of any table was the
    long polls' cost at scale, issue 31)."""
    signal = _Signal()
    feed = ChangeFeed("sqlite://", waiter_factory=lambda _url: signal)
    keys = [f"k{i}" for i in range(10)]
    reads = dict.fromkeys(keys, 0)
    resumed = {"n": 0}

    def check_of(key: str):
        async def check() -> int | None:
            reads[key] += 1
            await asyncio.sleep(0)
            return 9 if key == "k0" and reads[key] > WAITERS // 10 else None

        return check

    async def waiter(key: str) -> int | None:
        found = await feed.poll(check_of(key), 30, key=key)
        resumed["n"] += 1
        return found

    async def settle() -> None:
        for _ in range(50):
            await asyncio.sleep(0)

    async def scenario() -> tuple[int, dict[str, int], int, list[int | None]]:
        waiting = [asyncio.create_task(waiter(keys[i % 10])) for i in range(WAITERS)]
        await settle()
        tasks_waiting = len(asyncio.all_tasks())
        before = dict(reads)
        signal.changed.set()  # answers k0's waiters only (its second shared read)
        deadline = asyncio.get_running_loop().time() + 10
        while resumed["n"] < WAITERS // 10 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        await settle()
        after = {k: reads[k] - before[k] for k in keys}
        still = resumed["n"]
        feed.drain()
        answers = await asyncio.gather(*waiting, return_exceptions=True)
        return tasks_waiting, after, still, answers  # type: ignore[return-value]

    try:
        tasks_waiting, after, resumed_by_change, answers = asyncio.run(scenario())
    finally:
        feed.close()
    assert tasks_waiting <= WAITERS + 1, tasks_waiting  # the waiters and the scenario
    assert after == dict.fromkeys(keys, 1), after  # one read per key for the change
    assert resumed_by_change == WAITERS // 10  # k0's waiters, and no other
    assert answers[::10] == [9] * (WAITERS // 10)
    assert all(isinstance(a, Exception) for i, a in enumerate(answers) if i % 10), answers[1]
