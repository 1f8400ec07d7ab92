"""The relay against the real broker, on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import json
import signal
import time

import pytest

from hcat_notify.errors import HcatNotifyError
from hcat_notify.model.topics import DEFAULT_BUCKETS, topic_bucket
from hcat_notify.relay import Relay, RelayConfig
from hcat_notify.store import Catalog, NewPartition, OutboxEvent, TableInfo
from hcat_notify.writer import send_mark_set_done
from tests.integration.delivery import CliProcess, Recorder, run_cli, running_relay
from tests.wire import validate_message

pytestmark = pytest.mark.integration


def test_drain_publishes_in_event_id_order_as_persistent_text_messages(
    delivery_settings, delivery_catalog: Catalog, clicks: TableInfo
):
    recorder = Recorder(delivery_settings, clicks.topic)
    try:
        delivery_catalog.add_partitions(
            clicks.name,
            [
                NewPartition({"datestamp": "20110228", "region": r}, f"/d/{r}", 1, 10)
                for r in ("us", "eu")
            ],
            job_id="job-7",
        )
        done_id = send_mark_set_done(
            clicks.name, {"datestamp": "20110228"}, settings=delivery_settings
        )
        with Relay(delivery_settings, config=RelayConfig(batch_size=2)) as relay:
            assert relay.drain() == 3
        messages = recorder.wait_for(3, timeout=10)
    finally:
        recorder.close()
    assert [int(m.headers["HCAT_EVENT_ID"]) for m in messages] == [2, 3, done_id]
    assert [m.headers["HCAT_EVENT"] for m in messages] == [
        "ADD_PARTITION",
        "ADD_PARTITION",
        "MARK_SET_DONE",
    ]
    for message in messages:
        validate_message(message.headers, message.body)
        assert message.headers["persistent"] == "true"
        assert message.headers["amq-msg-type"] == "text"
        assert message.headers["HCAT_TABLE"] == str(clicks.name)
    add = json.loads(messages[0].body)
    assert add["partitions"] == [{"datestamp": "20110228", "region": "us"}]
    assert add["jobId"] == "job-7"
    done = json.loads(messages[2].body)
    assert done["spec"] == "datestamp=20110228"
    assert delivery_catalog.outbox.pending() == []
    assert delivery_catalog.outbox.backlog() == (0, None)


def _dones(settings, table: TableInfo, count: int) -> list[int]:
    """``count`` mark-set-done events of ``table``, one partition each; their ids."""
    return [
        send_mark_set_done(table.name, {"datestamp": f"{n:03d}"}, settings=settings)
        for n in range(count)
    ]


def _spy_on_sends(monkeypatch) -> list[tuple[str, int]]:
    """Record how each transaction's frames were written: ("streamed", frames) when
    encoded as they were written, ("prepared", frames) when encoded beforehand."""
    from hcat_notify.broker import BrokerConnection

    sends: list[tuple[str, int]] = []
    streamed = BrokerConnection.send_in_transaction
    prepared = BrokerConnection.send_prepared

    def send_in_transaction(self, transaction, messages):
        listed = list(messages)
        sends.append(("streamed", len(listed)))
        return streamed(self, transaction, listed)

    def send_prepared(self, frames):
        sends.append(("prepared", len(frames.messages)))
        return prepared(self, frames)

    monkeypatch.setattr(BrokerConnection, "send_in_transaction", send_in_transaction)
    monkeypatch.setattr(BrokerConnection, "send_prepared", send_prepared)
    return sends


def test_a_batch_written_ahead_is_committed_only_if_it_is_the_next_batch(
    delivery_settings, delivery_catalog: Catalog, clicks: TableInfo, monkeypatch
):
    """A batch written ahead (begun and sent, not committed) that is not what the next
    send is given never reaches a subscriber: its connection, and the open transaction
    with it, is dropped, and the batch given is sent afresh."""
    from hcat_notify.broker import publisher_connection
    from hcat_notify.relay.sender import BatchSender

    ids = _dones(delivery_settings, clicks, 4)
    events = [e for e in delivery_catalog.outbox.pending() if e.topic == clicks.topic]
    sends = _spy_on_sends(monkeypatch)
    recorder = Recorder(delivery_settings, clicks.topic)
    sender = BatchSender(
        delivery_settings, publisher_connection, use_transactions=True, on_refused=lambda *a: False
    )
    try:
        sender.connected()
        sender.write_ahead(events[:2])  # written ahead ...
        assert sender.send(events[2:]).sent == events[2:]  # ... but another batch comes
        assert sender.connects == 2
        sender.write_ahead(events[:2])
        assert sender.send(events[:2]).sent == events[:2]  # this time it is the batch
        assert sender.connects == 2
        recorder.wait_for(5, timeout=3)
    finally:
        sender.close()
        recorder.close()
    assert recorder.event_ids() == ids[2:] + ids[:2]
    assert sends == [("prepared", 2), ("streamed", 2), ("prepared", 2)]


def test_an_error_about_the_batch_written_ahead_does_not_fail_the_one_before(
    delivery_settings, delivery_catalog: Catalog, clicks: TableInfo
):
    """The batch written ahead during a COMMIT's wait has a SEND the broker refuses: its
    ERROR comes after that COMMIT's receipt, so the committed batch counts as sent (not
    sent again one by one), and the refused batch is then found out on its own."""
    from hcat_notify.broker import publisher_connection
    from hcat_notify.relay.sender import BatchSender

    stray = delivery_catalog.create_table(
        f"{clicks.name.db}.stray", location="/s", partition_keys=["ds"], topic="elsewhere.stray"
    )
    first = _dones(delivery_settings, clicks, 3)
    refused = send_mark_set_done(stray.name, {"ds": "1"}, settings=delivery_settings)
    after = send_mark_set_done(clicks.name, {"datestamp": "x"}, settings=delivery_settings)
    pending = {e.event_id: e for e in delivery_catalog.outbox.pending()}
    batch = [pending[i] for i in first]
    ahead = [pending[refused], pending[after]]
    refusals: list[int] = []

    def refuse(event: OutboxEvent, reason: str, topic_refused: bool) -> bool:
        refusals.append(event.event_id)
        return False

    recorder = Recorder(delivery_settings, clicks.topic)
    sender = BatchSender(
        delivery_settings,
        publisher_connection,
        use_transactions=True,
        on_refused=refuse,
    )
    try:
        sender.connected()
        # the receipt and the ERROR after it have both come when the wait begins
        assert sender.write(batch)
        assert sender.commit()
        sender.write_ahead(ahead)  # while the broker stores the batch
        time.sleep(1)
        result = sender.settle()
        assert result.sent == batch
        assert refusals == []
        second = sender.send(ahead)
        assert [e.event_id for e in second.sent] == [after]
        assert refusals == [refused]
        recorder.wait_for(5, timeout=3)
    finally:
        sender.close()
        recorder.close()
    assert recorder.event_ids() == [*first, after]


def test_a_running_relay_moves_the_position_of_buckets_that_publish_nothing(
    delivery_settings, delivery_catalog: Catalog, clicks: TableInfo
):
    """Not only at a clean exit: while it runs, every owned bucket's position is
    recorded every 10 batch sizes, so a relay killed with -9 leaves a restart at most
    about that much to read again."""
    from hcat_notify.relay.publisher import IDLE_RECORD_BATCHES

    done = _dones(delivery_settings, clicks, 60)
    step = IDLE_RECORD_BATCHES * 5
    with running_relay(delivery_settings, batch_size=5):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            positions = {b.published_through for b in delivery_catalog.group.buckets()}
            published = delivery_catalog.group.progress().get(clicks.topic)
            if published == done[-1] and min(positions) >= done[-1] - step:
                break
            time.sleep(0.05)
        # read while the relay still runs: nothing recorded at its exit yet
        positions = {b.published_through for b in delivery_catalog.group.buckets()}
    assert delivery_catalog.group.progress()[clicks.topic] == done[-1]
    assert done[-1] - step <= min(positions) <= done[-1]


def test_a_batch_whose_bucket_was_lost_before_its_commit_is_withdrawn(
    delivery_settings, delivery_catalog: Catalog, clicks: TableInfo, monkeypatch
):
    """The progress write before a COMMIT finds the batch's bucket fenced (moved to
    another member meanwhile): the batch is not committed, nothing of it reaches a
    subscriber, and the relay publishes nothing more of that bucket."""
    ids = _dones(delivery_settings, clicks, 20)
    bucket = topic_bucket(clicks.topic, DEFAULT_BUCKETS)
    recorder = Recorder(delivery_settings, clicks.topic)
    from hcat_notify.relay.pipeline import Pipeline

    committable = Pipeline.committable
    relays: list[Relay] = []
    fenced: list[bool] = []  # what committable said of the batch found fenced

    def fenced_after_first(self, batch):
        if relays[0].stats.batches == 1 and not fenced:  # the second batch: another member
            member = relays[0].membership  # took the bucket
            member.lose({bucket: member.owned()[bucket].epoch})
            fenced.append(committable(self, batch))
            return fenced[0]
        return committable(self, batch)

    monkeypatch.setattr(Pipeline, "committable", fenced_after_first)
    try:
        with Relay(delivery_settings, config=RelayConfig(batch_size=10)) as relay:
            relays.append(relay)
            relay.drain()
            stats = relay.stats
        recorder.drain(quiet=1.0)
    finally:
        recorder.close()
    seen = recorder.event_ids()
    assert fenced == [False]  # the second batch was withdrawn at its commit
    assert seen[:10] == ids[:10]
    if len(seen) > 10:
        # A loaded machine: the drain outlasted the membership's next heartbeat, which
        # found the bucket (only lost in this member's memory) still its own in the
        # catalog; the withdrawn events went out then, once each, in order.
        assert (seen, stats.published) == (ids, 20)
    else:
        assert (stats.published, stats.batches) == (10, 1)


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_an_event_behind_a_rolled_back_writer_goes_out_without_a_notify(
    delivery_settings, delivery_catalog: Catalog, clicks: TableInfo
):
    """PostgreSQL: a committed event waits behind a lower id an open transaction holds.
    That transaction rolls back, which raises no NOTIFY: the relay, which knows an open
    transaction held ids, looked again by itself (idle_wait is 60 s here)."""
    from hcat_notify.store.engine import open_engine
    from hcat_notify.store.event_ids import allocate_event_ids

    recorder = Recorder(delivery_settings, clicks.topic)
    engine = open_engine(delivery_settings.database_url)
    held = engine.connect()
    transaction = held.begin()
    try:
        with running_relay(delivery_settings, idle_wait=60.0):
            (lower,) = allocate_event_ids(held, 1)
            done_id = send_mark_set_done(
                clicks.name, {"datestamp": "1"}, settings=delivery_settings
            )
            assert done_id > lower
            # held back behind the open transaction's id (its commit's NOTIFY was read)
            assert recorder.wait_for(1, timeout=2) == []
            transaction.rollback()
            messages = recorder.wait_for(1, timeout=15)
    finally:
        held.close()
        engine.dispose()
        recorder.close()
    assert [int(m.headers["HCAT_EVENT_ID"]) for m in messages] == [done_id]


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_rollback_between_a_held_back_read_and_the_check_does_not_stall_the_relay(
    delivery_settings, delivery_catalog: Catalog, clicks: TableInfo, monkeypatch
):
    """The writer holding ids rolls back after the relay's read was held back by it but
    before the relay looks for open writers: that check finds none, and no NOTIFY will
    come. The relay looks once more soon, because the check before found one (it slept
    idle_wait, 60 s here, instead: seen in full suite runs on a loaded machine)."""
    from hcat_notify.relay import publisher
    from hcat_notify.store.engine import open_engine
    from hcat_notify.store.event_ids import allocate_event_ids

    engine = open_engine(delivery_settings.database_url)
    held = engine.connect()
    transaction = held.begin()
    seen = {"open": 0, "rolled_back": False}
    original = publisher.Relay._ids_in_flight

    def rolled_back_just_before_the_check(relay) -> bool:
        answer = original(relay)
        if answer and seen["open"] >= 2 and not seen["rolled_back"]:
            transaction.rollback()  # as if it happened between the read and this check
            seen["rolled_back"] = True
            return original(relay)
        seen["open"] += answer
        return answer

    monkeypatch.setattr(publisher.Relay, "_ids_in_flight", rolled_back_just_before_the_check)
    recorder = Recorder(delivery_settings, clicks.topic)
    try:
        with running_relay(delivery_settings, idle_wait=60.0) as relay:
            deadline = time.monotonic() + 30
            while len(delivery_catalog.group.owned(relay.member_id)) < 256:
                assert time.monotonic() < deadline, "the relay never owned its buckets"
                time.sleep(0.05)
            allocate_event_ids(held, 1)
            done_id = send_mark_set_done(
                clicks.name, {"datestamp": "1"}, settings=delivery_settings
            )
            messages = recorder.wait_for(1, timeout=15)
    finally:
        held.close()
        engine.dispose()
        recorder.close()
    assert seen["rolled_back"]
    assert [int(m.headers["HCAT_EVENT_ID"]) for m in messages] == [done_id]


def test_nothing_is_marked_published_without_a_receipt(
    delivery_settings, delivery_catalog: Catalog, clicks
):
    send_mark_set_done(clicks.name, {"datestamp": "1"}, settings=delivery_settings)
    dead = dataclasses.replace(
        delivery_settings, broker_url="stomp://127.0.0.1:1", broker_timeout=1
    )
    with Relay(dead, catalog=delivery_catalog, config=RelayConfig()) as relay:
        with pytest.raises(Exception, match="cannot connect to broker"):
            relay.drain()
    assert [e.event_id for e in delivery_catalog.outbox.pending()] == [2]  # 1: CREATE_TABLE


def test_unbatched_mode_publishes_the_same(delivery_settings, delivery_catalog: Catalog, clicks):
    recorder = Recorder(delivery_settings, clicks.topic)
    try:
        ids = [
            send_mark_set_done(clicks.name, {"datestamp": str(n)}, settings=delivery_settings)
            for n in range(5)
        ]
        with Relay(delivery_settings, config=RelayConfig(use_transactions=False)) as relay:
            assert relay.drain() == 5
        assert [int(m.headers["HCAT_EVENT_ID"]) for m in recorder.wait_for(5, timeout=10)] == ids
    finally:
        recorder.close()


def test_running_relay_picks_up_new_events(delivery_settings, delivery_catalog: Catalog, clicks):
    recorder = Recorder(delivery_settings, clicks.topic)
    try:
        with running_relay(delivery_settings) as relay:
            ids = []
            for n in range(20):
                ids.append(
                    send_mark_set_done(
                        clicks.name, {"datestamp": str(n)}, settings=delivery_settings
                    )
                )
            got = recorder.wait_for(20, timeout=30)
        assert [int(m.headers["HCAT_EVENT_ID"]) for m in got] == ids
        assert relay.stats.published == 20  # counted after each receipt
        assert delivery_catalog.outbox.pending() == []
    finally:
        recorder.close()


@pytest.mark.parametrize("same_bucket", [False, True], ids=["any-bucket", "same-bucket"])
def test_refused_topic_is_parked_and_other_topics_keep_flowing(
    delivery_settings, delivery_catalog: Catalog, clicks, same_bucket
):
    # The broker lets the service write only hcat topics: an override outside them is
    # refused. The relay must not lose that event, nor stop the rest of the outbox: after
    # max_attempts refusals (at once, when draining) the event is parked, not deleted.
    # Ownership is per bucket, so the refused topic may share its bucket with good ones.
    topic = "elsewhere.stray"
    if same_bucket:
        wanted = topic_bucket(clicks.topic, DEFAULT_BUCKETS)
        topic = next(
            f"elsewhere.stray{n}"
            for n in range(100_000)
            if topic_bucket(f"elsewhere.stray{n}", DEFAULT_BUCKETS) == wanted
        )
    stray = delivery_catalog.create_table(
        f"{clicks.name.db}.stray", location="/s", partition_keys=["ds"], topic=topic
    )
    recorder = Recorder(delivery_settings, clicks.topic)
    try:
        refused = send_mark_set_done(stray.name, {"ds": "1"}, settings=delivery_settings)
        ok = [
            send_mark_set_done(clicks.name, {"datestamp": str(n)}, settings=delivery_settings)
            for n in range(3)
        ]
        with Relay(delivery_settings, config=RelayConfig(batch_size=10)) as relay:
            assert relay.drain() == 4  # and the stray table's CREATE_TABLE on hcat
            assert list(relay.stats.parked) == [refused]
            assert "not authorized" in relay.stats.parked[refused]
        assert [int(m.headers["HCAT_EVENT_ID"]) for m in recorder.wait_for(3, timeout=10)] == ok
    finally:
        recorder.close()
    assert delivery_catalog.outbox.pending() == []
    (parked,) = delivery_catalog.outbox.refused()
    assert (parked.event_id, parked.attempts, parked.topic) == (refused, 3, topic)
    assert parked.parked_at is not None


def test_a_second_relay_under_a_member_id_in_use_is_refused(
    delivery_settings, delivery_catalog: Catalog, clicks
):
    with running_relay(delivery_settings, member_id="twin"):
        deadline = time.monotonic() + 20
        while not (before := [(m.member_id, m.pid) for m in delivery_catalog.group.members()]):
            assert time.monotonic() < deadline, "the first relay never joined"
            time.sleep(0.05)
        refused = run_cli(delivery_settings, "relay", "--member-id", "twin")
        assert refused.returncode == 2
        assert refused.stderr.startswith("hcat-notify: error: relay member id 'twin' is in use by ")
        assert refused.stderr.count("\n") == 1
        assert [(m.member_id, m.pid) for m in delivery_catalog.group.members()] == before


def test_ctrl_c_hands_the_relays_buckets_over_and_exits_130(
    delivery_settings, delivery_catalog: Catalog, clicks
):
    """SIGINT stops a relay as SIGTERM does (batch, progress, buckets handed over), and
    it exits 130 as every interrupted command does."""
    send_mark_set_done(clicks.name, {"datestamp": "1"}, settings=delivery_settings)
    relay = CliProcess(delivery_settings, "relay", "--member-id", "ctrl-c")
    try:
        deadline = time.monotonic() + 30
        while delivery_catalog.outbox.backlog()[0] or not delivery_catalog.group.owned("ctrl-c"):
            assert time.monotonic() < deadline, f"the relay never published: {relay.stderr}"
            time.sleep(0.05)
        relay.proc.send_signal(signal.SIGINT)
        code, err = relay.finish(timeout=60)
    finally:
        if relay.proc.poll() is None:
            relay.proc.kill()
    assert code == 130, err
    assert relay.remaining() == ["relay stopped after publishing 1 events\n"]
    assert "Traceback" not in err
    assert delivery_catalog.group.members() == []  # it left the group
    assert delivery_catalog.group.owned("ctrl-c") == {}


@pytest.mark.parametrize("member_id", ["", "   "])
def test_an_empty_member_id_is_refused(delivery_settings, delivery_catalog: Catalog, member_id):
    refused = run_cli(delivery_settings, "relay", "--member-id", member_id)
    assert refused.returncode == 2
    assert refused.stderr == (
        f"hcat-notify: error: invalid member id {member_id!r}: 1 to 255 printable "
        "characters, no spaces\n"
    )
    assert delivery_catalog.group.members() == []


def test_a_second_relay_of_one_process_under_a_member_id_in_use_is_refused(
    delivery_settings, delivery_catalog: Catalog, clicks
):
    """Fencing tells members apart by id: a relay left open (not closed) still heartbeats
    and may take the controller role, so another under its id in the same process would
    share every bucket with it."""
    from hcat_notify.errors import InvalidInputError

    send_mark_set_done(clicks.name, {"datestamp": "1"}, settings=delivery_settings)
    first = Relay(delivery_settings, member_id="twin")
    second = Relay(delivery_settings, member_id="twin")
    try:
        assert first.drain() >= 1  # joined, and not closed
        members = [(m.member_id, m.pid) for m in delivery_catalog.group.members()]
        with pytest.raises(InvalidInputError, match="'twin' is in use by another relay of this"):
            second.drain()
        assert [(m.member_id, m.pid) for m in delivery_catalog.group.members()] == members
        first.close()
        assert second.drain() == 0  # once the first has left
    finally:
        first.close()
        second.close()
    assert delivery_catalog.group.members() == []


def test_only_a_relay_that_owns_its_process_freezes_the_heap(
    delivery_settings, delivery_catalog: Catalog, clicks
):
    import gc

    send_mark_set_done(clicks.name, {"datestamp": "1"}, settings=delivery_settings)
    gc.unfreeze()
    try:
        with Relay(delivery_settings) as relay:
            assert relay.drain() >= 1
        assert gc.get_freeze_count() == 0  # a library user's heap is left alone
        send_mark_set_done(clicks.name, {"datestamp": "2"}, settings=delivery_settings)
        with Relay(delivery_settings, config=RelayConfig(freeze_heap=True)) as relay:
            assert relay.drain() == 1
            assert gc.get_freeze_count() > 0  # as the relay command does
    finally:
        gc.unfreeze()


def test_relay_once_refuses_to_run_beside_a_running_relay(
    delivery_settings, delivery_catalog: Catalog, clicks
):
    send_mark_set_done(clicks.name, {"datestamp": "1"}, settings=delivery_settings)
    with running_relay(delivery_settings, member_id="first"):
        deadline = time.monotonic() + 20
        while delivery_catalog.outbox.backlog()[0] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert delivery_catalog.outbox.backlog()[0] == 0
        with (
            Relay(delivery_settings, member_id="second") as second,
            pytest.raises(HcatNotifyError, match="relays first are running"),
        ):
            second.drain()
    # The running one left the group when it stopped: --once may run now.
    send_mark_set_done(clicks.name, {"datestamp": "2"}, settings=delivery_settings)
    with Relay(delivery_settings, member_id="third") as third:
        assert third.drain() == 1
    assert delivery_catalog.group.members() == []
