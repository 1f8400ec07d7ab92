"""Long polls (ChangeFeed) with a change signal double: many waiters for the same thing
share each catalog read, and every one of them gets the answer once."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from collections.abc import Hashable, Sequence

from hcat_notify.api.feed import TIMED_OUT, ChangeFeed, Waiter

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


class _Recorder(Waiter):
    __slots__ = ("__weakref__", "got")

    def __init__(self, deadline: float) -> None:
        super().__init__(deadline)
        self.got: list[object] = []

    def answer(self, outcome: object, shared: dict[str, object]) -> None:
        self.got.append(outcome)


def test_an_answered_waiter_is_not_kept_until_its_deadline_and_late_ones_time_out_together():
    """The deadline heap lets go of a waiter answered (or gone) long before its
    deadline, and waiters whose deadlines pass are answered TIMED_OUT (those that left
    are not answered at all)."""
    signal = _Signal()
    feed = ChangeFeed("sqlite://", waiter_factory=lambda _url: signal)
    found: dict[str, int | None] = {"v": None}

    async def check() -> int | None:
        return found["v"]

    async def never() -> int | None:
        return None

    async def scenario() -> tuple[int, int, list[list[object]]]:
        loop = asyncio.get_running_loop()
        keeper = _Recorder(loop.time() + 100)  # still waits, ahead of the answered in the heap
        feed.join("k", never, keeper, generation=feed.generation())
        answered = [_Recorder(loop.time() + 300) for _ in range(100)]
        for waiter in answered:
            feed.join("a", check, waiter, generation=feed.generation())
        found["v"] = 5
        signal.changed.set()
        while not answered[-1].got:
            await asyncio.sleep(0.01)
        refs = [weakref.ref(waiter) for waiter in answered]
        outcomes = [waiter.got for waiter in answered]
        del answered
        found["v"] = None
        late = [_Recorder(loop.time() + 0.05) for _ in range(10)]
        for waiter in late:
            feed.join("c", check, waiter, generation=feed.generation())
        for waiter in late[:5]:
            assert feed.leave(waiter)
        while not late[-1].got:
            await asyncio.sleep(0.01)
        gc.collect()
        alive = sum(ref() is not None for ref in refs)
        assert feed.leave(keeper)
        return alive, sum(len(w.got) for w in late), outcomes + [w.got for w in late[5:]]

    try:
        alive, late_answers, outcomes = asyncio.run(scenario())
    finally:
        feed.close()
    assert alive == 0  # released although 300 s from their deadline
    assert outcomes[:100] == [[5]] * 100
    assert outcomes[100:] == [[TIMED_OUT]] * 5  # the 5 that stayed; the 5 that left: none
    assert late_answers == 5


def test_a_wake_up_reads_the_keys_of_one_batch_with_one_read():
    """Long polls of many specs of one table: a change costs one read of them all (a
    key's own failure answers that key's waiters only), not one read per spec."""
    signal = _Signal()
    feed = ChangeFeed("sqlite://", waiter_factory=lambda _url: signal)
    keys = [f"k{i}" for i in range(10)]
    calls: list[list[object]] = []
    ready = {"now": False}

    async def check() -> int | None:
        return None

    async def read_each(asked: Sequence[Hashable]) -> list[object]:
        calls.append(list(asked))
        if not ready["now"]:
            return [None] * len(asked)
        return [ValueError(key) if key == "k9" else keys.index(str(key)) for key in asked]

    async def scenario() -> list[object]:
        waiters = [_Recorder(asyncio.get_running_loop().time() + 30) for _ in range(WAITERS)]
        for i, waiter in enumerate(waiters):
            feed.join(
                keys[i % 10], check, waiter, generation=feed.generation(), batch=("t", read_each)
            )
        signal.changed.set()  # read, nothing found
        while not calls:
            await asyncio.sleep(0.01)
        ready["now"] = True
        signal.changed.set()  # read, every key answered
        while not waiters[-1].got:
            await asyncio.sleep(0.01)
        return [w.got[0] for w in waiters]

    try:
        answers = asyncio.run(scenario())
    finally:
        feed.close()
    assert len(calls) == 2, calls  # one read per wake-up for the ten keys
    assert sorted(map(str, calls[0])) == sorted(keys)
    assert answers[:9] == list(range(9))
    assert isinstance(answers[9], ValueError)
    assert answers[10:19] == list(range(9))


def test_the_garbage_collector_waits_while_a_change_is_read_and_answered():
    """A full collection with thousands of connections waiting stalls the loop for
    hundreds of milliseconds: none may start between a change and its answers."""
    signal = _Signal()
    feed = ChangeFeed("sqlite://", waiter_factory=lambda _url: signal)
    during: list[bool] = []

    async def read_each(asked: Sequence[Hashable]) -> list[object]:
        during.append(gc.isenabled())
        await asyncio.sleep(0.01)  # a read in a worker thread
        during.append(gc.isenabled())
        return [1] * len(asked)

    class _Seeing(_Recorder):
        __slots__ = ()

        def answer(self, outcome: object, shared: dict[str, object]) -> None:
            during.append(gc.isenabled())
            super().answer(outcome, shared)

    async def never() -> int | None:
        return None

    async def scenario() -> bool:
        waiters = [_Seeing(asyncio.get_running_loop().time() + 30) for _ in range(10)]
        for waiter in waiters:
            feed.join("k", never, waiter, generation=feed.generation(), batch=("t", read_each))
        signal.changed.set()
        while not waiters[-1].got:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.01)
        return gc.isenabled()

    try:
        after = asyncio.run(scenario())
    finally:
        feed.close()
    assert during == [False] * 12
    assert after
