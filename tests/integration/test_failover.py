"""No single broker: a master/slave pair, and a relay and consumers that move by themselves.

Real brokers (deploy/local/activemq.sh start --pair, one KahaDB store), a real relay and
NotificationConsumer, a real JMS client over ActiveMQ's failover transport. Which broker
is master changes from test to test; ``failover_pair`` leaves both running afterwards.
The JDBC test runs a pair of its own on the JDBC store (``jdbc_pair``: the test
PostgreSQL, the lease locker).

Duration: the SIGSTOP test holds the master for the 30 s the issue asks for and runs
once, on SQLite; the JDBC test and the authorization test run once each; the others run
on SQLite and PostgreSQL (``db_url``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import stomp

from hcat_notify.broker import HEARTBEAT_TIMEOUT
from hcat_notify.config import Settings
from hcat_notify.consumer import Notification, Source
from hcat_notify.store import Catalog, TableInfo
from hcat_notify.writer import send_mark_set_done
from tests.fixtures.broker import RecordingListener, stomp_close
from tests.fixtures.broker_pair import BrokerPair, PairMember, gone
from tests.fixtures.jms import JmsProbe
from tests.integration.delivery import CliProcess, broker_settings
from tests.integration.failover import Delivery, ReceiptLog, Stream, delivering

pytestmark = pytest.mark.integration

TOTAL = 2000


@pytest.fixture
def pair_settings(failover_pair: BrokerPair, db_url: str, tmp_path: Path) -> Settings:
    return broker_settings(failover_pair, tmp_path / "home", db_url)


@pytest.fixture
def pair_catalog(pair_settings: Settings) -> Iterator[Catalog]:
    with Catalog.open(pair_settings) as catalog:
        yield catalog


def _tables(catalog: Catalog, count: int = 4) -> list[TableInfo]:
    db = f"f{uuid.uuid4().hex[:10]}"
    return [
        catalog.create_table(
            f"{db}.t{n}", location=f"/data/t{n}", partition_keys=["datestamp", "region"]
        )
        for n in range(count)
    ]


def _assert_each_once_in_topic_order(got: list[int], topics: list[str], stream: Stream) -> None:
    written = stream.ids()
    assert len(got) == len(set(got)), "a notification was delivered twice"
    assert sorted(got) == sorted(i for ids in written.values() for i in ids)
    for topic, ids in written.items():
        in_topic = [event_id for event_id, t in zip(got, topics, strict=True) if t == topic]
        assert in_topic == ids, f"{topic}: not in event-id order"


def _wait(condition: object, timeout: float, what: str) -> float:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)
    return time.monotonic()


def _kill_with_a_batch_in_flight(
    pair: BrokerPair, master: PairMember, receipts: ReceiptLog
) -> float:
    """Hold the relay's next COMMIT (its SENDs sit at the master, uncommitted), kill -9
    the master, let the COMMIT go once the relay has lost the connection; when it died."""
    receipts.hold_commit()
    assert receipts.holding.wait(60), "no batch went out after half the stream"
    killed_at = time.monotonic()
    pair.kill(master)
    (connection,) = receipts.connections
    _wait(lambda: not connection.is_connected, 10, "the relay to see the kill")
    receipts.release()
    return killed_at


def _assert_moved_to_the_slave(
    run: Delivery,
    got: list[Notification],
    stream: Stream,
    tables: list[TableInfo],
    killed_at: float,
    master: PairMember,
    slave: PairMember,
) -> list[int]:
    """What a kill of the master mid-stream must leave: the consumer got every event
    once, in per-topic order, the later ones live from the slave; the relay has a
    receipt for every event (and for the tables' CREATE_TABLE, events 1.. of the fresh
    catalog), after the kill from the slave only; the batch caught in flight was sent
    again to the slave; progress never ran ahead of a receipt. The ids the consumer got
    live after the failover."""
    _assert_each_once_in_topic_order([n.event_id for n in got], [n.topic for n in got], stream)
    receipts = run.receipts
    done = receipts.snapshot()
    late_live = [
        n.event_id
        for n, at in zip(got, run.collector.arrived, strict=True)
        if n.source is Source.LIVE and at > killed_at + 1
    ]
    assert late_live, "the consumer received nothing live after the failover"
    assert all(r.broker == slave.url for i in late_live for r in done[i])

    written = {i for ids in stream.ids().values() for i in ids}
    assert set(done) == written | set(range(1, len(tables) + 1))
    assert all(r.broker == slave.url for rs in done.values() for r in rs if r.at > killed_at)
    assert receipts.held, "no batch was in flight at the kill"
    for event_id in receipts.held:
        assert master.url in receipts.sent[event_id]
        assert [r.broker for r in done[event_id]] == [slave.url]
    assert run.watch.violations == []
    return late_live


def test_kill_master_mid_stream_relay_and_consumers_move_to_the_slave(
    failover_pair: BrokerPair,
    pair_settings: Settings,
    pair_catalog: Catalog,
    jms_probe: JmsProbe,
) -> None:
    pair = failover_pair
    master = pair.master()
    slave = pair.other(master)
    before = pair.status()
    assert f"broker {master.number}: master (pid {master.pid()}" in before
    assert f"broker {slave.number}: slave, waiting for the store lock (pid {slave.pid()}" in before

    tables = _tables(pair_catalog)
    wildcard = f"hcat.{tables[0].name.db}.>"
    # Plain JMS readers with the failover URL operators give Oozie: a durable one (it
    # must get everything) and a non-durable one (it must move to the slave by itself).
    durable = jms_probe.listen(
        pair,
        wildcard,
        count=TOTAL,
        timeout=240,
        url=pair.openwire_url,
        client_id=f"probe-{uuid.uuid4().hex[:8]}",
        durable="failover-test",
        distinct="HCAT_EVENT_ID",
    )
    plain = jms_probe.listen(pair, wildcard, count=10 * TOTAL, timeout=240, url=pair.openwire_url)
    stream = Stream(pair_settings, pair_catalog, tables, total=TOTAL, per_second=150)
    with delivering(pair_settings, pair_catalog, stream, batch_size=100) as run:
        receipts = run.receipts
        stream.start()
        _wait(lambda: len(run.collector.got) >= TOTAL // 2, 120, "half the stream")
        killed_at = _kill_with_a_batch_in_flight(pair, master, receipts)
        stream.join()
        run.collector.wait_for(TOTAL, timeout=180)
        got = run.collector.stop()
    relay_connects = run.relay.stats.connects
    wire = durable.result()
    moved = plain.received()
    plain.kill()

    # The consumer and the relay moved to the slave: nothing lost, nothing repeated.
    late_live = _assert_moved_to_the_slave(run, got, stream, tables, killed_at, master, slave)
    assert relay_connects >= 2
    assert len(run.watch.samples) > 50
    final = pair_catalog.group.progress()
    assert {t: final[t] for t in stream.ids()} == {t: ids[-1] for t, ids in stream.ids().items()}

    # The durable JMS subscriber got every event (the relay may resend); the plain one
    # followed the master to the slave and kept per-topic order.
    wire_ids = [int(m["properties"]["HCAT_EVENT_ID"]["value"]) for m in wire]
    assert set(wire_ids) == {i for ids in stream.ids().values() for i in ids}
    plain_ids = [int(m["properties"]["HCAT_EVENT_ID"]["value"]) for m in moved]
    assert any(i in late_live for i in plain_ids), "the JMS reader did not move to the slave"
    for topic, ids in stream.ids().items():
        seen = [i for i, m in zip(plain_ids, moved, strict=True) if m["topicName"] == topic]
        first = list(dict.fromkeys(seen))
        assert first == sorted(first)
        assert set(first) <= set(ids)

    # activemq.sh: the survivor is master; started again, the killed one is the slave.
    after = pair.status()
    assert f"broker {slave.number}: master (pid {slave.pid()}" in after
    assert f"broker {master.number}: stopped" in after
    pair.start()
    assert f"broker {master.number}: slave, waiting for the store lock" in pair.status()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_hung_master_is_noticed_within_the_heartbeat_bound(
    failover_pair: BrokerPair, db_url: str, tmp_path: Path
) -> None:
    """SIGSTOP keeps the master's sockets and its lock: nothing but heart-beats tells a
    client it is gone. The broker timeout here is longer than the heart-beat bound, so
    only the heart-beats can have noticed in time. 30 s stopped, then kill -9."""
    pair = failover_pair
    settings = broker_settings(pair, tmp_path / "home", db_url, timeout=20)
    master = pair.master()
    slave = pair.other(master)
    with Catalog.open(settings) as catalog:
        tables = _tables(catalog, 2)
        stream = Stream(settings, catalog, tables, total=800, per_second=20)
        with delivering(settings, catalog, stream) as run:
            receipts = run.receipts
            stream.start()
            _wait(lambda: len(receipts.snapshot()) >= 50, 60, "the first receipts")
            (connection,) = receipts.connections
            # Past stomp.py's grace period of a connection's first 9 s.
            _wait(
                lambda: time.monotonic() - (connection.connected_at or 0) > HEARTBEAT_TIMEOUT,
                30,
                "the relay's connection to age",
            )
            pair.pause(master)
            stopped_at = time.monotonic()
            noticed_at = _wait(
                lambda: connection.heartbeat_timeouts >= 1, 30, "the heart-beat timeout"
            )
            time.sleep(max(0.0, stopped_at + 30 - time.monotonic()))
            killed_at = time.monotonic()
            pair.kill(master)
            stream.join()
            run.collector.wait_for(800, timeout=180)
            got = run.collector.stop()
        progress_while_hung = run.watch.progress_between(stopped_at + 1, killed_at)
        final = catalog.group.progress()

    assert noticed_at - stopped_at <= HEARTBEAT_TIMEOUT + 2.0
    assert str(connection.address) == slave.url  # where the relay went on
    # Nothing was recorded while the master hung: no receipt came, progress stood still.
    done = receipts.snapshot()
    assert not [i for i, rs in done.items() for r in rs if stopped_at + 0.5 < r.at < killed_at]
    assert len(progress_while_hung) > 100
    assert all(sample == progress_while_hung[0] for sample in progress_while_hung)
    assert run.watch.violations == []
    # Then everything went through the slave: 0 lost, each once, in order.
    assert all(r.broker == slave.url for rs in done.values() for r in rs if r.at > killed_at)
    _assert_each_once_in_topic_order([n.event_id for n in got], [n.topic for n in got], stream)
    assert {t: final[t] for t in stream.ids()} == {t: ids[-1] for t, ids in stream.ids().items()}


def test_writers_keep_succeeding_while_both_brokers_are_down(
    failover_pair: BrokerPair, pair_settings: Settings, pair_catalog: Catalog
) -> None:
    pair = failover_pair
    *tables, awaited = _tables(pair_catalog, 3)
    stream = Stream(pair_settings, pair_catalog, tables, total=300, per_second=30)
    # A shell scheduler's `wait`, subscribed before the outage, for a done written in it.
    waiter = CliProcess(
        pair_settings, "-v", "wait", str(awaited.name), "datestamp=outage", "--timeout", "120"
    )
    _wait(lambda: "consumer subscribed" in waiter.stderr, 60, "`wait` to subscribe")
    with delivering(pair_settings, pair_catalog, stream) as run:
        stream.start()
        _wait(lambda: len(run.collector.got) >= 50, 60, "the first notifications")
        master = pair.master()
        pair.kill(pair.other(master))
        pair.kill(master)
        down_at = time.monotonic()
        written_before = stream.written
        checker = CliProcess(pair_settings, "-o", "json", "broker", "check", "--wait", "90")
        send_mark_set_done(awaited.name, {"datestamp": "outage"}, settings=pair_settings)
        stream.join()  # about 8 s more of writes, every one with no broker at all
        time.sleep(2)
        up_at = time.monotonic()
        written_while_down = stream.written - written_before
        assert waiter.proc.poll() is None  # both still trying
        assert checker.proc.poll() is None
        pair.start_one()
        run.collector.wait_for(300, timeout=120)
        got = run.collector.stop()
    progress_while_down = run.watch.progress_between(down_at + 1, up_at)
    waited, waited_err = waiter.finish(60)
    checked, checked_err = checker.finish(60)
    check = json.loads("".join(checker.remaining()))

    assert written_while_down >= 200
    # no call waited for a broker: one that tried would take the broker timeout at least
    assert max(stream.call_seconds) < pair_settings.broker_timeout
    done = run.receipts.snapshot()
    assert not [i for i, rs in done.items() for r in rs if down_at + 0.5 < r.at < up_at]
    assert progress_while_down
    assert all(sample == progress_while_down[0] for sample in progress_while_down)
    assert run.watch.violations == []
    _assert_each_once_in_topic_order([n.event_id for n in got], [n.topic for n in got], stream)
    # The command line rode it out too: `wait` got its done once a broker was back, and
    # `broker check --wait` kept trying until broker 1 served.
    assert waited == 0, waited_err
    assert "consumer lost its broker connection" in waited_err
    assert checked == 0, checked_err
    first, second = pair.members
    assert check["publisher"]["broker"] == first.url
    assert check["brokers"][0] == {"broker": first.url, "state": "serving"}
    assert check["brokers"][1]["broker"] == second.url
    assert "connection refused" in check["brokers"][1]["state"]


def test_jdbc_pair_kill_master_mid_stream_the_slave_takes_over(
    jdbc_pair: BrokerPair, postgres_database_factory: Callable[[], str], tmp_path: Path
) -> None:
    """JDBC master/slave on PostgreSQL (deploy/activemq/store-jdbc.xml): the catalog in
    one database of the test server, the brokers' store in another. kill -9 of the master
    with a batch in flight: the slave takes the lease and serves, nothing is lost or
    repeated, status names the new master, and stop ends both brokers."""
    pair = jdbc_pair
    total = 1000  # 25 s of writes: half of them after the kill, time for the takeover
    settings = broker_settings(pair, tmp_path / "home", postgres_database_factory())
    master = pair.master()
    slave = pair.other(master)
    before = pair.status()
    assert f"broker {master.number}: master (pid {master.pid()}" in before
    assert (
        f"broker {slave.number}: slave, waiting for the database lease (pid {slave.pid()}" in before
    )

    with Catalog.open(settings) as catalog:
        tables = _tables(catalog, 2)
        stream = Stream(settings, catalog, tables, total=total, per_second=40)
        with delivering(settings, catalog, stream, batch_size=50) as run:
            stream.start()
            _wait(lambda: len(run.collector.got) >= total // 2, 120, "half the stream")
            killed_at = _kill_with_a_batch_in_flight(pair, master, run.receipts)
            stream.join()
            run.collector.wait_for(total, timeout=180)
            got = run.collector.stop()
        final = catalog.group.progress()

    # The consumer and the relay moved to the slave: nothing lost, nothing repeated.
    _assert_moved_to_the_slave(run, got, stream, tables, killed_at, master, slave)
    assert {t: final[t] for t in stream.ids()} == {t: ids[-1] for t, ids in stream.ids().items()}

    # activemq.sh: the survivor is master; started again, the killed one waits for the
    # lease; stop ends both processes.
    after = pair.status()
    assert f"broker {slave.number}: master (pid {slave.pid()}" in after
    assert f"broker {master.number}: stopped" in after
    pair.start()
    assert f"broker {master.number}: slave, waiting for the database lease" in pair.status()
    pids = [member.pid() for member in pair.members]
    pair.stop()
    assert None not in pids
    assert [pid for pid in pids if pid is not None and not gone(pid)] == []
    assert pair.status().strip() == "stopped"


def _stomp(
    member: PairMember, principal: tuple[str, str]
) -> tuple[stomp.Connection12, RecordingListener]:
    conn = stomp.Connection12(member.host_and_ports, heartbeats=(0, 0), reconnect_attempts_max=1)
    listener = RecordingListener()
    conn.set_listener("recorder", listener)
    conn.connect(principal[0], principal[1], wait=False)
    assert listener.wait_connected(10), f"CONNECT to broker {member.number} as {principal[0]}"
    return conn, listener


def test_broker_2_enforces_the_same_authorization_and_stop_ends_both(
    failover_pair: BrokerPair,
) -> None:
    """Broker 2, once master, reads activemq.xml's principals and authorization too: the
    reader may subscribe to an hcat topic but not publish to it. Then `stop` ends both."""
    pair = failover_pair
    first, second = pair.members
    if pair.master() is first:
        pair.kill(first)
    assert pair.master() is second
    destination = f"/topic/hcat.auth{uuid.uuid4().hex[:10]}.t"
    headers = {"amq-msg-type": "text", "persistent": "true"}
    reader, reads = _stomp(second, pair.reader)
    publisher, publishes = _stomp(second, pair.publisher)
    try:
        reader.subscribe(destination, id="1", ack="auto", headers={"receipt": "sub"})
        assert reads.wait_receipt("sub", 10), "the reader may subscribe"
        publisher.send(destination, "from the service", headers={**headers, "receipt": "pub"})
        assert publishes.wait_receipt("pub", 10), "the publisher may publish"
        assert [m.body for m in reads.wait_messages(1, 10)] == ["from the service"]

        reader.send(destination, "from a reader", headers={**headers, "receipt": "forged"})
        error = reads.wait_error(10)
        assert error is not None, "broker 2 let the reader publish"
        message = error.headers.get("message", "")
        assert "not authorized to write" in message
        assert pair.reader[0] in message
        assert "forged" not in reads.receipts
    finally:
        stomp_close(reader, reads)
        stomp_close(publisher, publishes)
    assert len(reads.messages) == 1  # the forged message reached nobody

    assert f"broker 2: master (pid {second.pid()}" in pair.status()
    pair.start()  # broker 1 back, as the slave: stop has two brokers to end
    pids = [member.pid() for member in pair.members]
    pair.stop()
    assert None not in pids
    assert [pid for pid in pids if pid is not None and not gone(pid)] == []
    assert pair.status().strip() == "stopped"
