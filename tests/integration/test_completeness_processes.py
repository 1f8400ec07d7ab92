"""Completeness across processes: writers racing for a set's last two parts on
PostgreSQL end with exactly one done every round, never none; 72 ``hcat-notify
partitions add`` processes completing a day end with one done, after the last part; a
rule change waits for an add in flight."""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from hcat_notify.config import Settings, load_settings
from hcat_notify.model.events import EventType
from hcat_notify.store import Catalog, NewPartition
from hcat_notify.store import partitions as partition_ops
from tests.integration.cli_processes import run_commands
from tests.integration.delivery import cli_env

pytestmark = pytest.mark.integration

TABLE = "web.clicks"
ROUNDS = 30
BARRIER_TIMEOUT = 120.0


def _dones(catalog: Catalog, spec: str) -> list[Any]:
    return [
        event
        for event in catalog.outbox.catch_up([TABLE], cursor=0)
        if event.event_type is EventType.MARK_SET_DONE and event.headers["HCAT_SPEC"] == spec
    ]


def _writer(url: str, home: str, region: str, barrier: Any, rounds: int) -> None:
    """One racing writer: at each round's barrier, add this region's part of the day."""
    with Catalog.open(load_settings(home=home, db_url=url), upgrade=False) as catalog:
        for day in range(rounds):
            barrier.wait(BARRIER_TIMEOUT)
            catalog.add_partitions(
                TABLE, [NewPartition({"datestamp": f"d{day:03d}", "region": region}, "/w")]
            )
            barrier.wait(BARRIER_TIMEOUT)


def _waiting_on_locks(engine: Any) -> int:
    with engine.connect() as connection:
        return int(
            connection.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()"
                )
            ).scalar_one()
        )


def _until(condition: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the condition"
        time.sleep(0.01)


def test_racing_writers_of_the_last_two_parts_end_with_exactly_one_done(
    fresh_postgres_url: str, tmp_path: Path
) -> None:
    settings = load_settings(home=tmp_path / "home", db_url=fresh_postgres_url)
    catalog = Catalog.open(settings)
    engine = create_engine(fresh_postgres_url)
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(3)
    writers = [
        context.Process(
            target=_writer,
            args=(fresh_postgres_url, str(tmp_path / "home"), region, barrier, ROUNDS),
        )
        for region in ("a", "b")
    ]
    try:
        catalog.create_table(TABLE, location="/w/clicks", partition_keys=["datestamp", "region"])
        catalog.expect(TABLE, set_keys="datestamp", parts=["region=a,b,c"])
        for writer in writers:
            writer.start()
        orders = set()
        for day in range(ROUNDS):
            spec = f"datestamp=d{day:03d}"
            catalog.add_partitions(
                TABLE, [NewPartition({"datestamp": f"d{day:03d}", "region": "c"}, "/w")]
            )
            held = day % 2 == 0
            with engine.connect() as holder:
                if held:
                    # Hold the set's lock so that both writers are surely in flight at
                    # once: each waits for the set (partitions add counts its set ahead,
                    # in the round trip of its check, before it inserts its part).
                    holder.execute(
                        text("SELECT * FROM hcat_set_states WHERE set_spec = :spec FOR UPDATE"),
                        {"spec": spec},
                    )
                barrier.wait(BARRIER_TIMEOUT)
                if held:
                    _until(lambda: _waiting_on_locks(engine) >= 2)
                holder.rollback()
            barrier.wait(BARRIER_TIMEOUT)
            dones = _dones(catalog, spec)
            assert len(dones) == 1, f"round {day}: {len(dones)} dones"
            adds = {
                event.headers["HCAT_SPEC"]: event.event_id
                for event in catalog.outbox.catch_up([TABLE], cursor=0)
                if event.event_type is EventType.ADD_PARTITION
            }
            first = min((f"{spec}/region=a", f"{spec}/region=b"), key=adds.__getitem__)
            orders.add(first[-1])
            assert dones[0].event_id > max(adds[f"{spec}/region={r}"] for r in "abc")
        for writer in writers:
            writer.join(60)
            assert writer.exitcode == 0
        assert orders == {"a", "b"}  # both orders happened
    finally:
        for writer in writers:
            if writer.is_alive():
                writer.kill()
        engine.dispose()
        catalog.close()


def test_72_partitions_add_processes_complete_a_day_with_one_done(
    db_url: str, tmp_path: Path
) -> None:
    # 72 processes, 4 at a time, in random order, the last part alone after all the
    # others; forked from a server that imported the CLI once (cli_processes: start-up
    # is most of each process's cost). SQLite's writers take turns on its lock,
    # PostgreSQL's run at once and meet at the set's row.
    settings: Settings = load_settings(home=tmp_path / "home", db_url=db_url)
    with Catalog.open(settings) as catalog:
        catalog.create_table(
            TABLE, location=str(tmp_path / "clicks"), partition_keys=["datestamp", "region", "hour"]
        )
        catalog.expect(TABLE, set_keys="datestamp", parts=["region=us,eu,apac", "hour=00..23"])
    parts = [(region, f"{hour:02d}") for region in ("us", "eu", "apac") for hour in range(24)]
    random.Random(28).shuffle(parts)
    commands = []
    for region, hour in parts:
        where = tmp_path / "landing" / region / hour
        where.mkdir(parents=True)
        (where / "part-0.parquet").write_bytes(b"x")
        commands.append(
            [
                *("partitions", "add", TABLE, "datestamp=20261126"),
                *(f"region={region}", f"hour={hour}", "--location", str(where)),
            ]
        )
    env = cli_env(settings)
    ended = run_commands(env, commands[:-1], tmp_path / "out", at_once=4)
    assert [code for code, _ in ended] == [0] * 71, [out for code, out in ended if code][:1]
    with Catalog.open(settings, upgrade=False) as catalog:
        assert _dones(catalog, "datestamp=20261126") == []
        ((code, output),) = run_commands(env, commands[-1:], tmp_path / "last", at_once=1)
        assert code == 0, output
        (done,) = _dones(catalog, "datestamp=20261126")
        events = catalog.outbox.catch_up([TABLE], cursor=0)
        assert done.event_id == max(event.event_id for event in events)
        assert done.headers["HCAT_DONE_REASON"] == "rule"
        adds = [event for event in events if event.event_type is EventType.ADD_PARTITION]
        assert len(adds) == 72


def test_a_rule_change_waits_for_an_add_in_flight(
    fresh_postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An add holds its table's row FOR SHARE, so a rule change made while it is in
    flight waits for it: the add's set is judged by the rule in force when it commits,
    and the change then finds the set done (one done), never judged twice."""
    settings = load_settings(home=tmp_path / "home", db_url=fresh_postgres_url)
    engine = create_engine(fresh_postgres_url)
    catalog = Catalog.open(settings)
    catalog.create_table(TABLE, location="/w/clicks", partition_keys=["datestamp", "region"])
    first = catalog.expect(TABLE, set_keys="datestamp", parts=["region=a,b,c"])
    catalog.add_partitions(
        TABLE, [NewPartition({"datestamp": "d", "region": region}, "/w") for region in "ab"]
    )
    paused, go = threading.Event(), threading.Event()
    add = partition_ops.add_partitions

    def add_when_told(*args: Any, **kwargs: Any) -> Any:
        paused.set()  # the table's row is read (and held FOR SHARE) already
        assert go.wait(BARRIER_TIMEOUT)
        return add(*args, **kwargs)

    monkeypatch.setattr(partition_ops, "add_partitions", add_when_told)
    last = NewPartition({"datestamp": "d", "region": "c"}, "/w")
    with ThreadPoolExecutor(max_workers=2) as pool:
        try:
            adding = pool.submit(catalog.add_partitions, TABLE, [last])
            assert paused.wait(BARRIER_TIMEOUT)
            changing = pool.submit(
                catalog.expect, TABLE, set_keys="datestamp", parts=["region=a,b"]
            )
            _until(lambda: _waiting_on_locks(engine) >= 1)
            assert not changing.done()
        finally:
            go.set()
        adding.result(BARRIER_TIMEOUT)
        second = changing.result(BARRIER_TIMEOUT)
    try:
        (done,) = _dones(catalog, "datestamp=d")
        assert (done.headers["HCAT_RULE_VERSION"], done.headers["HCAT_SET_GENERATION"]) == (
            str(first),
            "1",
        )
        assert second == first + 1
    finally:
        engine.dispose()
        catalog.close()
