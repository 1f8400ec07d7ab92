"""Durable subscribers and per-topic cursors, with real processes, broker and databases."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hcat_notify.config import Settings
from hcat_notify.consumer import NotificationConsumer
from hcat_notify.errors import SubscriberTakenOverError, TableDroppedError
from hcat_notify.model.events import EventType
from hcat_notify.model.topics import topic_bucket
from hcat_notify.store import Catalog, NewPartition, TableInfo
from hcat_notify.store.group import MemberReport
from tests.integration.delivery import CliProcess, cli_env, run_cli, running_relay

pytestmark = pytest.mark.integration

CONSUMER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from hcat_notify import NotificationConsumer, load_settings

    table, name, log, stop_after = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    idle = float(sys.argv[5])
    def handle(n):
        if stop_after and len(log.read_text().split()) >= stop_after:
            Path(str(log) + ".blocked").write_text(str(n.event_id))
            time.sleep(3600)  # killed in here: this one is never handled
        with log.open("a") as out:
            out.write(f"{n.event_id}\\n")
    with NotificationConsumer([table], settings=load_settings(), subscriber=name) as c:
        Path(str(log) + ".ready").write_text("subscribed and caught up")
        c.run(handle, timeout=idle)
    """
)


def _consumer(
    settings: Settings, table: str, log: Path, stop_after: int, idle: float = 3
) -> subprocess.Popen[bytes]:
    """A durable subscriber "nightly" in its own process; it stops after ``idle`` s
    without a notification, or blocks in the handler after ``stop_after`` handled."""
    Path(str(log) + ".ready").unlink(missing_ok=True)
    return subprocess.Popen(
        [sys.executable, "-c", CONSUMER, table, "nightly", str(log), str(stop_after), str(idle)],
        env=cli_env(settings),
    )


def _wait_for(path: Path, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, f"consumer exited with {process.returncode}"
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


def _handled(log: Path) -> list[int]:
    return [int(line) for line in log.read_text().split()]


@pytest.mark.parametrize("live", [False, True], ids=["retained", "live"])
def test_a_killed_durable_subscriber_resumes_exactly_where_it_was(
    delivery_settings: Settings, delivery_catalog: Catalog, clicks: TableInfo, tmp_path: Path, live
):
    """Handle 5 of 10, kill -9 the consumer in the 6th handler, restart: exactly the
    other 5, whether the 10 were retained before it first started or arrived live."""
    log = tmp_path / "handled.log"
    log.write_text("")
    table = str(clicks.name)
    if live:  # a first run that caught up: the next ones are live events
        first = _consumer(delivery_settings, table, log, 0)
        assert first.wait(60) == 0
    with running_relay(delivery_settings):

        def write() -> list[int]:
            return [
                delivery_catalog.mark_set_done(clicks.name, {"datestamp": str(n)})
                for n in range(10)
            ]

        if live:  # subscribed before the events exist: they can only arrive live
            process = _consumer(delivery_settings, table, log, 5, idle=600)
            _wait_for(Path(str(log) + ".ready"), process)
            ids = write()
        else:
            ids = write()
            process = _consumer(delivery_settings, table, log, 5, idle=600)
        _wait_for(Path(str(log) + ".blocked"), process)
        process.send_signal(signal.SIGKILL)
        process.wait(30)
        assert _handled(log) == ids[:5]
        restarted = _consumer(delivery_settings, table, log, 0)
        assert restarted.wait(60) == 0
    assert _handled(log) == ids  # the other 5, each once, in order


def test_a_subscriber_killed_while_idle_does_not_handle_its_last_event_again(
    delivery_settings: Settings, delivery_catalog: Catalog, clicks: TableInfo, tmp_path: Path
):
    """Five live events handled, then nothing arrives; kill -9 while it waits: the
    watermark already holds the fifth, so a restart handles none of them again."""
    log = tmp_path / "handled.log"
    log.write_text("")
    table = str(clicks.name)
    with running_relay(delivery_settings):
        process = _consumer(delivery_settings, table, log, 0, idle=600)
        _wait_for(Path(str(log) + ".ready"), process)
        ids = [delivery_catalog.mark_set_done(clicks.name, {"datestamp": str(n)}) for n in range(5)]

        def watermark() -> int | None:
            (info,) = [s for s in delivery_catalog.subscriptions.every() if s.name == "nightly"]
            return info.watermarks.get(clicks.topic)

        deadline = time.monotonic() + 60
        while watermark() != ids[-1]:
            assert time.monotonic() < deadline, f"watermark stuck at {watermark()}"
            time.sleep(0.05)
        assert _handled(log) == ids
        process.send_signal(signal.SIGKILL)
        process.wait(30)
        later = delivery_catalog.mark_set_done(clicks.name, {"datestamp": "later"})
        restarted = _consumer(delivery_settings, table, log, 0)
        assert restarted.wait(60) == 0
    assert _handled(log) == [*ids, later]  # nothing twice, the new one once


def test_a_second_process_under_a_live_name_is_refused_unless_it_takes_over(
    delivery_settings: Settings, delivery_catalog: Catalog, clicks: TableInfo
):
    table = str(clicks.name)
    first = CliProcess(delivery_settings, "-v", "watch", table, "--subscriber", "s1")
    deadline = time.monotonic() + 30
    while "claimed by" not in first.stderr and time.monotonic() < deadline:
        time.sleep(0.05)
    before = [(s.name, s.owner) for s in delivery_catalog.subscriptions.every()]
    refused = run_cli(delivery_settings, "watch", table, "--subscriber", "s1", "--timeout", "1")
    assert refused.returncode == 2
    assert refused.stderr.startswith("hcat-notify: error: subscriber s1 is in use by ")
    assert "--takeover" in refused.stderr
    assert refused.stderr.count("\n") == 1
    # nothing changed: the first process still owns the name
    assert [(s.name, s.owner) for s in delivery_catalog.subscriptions.every()] == before
    taken = run_cli(
        delivery_settings, "watch", table, "--subscriber", "s1", "--takeover", "--timeout", "1"
    )
    assert taken.returncode == 0, taken.stderr
    code, err = first.finish(timeout=60)  # the first learns at its next heartbeat
    assert code == 2
    assert "subscriber s1 was taken over by" in err.splitlines()[-1]


def test_subscribers_lists_owners_watermarks_and_lag(
    delivery_settings: Settings, delivery_catalog: Catalog, clicks: TableInfo
):
    with running_relay(delivery_settings):
        ids = [delivery_catalog.mark_set_done(clicks.name, {"datestamp": str(n)}) for n in range(3)]
        with NotificationConsumer(
            [clicks.name], settings=delivery_settings, subscriber="lister"
        ) as consumer:
            got = [n.event_id for n in consumer.notifications(timeout=3)]
    assert got == ids
    delivery_catalog.mark_set_done(clicks.name, {"datestamp": "later"})
    (listed,) = json.loads(run_cli(delivery_settings, "-o", "json", "subscribers").stdout)
    assert listed["subscriber"] == "lister"
    assert listed["owner"] is None  # stopped cleanly: gave the name up
    assert listed["watermarks"] == {clicks.topic: ids[-1]}
    assert listed["lag"] == {clicks.topic: 1}
    # what its start stored it follows: the outbox's sweep holds those topics for it
    assert (listed["followed_count"], listed["followed_topics"]) == (1, [clicks.topic])
    assert listed["followed_tables"] == [str(clicks.name)]
    text = run_cli(delivery_settings, "subscribers").stdout
    assert text.startswith("lister: nobody (stopped)")
    assert "1 event(s) behind" in text
    assert text.rstrip().endswith("follows 1 topic(s)")


@contextlib.contextmanager
def _slow_member(catalog: Catalog, member: str, bucket: int) -> Iterator[threading.Event]:
    """A member that owns ``bucket`` and heartbeats until the event is set: a slow relay."""
    catalog.group.heartbeat(MemberReport(member, "elsewhere", 1))
    epoch = catalog.group.claim_controller(member, ttl=5)
    assert epoch is not None
    assert catalog.group.assign(member, epoch, {bucket: member})
    catalog.group.resign_controller(member, epoch)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(0.3):
            catalog.group.heartbeat(MemberReport(member, "elsewhere", 1))

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join(10)


def _owner_of(catalog: Catalog, topic: str) -> str | None:
    buckets = catalog.group.buckets()
    return buckets[topic_bucket(topic, len(buckets))].owner


def test_a_delayed_topic_is_not_lost_after_a_restart_with_the_cursor(
    delivery_settings: Settings, delivery_catalog: Catalog, clicks: TableInfo
):
    """Events reach the wire in id order per topic, not globally: while one topic's
    bucket is held by a slow member, another topic's later event goes first. A single
    integer cursor would then skip the delayed event after a restart (issue 9)."""
    db = clicks.name.db
    with (
        _slow_member(delivery_catalog, "slow", 0) as stop,
        running_relay(
            delivery_settings, member_id="fast", session_timeout=2.0, heartbeat_interval=0.5
        ),
    ):
        deadline = time.monotonic() + 20
        while None in {b.owner for b in delivery_catalog.group.buckets()}:
            assert time.monotonic() < deadline, "the buckets were never assigned"
            time.sleep(0.05)
        # one table in a bucket of the slow member, one in a bucket of the relay
        names = [f"t{n}" for n in range(200)]
        slow_name = next(
            n for n in names if _owner_of(delivery_catalog, f"hcat.{db}.{n}") == "slow"
        )
        fast_name = next(
            n for n in names if _owner_of(delivery_catalog, f"hcat.{db}.{n}") == "fast"
        )
        slow = delivery_catalog.create_table(
            f"{db}.{slow_name}", location="/s", partition_keys=["ds"]
        )
        fast = delivery_catalog.create_table(
            f"{db}.{fast_name}", location="/f", partition_keys=["ds"]
        )
        tables = [slow.name, fast.name]
        with NotificationConsumer(tables, settings=delivery_settings) as first:
            delayed = delivery_catalog.mark_set_done(slow.name, {"ds": "1"})
            later = delivery_catalog.mark_set_done(fast.name, {"ds": "1"})
            got = [n.event_id for n in first.notifications(timeout=5)]
            cursor = str(first.cursor)
        assert got == [later]  # the other topic's later event came alone
        assert delayed < later
        stop.set()  # the slow member dies; its buckets move; the delayed event goes out
        deadline = time.monotonic() + 30
        while delivery_catalog.outbox.backlog()[0] and time.monotonic() < deadline:
            time.sleep(0.1)
        with NotificationConsumer(tables, settings=delivery_settings, cursor=cursor) as second:
            resumed = [n.event_id for n in second.notifications(timeout=3)]
    assert resumed == [delayed]


def test_the_owner_that_was_taken_over_stops(
    delivery_settings: Settings, delivery_catalog: Catalog, clicks: TableInfo
):
    with NotificationConsumer(
        [clicks.name], settings=delivery_settings, subscriber="shared"
    ) as consumer:
        delivery_catalog.subscriptions.claim("shared", "someone:else", takeover=True)
        with pytest.raises(SubscriberTakenOverError, match="taken over by someone:else"):
            list(consumer.notifications(timeout=15))


def test_watch_prints_a_cursor_that_resumes_right_after_its_line(
    delivery_settings: Settings, delivery_catalog: Catalog, clicks: TableInfo
):
    table = str(clicks.name)
    with running_relay(delivery_settings):
        ids = [delivery_catalog.mark_set_done(clicks.name, {"datestamp": str(n)}) for n in range(3)]
        first = run_cli(delivery_settings, "watch", table, "--json", "--timeout", "3")
        assert first.returncode == 0, first.stderr
        lines = [json.loads(line) for line in first.stdout.splitlines()]
        assert [line["event_id"] for line in lines] == ids
        assert all(line["cursor"] for line in lines)
        later = delivery_catalog.mark_set_done(clicks.name, {"datestamp": "later"})
        resumed = run_cli(
            delivery_settings,
            "watch",
            table,
            "--json",
            "--timeout",
            "3",
            "--cursor",
            lines[1]["cursor"],
        )
    assert resumed.returncode == 0, resumed.stderr
    assert [json.loads(line)["event_id"] for line in resumed.stdout.splitlines()] == [ids[2], later]


def test_wait_under_a_durable_name_moves_its_watermark_and_gives_the_name_up(
    delivery_settings: Settings, delivery_catalog: Catalog, clicks: TableInfo
):
    table = str(clicks.name)
    with running_relay(delivery_settings):
        waiter = CliProcess(
            delivery_settings,
            "-v",
            "wait",
            table,
            "datestamp=1",
            "--subscriber",
            "w1",
            "--timeout",
            "60",
        )
        other = delivery_catalog.mark_set_done(clicks.name, {"datestamp": "0"})

        def watermark() -> int | None:
            found = [s for s in delivery_catalog.subscriptions.every() if s.name == "w1"]
            return found[0].watermarks.get(clicks.topic) if found else None

        deadline = time.monotonic() + 60
        while watermark() != other:  # handled (caught up or live): it is waiting now
            assert waiter.proc.poll() is None, waiter.stderr
            assert time.monotonic() < deadline, waiter.stderr
            time.sleep(0.05)
        done = delivery_catalog.mark_set_done(clicks.name, {"datestamp": "1"})
        code, err = waiter.finish(timeout=60)
    assert code == 0, err
    (listed,) = json.loads(run_cli(delivery_settings, "-o", "json", "subscribers").stdout)
    assert (listed["subscriber"], listed["owner"]) == ("w1", None)
    assert listed["watermarks"][clicks.topic] == done


def test_a_subscriber_away_while_its_table_was_dropped_learns_of_the_drop(
    delivery_settings: Settings, delivery_catalog: Catalog, clicks: TableInfo
):
    done = delivery_catalog.mark_set_done(clicks.name, {"datestamp": "1"})
    with NotificationConsumer([clicks.name], settings=delivery_settings, subscriber="s") as c:
        assert next(c.notifications(timeout=5)).event_id == done
    # while it is away: a partition, then the drop
    (added,) = delivery_catalog.add_partitions(
        clicks.name, [NewPartition({"datestamp": "2", "region": "a"}, "/w")]
    )
    drop = delivery_catalog.tables.drop(clicks.name).event_ids[-1]
    gone = f"^table {clicks.name} was dropped \\(event {drop}\\)$"
    with NotificationConsumer([clicks.name], settings=delivery_settings, subscriber="s") as c:
        notifications = c.notifications(timeout=5)
        got = [next(notifications), next(notifications)]
        with pytest.raises(TableDroppedError, match=gone):
            next(notifications)
    assert [(n.event_type, n.event_id) for n in got] == [
        (EventType.ADD_PARTITION, added.event_id),
        (EventType.DROP_TABLE, drop),
    ]
    # The drop was handled: the next start says it at once, with nothing to deliver.
    with NotificationConsumer([clicks.name], settings=delivery_settings, subscriber="s") as c:
        with pytest.raises(TableDroppedError, match=gone):
            next(c.notifications(timeout=5))
    # Re-created under the same name: the old table's drop is not replayed.
    delivery_catalog.create_table(
        clicks.name, location="/data/clicks", partition_keys=["datestamp", "region"]
    )
    again = delivery_catalog.mark_set_done(clicks.name, {"datestamp": "3"})
    with NotificationConsumer([clicks.name], settings=delivery_settings, subscriber="s") as c:
        assert [n.event_id for n in c.notifications(timeout=2)] == [again]
