"""The sweep's batches: sized by time, one statement each, SQLite's log checkpointed
between them (issue 31: writers keep their latency while a sweep runs)."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text

from hcat_notify.config import Settings, load_settings
from hcat_notify.errors import InvalidInputError
from hcat_notify.store import Catalog, sweep
from hcat_notify.store.quick import sqlite_file
from hcat_notify.store.sweep import SWEEP_BATCH_SECONDS, SweepPace

EXPIRED = 300
LIVE = 20
PER_ROW = 50e-6  # seconds a row "takes" by the fake timer: 20 rows fit in a batch
LIVE_OLDER = 500
WAITED = 0.05  # seconds a batch waits for a writer's lock, by the fake timer


class _Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@dataclass
class _Statements:
    """What a sweep does: the statements it runs (a session's by SQLAlchemy's events, the
    driver's on SQLite by its trace), the rows each batch deleted (by its progress), and
    a timer that advances only as rows leave the table (PER_ROW each) or as ``waited``
    says: the batches' time without a wall clock."""

    count: Callable[[], int]
    seen: list[str] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)
    waited: float = 0.0
    first: int = -1

    def __post_init__(self) -> None:
        self.first = self.count()

    def timer(self) -> float:
        return (self.first - self.count()) * PER_ROW + self.waited

    def progress(self, removed: int) -> None:
        self.removed.append(removed)

    @property
    def deleted(self) -> list[int]:
        """The rows each batch deleted."""
        before = [0, *self.removed[:-1]]
        return [after - was for was, after in zip(before, self.removed, strict=True)]

    def after(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        self.seen.append(statement)


def _expired_and_live(
    opened: Catalog, settings: Settings, expired: int, clock: _Clock | None = None
) -> Catalog:
    """``opened`` with ``expired`` expired dones (of web.old) and LIVE live ones (of
    web.kept), seen through a clock (``clock``, else a new one) two days later."""
    clock = _Clock() if clock is None else clock
    catalog = Catalog(opened._engine, settings, clock=clock)
    for name, retention in (("web.old", timedelta(days=1)), ("web.kept", timedelta(days=30))):
        catalog.create_table(
            name, location=f"/data/{name}", partition_keys=["ds"], retention=retention
        )
    for n in range(expired):
        catalog.mark_set_done("web.old", {"ds": str(n)})
    for n in range(LIVE):
        catalog.mark_set_done("web.kept", {"ds": str(n)})
    clock.now += timedelta(days=2)
    return catalog


@pytest.fixture
def swept(settings: Settings) -> Iterator[tuple[Catalog, _Statements]]:
    """A catalog holding EXPIRED expired dones and LIVE live ones, its statements
    recorded from then on (counted apart, by another engine)."""
    counting = create_engine(settings.database_url)

    def count() -> int:
        with counting.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM hcat_mark_set_done")).scalar_one())

    try:
        with Catalog.open(settings) as opened:
            catalog = _expired_and_live(opened, settings, EXPIRED)
            statements = _Statements(count)
            if opened._engine.dialect.name != "sqlite":
                event.listen(opened._engine, "after_cursor_execute", statements.after)
            else:  # every statement, a session's or the driver's
                event.listen(
                    opened._engine,
                    "connect",
                    lambda dbapi, _record: dbapi.set_trace_callback(statements.seen.append),
                )
                opened._engine.dispose()  # the connections from now on are traced
            yield catalog, statements
    finally:
        counting.dispose()


def test_each_batch_is_one_delete_statement(swept: tuple[Catalog, _Statements]):
    catalog, statements = swept
    assert catalog.dones.sweep_expired(batch_size=100, progress=statements.progress) == EXPIRED
    assert sum(statements.deleted) == EXPIRED
    assert statements.deleted[-1] == 0
    # The ids are not read into the process and sent back: one statement a batch.
    reads = [s for s in statements.seen if "FROM hcat_mark_set_done" in s]
    assert len(reads) == len(statements.deleted)
    assert all(s.lstrip().upper().startswith("DELETE") for s in reads), reads
    assert len(catalog.retained_dones(["web.kept"])) == LIVE
    assert catalog.dones.sweep_expired() == 0


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_sqlite_batches_hold_the_rows_that_fit_their_time(swept: tuple[Catalog, _Statements]):
    # SQLite has one writer at a time: a writer waits for the batch that holds the lock
    catalog, statements = swept
    removed = catalog.dones.sweep_expired(
        batch_size=1000, timer=statements.timer, progress=statements.progress
    )
    assert removed == EXPIRED
    fit = int(SWEEP_BATCH_SECONDS / PER_ROW)
    first, *rest = statements.deleted
    assert first <= 100  # a first guess, then by time
    assert rest, statements.deleted
    assert all(n <= fit for n in rest), statements.deleted


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_sqlite_batch_is_sized_by_the_time_it_held_the_lock_not_by_its_wait_for_it(
    swept: tuple[Catalog, _Statements], settings: Settings, monkeypatch: pytest.MonkeyPatch
):
    # The first batch finds a writer holding the lock and waits for it (WAITED by the
    # timer): the wait was the writer's time, not the batch's rows'. A batch sized by
    # it would ask for fewer rows than fit (10, not 20), the sweep slower for nothing.
    catalog, statements = swept
    path = sqlite_file(settings.database_url)
    assert path is not None
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")

    def sleep(seconds: float) -> None:  # the sweep's poll for the lock, then its pauses
        if writer.in_transaction:
            statements.waited += WAITED
            writer.execute("COMMIT")

    monkeypatch.setattr("hcat_notify.store.engine.time.sleep", this_threads_sleep(sleep))
    try:
        removed = catalog.dones.sweep_expired(
            batch_size=1000, timer=statements.timer, progress=statements.progress
        )
    finally:
        writer.close()
    assert removed == EXPIRED
    assert statements.waited == WAITED  # the first batch waited, once
    assert statements.deleted[:2] == [100, int(SWEEP_BATCH_SECONDS / PER_ROW)]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_sqlite_batches_grow_while_rows_are_cheap_but_never_past_the_batch_size(
    swept: tuple[Catalog, _Statements],
):
    catalog, statements = swept
    removed = catalog.dones.sweep_expired(
        batch_size=150, timer=lambda: 0.0, progress=statements.progress
    )
    assert removed == EXPIRED
    assert statements.deleted == [100, 150, 50, 0]  # the sweep ends at an empty batch


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_postgresql_batches_are_the_batch_size(swept: tuple[Catalog, _Statements]):
    # PostgreSQL's writers never wait for the rows a sweep deletes: fewer, larger
    # statements cost its CPU the least
    catalog, statements = swept
    removed = catalog.dones.sweep_expired(
        batch_size=150, timer=statements.timer, progress=statements.progress
    )
    assert removed == EXPIRED
    assert statements.deleted == [150, 150, 0]


def test_the_sweep_checkpoints_sqlites_log_between_batches(tmp_path: Path):
    # SQLite only: its automatic checkpoint (at 1,000 pages) falls to whichever
    # connection's commit crosses it, a writer's as often as the sweep's
    settings = load_settings(home=tmp_path / "home", db_url=f"sqlite:///{tmp_path}/c.db")
    traced: list[str] = []
    clock = _Clock()
    with Catalog.open(settings) as opened:
        catalog = Catalog(opened._engine, settings, clock=clock)
        catalog.create_table(
            "web.old", location="/data/web/old", partition_keys=["ds"], retention=timedelta(1)
        )
        for n in range(60):
            catalog.mark_set_done("web.old", {"ds": str(n)})
        clock.now += timedelta(days=2)
        event.listen(
            opened._engine,
            "connect",
            lambda dbapi, _record: dbapi.set_trace_callback(traced.append),
        )
        opened._engine.dispose()  # the connections from now on are traced
        assert catalog.dones.sweep_expired(batch_size=20, timer=lambda: 0.0) == 60
    deletes = [n for n, s in enumerate(traced) if s.startswith("DELETE FROM hcat_mark_set_done")]
    checkpoints = [n for n, s in enumerate(traced) if s == "PRAGMA wal_checkpoint(PASSIVE)"]
    assert len(deletes) == 4  # 20 + 20 + 20 + none left
    # one after each batch but the last (which found nothing)
    assert len(checkpoints) == 3, traced
    assert deletes[0] < checkpoints[0] < deletes[1] < checkpoints[1] < deletes[2], traced


def this_threads_sleep(then: Callable[[float], Any]) -> Callable[[float], None]:
    """A ``time.sleep`` to patch in: ``then`` for this thread's calls, the real sleep for
    every other thread's (the patch reaches every thread of the worker: py4j's finalizer
    of a Spark session, a broker fixture's reader; their sleeps counted as the sweep's
    pauses once, 186,498 of them)."""
    me, real = threading.get_ident(), time.sleep

    def sleep(seconds: float) -> None:
        if threading.get_ident() == me:
            then(seconds)
        else:
            real(seconds)

    return sleep


class TestPace:
    def test_a_batch_holds_the_rows_that_fit_the_target(self):
        pace = SweepPace(1000, target=0.001)
        assert pace.size == 100
        assert pace.took(100 * 50e-6) == 20  # 50 us a row
        assert pace.took(20 * 50e-6) == 20

    def test_one_batch_that_waited_for_the_cpu_does_not_shrink_the_next(self):
        pace = SweepPace(1000, target=0.001)
        for _ in range(3):
            pace.took(pace.size * 10e-6)
        assert pace.size == 100
        assert pace.took(0.050) == 100  # 50 ms: descheduled, not 500 us a row

    def test_it_grows_at_most_twice_at_a_time_to_at_most_the_batch_size(self):
        pace = SweepPace(300, target=0.001)
        assert [pace.took(0.0) for _ in range(3)] == [200, 300, 300]

    def test_it_never_asks_for_fewer_than_a_few_rows(self):
        pace = SweepPace(1000, target=0.001)
        assert pace.took(1.0) == 10
        assert SweepPace(3).took(1.0) == 3


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
@pytest.mark.parametrize(("duty", "idle"), [(None, 2.0), (0.2, 4.0), (1.0, 0.0)])
def test_the_pause_after_a_batch_keeps_the_sweep_within_its_duty(
    swept: tuple[Catalog, _Statements],
    monkeypatch: pytest.MonkeyPatch,
    duty: float | None,
    idle: float,
):
    # By default the sweep keeps at most a third of a core busy (PostgreSQL's writers
    # wait for the CPU, not for its rows): 150 rows "take" 7.5 ms by the timer, so 15 ms
    # of pause; at a duty of 0.2, 30 ms; at 1, the least pause (SWEEP_PAUSE_SECONDS)
    catalog, statements = swept
    pauses: list[float] = []
    monkeypatch.setattr("hcat_notify.store.sweep.time.sleep", this_threads_sleep(pauses.append))
    removed = catalog.dones.sweep_expired(batch_size=150, max_duty=duty, timer=statements.timer)
    assert removed == EXPIRED
    wanted = max(sweep.SWEEP_PAUSE_SECONDS, idle * 150 * PER_ROW)
    assert pauses == [pytest.approx(wanted)] * 2


@pytest.mark.parametrize("duty", [0.0, -0.1, 1e-300, 0.009, 1.5, float("nan")])
def test_a_duty_below_the_least_or_above_1_is_refused_before_any_batch(duty: float):
    def transaction(**_: Any) -> Any:
        raise AssertionError("no batch may run")

    batch = sweep.session_batch(transaction, time.monotonic)
    with pytest.raises(InvalidInputError, match=r"duty must be from 0\.01 to 1"):
        sweep.sweep_expired(batch, _Clock(), None, batch_size=10, max_duty=duty)


def test_a_batch_reads_expired_rows_only_not_older_live_ones(tmp_path: Path):
    # Dones of a table kept 30 days, older than those of a table kept a day: a batch
    # that walked the primary key would pass every one of them while it holds SQLite's
    # lock, batch after batch. Counted in SQLite's virtual machine steps.
    settings = load_settings(home=tmp_path / "home", db_url=f"sqlite:///{tmp_path}/c.db")
    clock = _Clock()
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    with Catalog.open(settings) as opened:
        catalog = Catalog(opened._engine, settings, clock=clock)
        for name, days in (("web.kept", 30), ("web.old", 1)):
            catalog.create_table(
                name, location=f"/data/{name}", partition_keys=["ds"], retention=timedelta(days)
            )
        for n in range(LIVE_OLDER):
            catalog.mark_set_done("web.kept", {"ds": str(n)})
        for n in range(30):
            catalog.mark_set_done("web.old", {"ds": str(n)})
        clock.now += timedelta(days=2)
        event.listen(
            opened._engine, "connect", lambda dbapi, _record: dbapi.set_progress_handler(step, 10)
        )
        opened._engine.dispose()
        assert catalog.dones.sweep_expired(batch_size=5, timer=lambda: 0.0) == 30
        assert len(catalog.retained_dones(["web.kept"])) == LIVE_OLDER
    # about 860 steps of 10 instructions; walking the primary key, 2,260
    assert steps[0] < 1_500, steps[0]


BOTH = 400  # expired rows two sweeps share
BOTH_BATCH = 10


def test_two_sweeps_at_once_delete_every_expired_row_once_and_neither_stops_early(
    settings: Settings,
):
    # On PostgreSQL a batch that found its rows taken by the other sweep's batch (it
    # waited for them, then they were gone) deleted fewer than it asked for, and that
    # sweep stopped with most of the rows still there; the two could also deadlock
    with Catalog.open(settings) as opened:
        catalog = _expired_and_live(opened, settings, BOTH)

        def expired_left() -> int:
            with opened._engine.connect() as conn:
                rows = conn.execute(text("SELECT count(*) FROM hcat_mark_set_done")).scalar()
            return int(rows or 0) - LIVE

        start = threading.Barrier(2)

        def run(_: int) -> tuple[int, int]:
            """The rows this sweep removed, and the expired ones left when it ended."""
            start.wait(10)
            removed = catalog.dones.sweep_expired(batch_size=BOTH_BATCH)
            return removed, expired_left()

        with ThreadPoolExecutor(2) as pool:  # an error in either is raised here
            ended = list(pool.map(run, range(2), timeout=60))
        assert sum(removed for removed, _ in ended) == BOTH, ended
        # a sweep ends only when what is left is the other's batch under way, at most
        assert all(left <= BOTH_BATCH for _, left in ended), ended
        assert expired_left() == 0
        assert len(catalog.retained_dones(["web.kept"])) == LIVE


def test_rows_that_expire_while_the_sweep_runs_are_left_to_the_next_sweep(settings: Settings):
    """The sweep deletes what had expired when it began: dones that keep expiring under
    it (here the clock jumps past every live row's expiry after the first batch) do not
    keep it going, so it ends however fast they expire; the next sweep takes them."""
    with Catalog.open(settings) as opened:
        clock = _Clock()
        catalog = _expired_and_live(opened, settings, EXPIRED, clock)

        def later(done: int) -> None:  # after each batch: a month on
            clock.now += timedelta(days=31)

        swept = catalog.dones.sweep_expired(batch_size=100, max_duty=1, progress=later)
        assert swept == EXPIRED  # not the LIVE rows that expired meanwhile
        assert catalog.dones.sweep_expired(batch_size=100, max_duty=1) == LIVE
