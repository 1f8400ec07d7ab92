"""The sweep of expired retention rows: short batches, paced so that writers keep their
latency while it runs (docs/operations.md, "Sizing"; issue 31)."""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Dialect

from hcat_notify.errors import InvalidInputError
from hcat_notify.store import retention
from hcat_notify.store.tx import Tx

__all__ = [
    "SWEEP_BATCH_SECONDS",
    "SWEEP_LEAST_DUTY",
    "SWEEP_MAX_DUTY",
    "SWEEP_PAUSE_SECONDS",
    "PacedBatch",
    "SweepBatch",
    "SweepPace",
    "driver_batch",
    "run_paced",
    "session_batch",
    "sweep_expired",
]

logger = logging.getLogger(__name__)

SWEEP_PAUSE_SECONDS = 0.005
"""The pause between two batches: longer than a waiting SQLite writer's poll interval
(2 ms, :func:`hcat_notify.store.engine.begin_immediate`)."""

SWEEP_MAX_DUTY = 1 / 3
"""The most of its wall time the sweep spends in its batches (the pause after a batch
lasts at least ``(1 - duty) / duty`` times the batch): a third keeps at most a third of
one core (and on PostgreSQL, of its server process) busy, and the writers running
beside it find the CPU they need (``hcat-notify sweep --max-duty``)."""

SWEEP_LEAST_DUTY = 0.01
"""The lowest ``max_duty`` taken: a batch of 1 ms then pauses about 0.1 s (a sweep of a
million rows at 100 a batch would take some 17 minutes); below it the pauses grow
without bound (at 1e-300 one overflows the clock)."""

SWEEP_BATCH_SECONDS = 0.001
"""How long one batch (one transaction) should take: on SQLite, the longest a writer
waits for the lock behind it. Shorter than the scheduler's time slice (Linux gives a
task 0.75 ms x (1 + log2 of the cores) before another runnable one may preempt it): a
batch that runs right after the pause is seldom preempted while it holds the lock."""

SWEEP_FIRST_BATCH = 100
"""The rows of the first batch; then :class:`SweepPace` sizes them."""

SWEEP_LEAST_BATCH = 10
"""The fewest rows a batch asks for (unless ``most`` is fewer): on a machine so busy
that 10 rows take longer than the target, the sweep slows, but never to a crawl."""

_PACE_WINDOW = 9


@dataclass
class SweepPace:
    """How many rows the next batch asks for: as many as fit in ``target`` seconds at
    the least cost per row of the last few batches, at most twice the last batch and
    at most ``most``.

    The least, not the last batch's: a batch that waited for the CPU (on a busy
    machine, one in a few) took longer than its rows did, and shrinking the batches
    after it would only slow the sweep (each batch costs a pause) without making the
    next one less likely to wait.
    """

    most: int
    target: float = SWEEP_BATCH_SECONDS
    size: int = 0
    _costs: deque[float] = field(default_factory=lambda: deque(maxlen=_PACE_WINDOW))

    def __post_init__(self) -> None:
        if self.size < 1:
            self.size = min(self.most, SWEEP_FIRST_BATCH)

    def took(self, seconds: float) -> int:
        """The next batch's size, after the last one (of ``size`` rows) took ``seconds``."""
        self._costs.append(max(seconds, 0.0) / self.size)
        cost = min(self._costs)
        wanted = int(self.target / cost) if cost > 0 and self.target < math.inf else self.size * 2
        least = min(self.most, SWEEP_LEAST_BATCH)
        self.size = max(least, min(self.most, self.size * 2, wanted))
        return self.size


SweepBatch = Callable[[int, datetime], tuple[int, float]]
"""One batch of a sweep: ``(rows asked, cutoff)`` to ``(rows deleted, seconds it held
its rows)``, in one transaction (:func:`session_batch`, :func:`driver_batch`)."""


def session_batch(
    transaction: Callable[..., AbstractContextManager[Tx]], timer: Callable[[], float]
) -> SweepBatch:
    """Batches in a session's write transaction (PostgreSQL: its row locks skip the
    rows another sweep's batch holds); held: the whole transaction."""

    def batch(asked: int, cutoff: datetime) -> tuple[int, float]:
        started = timer()
        with transaction(write=True) as tx:
            deleted = retention.delete_expired(tx, asked, expired_at=cutoff)
        return deleted, timer() - started

    return batch


def driver_batch(
    write: Callable[[Callable[[Any, Dialect], int]], int], timer: Callable[[], float]
) -> SweepBatch:
    """Batches on the driver's connection (SQLite, :meth:`FastPath.write
    <hcat_notify.store.fast_path.FastPath.write>`): the writers' lock is held for the
    statement and the commit only, with no session's steps in between; held: from the
    lock taken to the commit's end, the time a writer may wait for it."""

    def batch(asked: int, cutoff: datetime) -> tuple[int, float]:
        locked: list[float] = []

        def work(cursor: Any, dialect: Dialect) -> int:
            locked.append(timer())
            return retention.delete_expired_on_driver(cursor, dialect, asked, cutoff)

        deleted = write(work)
        return deleted, timer() - locked[0]

    return batch


PacedBatch = Callable[[int, datetime], tuple[int, float, bool]]
"""One batch of a paced run: ``(rows asked, cutoff)`` to ``(rows done, seconds it held its
rows, whether to go on)`` (:func:`run_paced`)."""


def run_paced(
    batch: PacedBatch,
    clock: Callable[[], datetime],
    checkpoint: Callable[[], None] | None,
    *,
    batch_size: int,
    max_duty: float = SWEEP_MAX_DUTY,
    max_batches: int | None = None,
    progress: Callable[[int], None] | None = None,
    timer: Callable[[], float] = time.monotonic,
) -> tuple[int, int]:
    """Run ``batch`` until it says to stop, sized and paced as :func:`sweep_expired`
    describes; (rows done in all, batches).

    Raises:
        InvalidInputError: ``batch_size`` is below 1, or ``max_duty`` below
            :data:`SWEEP_LEAST_DUTY` or above 1.
    """
    if batch_size < 1:
        raise InvalidInputError("batch size must be at least 1")
    if not SWEEP_LEAST_DUTY <= max_duty <= 1:
        raise InvalidInputError(
            f"the sweep's duty must be from {SWEEP_LEAST_DUTY:g} to 1, not {max_duty}"
        )
    idle_share = (1 - max_duty) / max_duty
    if checkpoint is None:
        pace = SweepPace(batch_size, target=math.inf, size=batch_size)
    else:
        pace = SweepPace(batch_size)
    removed = 0
    batches = 0
    cutoff: datetime | None = None
    while max_batches is None or batches < max_batches:
        asked = pace.size
        started = timer()
        if cutoff is None:
            cutoff = clock()
        done, held, more = batch(asked, cutoff)
        took = timer() - started
        pace.took(held)
        removed += done
        batches += 1
        if progress is not None:
            progress(removed)
        if not more:
            break
        # No lock is held here: the checkpoint takes the pause's time, not a writer's.
        # After every batch: the log then starts again from its beginning at the next
        # write (30 to 90 pages at most, measured), where checkpoints every ~250 pages
        # let it grow to 1,000 pages whenever a writer's commit came between a
        # checkpoint and the next batch, and the writers' commits checkpointed it.
        paused = timer()
        if checkpoint is not None:
            checkpoint()
        pause = max(SWEEP_PAUSE_SECONDS, idle_share * took)
        time.sleep(max(0.0, pause - (timer() - paused)))
    return removed, batches


def sweep_expired(
    batch: SweepBatch,
    clock: Callable[[], datetime],
    checkpoint: Callable[[], None] | None,
    *,
    batch_size: int,
    max_duty: float = SWEEP_MAX_DUTY,
    max_batches: int | None = None,
    progress: Callable[[int], None] | None = None,
    timer: Callable[[], float] = time.monotonic,
) -> int:
    """Delete expired retention rows in batches, one write transaction each; how many
    (:meth:`hcat_notify.store.dones_view.Dones.sweep_expired`).

    Args:
        batch: deletes one batch (:func:`session_batch`, :func:`driver_batch`).
        clock: the catalog's clock.
        checkpoint: on SQLite, checkpoints its log without waiting (after every
            batch). None on PostgreSQL, whose writers never wait for the sweep's rows:
            every batch is then ``batch_size`` rows, as one statement does them best.
        batch_size: the most rows one batch deletes.
        max_duty: the most of its wall time the sweep spends in its batches, from
            :data:`SWEEP_LEAST_DUTY` to 1 (:data:`SWEEP_MAX_DUTY`).
        max_batches: stop after this many batches.
        progress: called after each batch with the rows deleted so far.
        timer: the seconds clock that times the batches.

    The sweep deletes the rows expired when its first batch began (``clock()`` then):
    rows that expire while it runs are the next sweep's, so that it ends however
    fast dones expire. It ends at a batch that finds nothing to delete, not at one that
    deletes fewer rows than it asked for: with two sweeps at once, each batch takes the
    rows the other's batch does not hold (``FOR UPDATE SKIP LOCKED`` on PostgreSQL,
    :func:`hcat_notify.store.retention.delete_expired`).

    On SQLite the batches are sized by the time they hold the writers' lock (what a
    writer waits for), the pauses by the whole batch's (what the sweep costs the CPU).

    Raises:
        InvalidInputError: ``batch_size`` is below 1, or ``max_duty`` below
            :data:`SWEEP_LEAST_DUTY` or above 1.
    """

    def paced(asked: int, cutoff: datetime) -> tuple[int, float, bool]:
        deleted, held = batch(asked, cutoff)
        return deleted, held, deleted > 0

    removed, batches = run_paced(
        paced,
        clock,
        checkpoint,
        batch_size=batch_size,
        max_duty=max_duty,
        max_batches=max_batches,
        progress=progress,
        timer=timer,
    )
    logger.debug("swept %d expired retention rows in %d batches", removed, batches)
    return removed
