"""NotificationConsumer against the real broker, on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import json
import threading

import pytest
from sqlalchemy import create_engine, delete, update

from hcat_notify.config import TopicStrategy
from hcat_notify.consumer import NotificationConsumer, Source
from hcat_notify.errors import BrokerAuthError, InvalidInputError, TableDroppedError
from hcat_notify.model.changes import AnnounceMode
from hcat_notify.model.events import EventType
from hcat_notify.relay import Relay
from hcat_notify.store import Catalog, NewPartition, TableInfo
from hcat_notify.store.models import RelayBucketRow, TopicProgressRow
from hcat_notify.writer import send_mark_set_done
from tests.integration.delivery import Recorder, running_relay
from tests.wire import validate_message

pytestmark = pytest.mark.integration


def _collect(consumer: NotificationConsumer, count: int, timeout: float = 30.0):
    got = []
    for notification in consumer.notifications(timeout=timeout):
        got.append(notification)
        if len(got) >= count:
            break
    return got


def test_late_subscriber_gets_the_done_from_the_retention_table(
    delivery_settings, clicks: TableInfo
):
    event_id = send_mark_set_done(
        clicks.name, {"datestamp": "20110228"}, settings=delivery_settings
    )
    with Relay(delivery_settings) as relay:
        relay.drain()  # published before anyone subscribed: the broker kept nothing
    with NotificationConsumer([clicks.name], settings=delivery_settings) as consumer:
        (got,) = _collect(consumer, 1, timeout=5)
        assert list(consumer.notifications(timeout=1)) == []
    assert got.event_id == event_id
    assert got.source is Source.RETAINED
    assert got.event_type is EventType.MARK_SET_DONE
    assert got.spec.to_path() == "datestamp=20110228"
    validate_message(got.headers, json.dumps(got.body))


def test_subscriber_during_delivery_sees_each_event_once(delivery_settings, clicks: TableInfo):
    # Events before, during and after the consumer's start-up: each exactly once.
    before = [
        send_mark_set_done(clicks.name, {"datestamp": f"b{n}"}, settings=delivery_settings)
        for n in range(30)
    ]
    with running_relay(delivery_settings, batch_size=7):
        consumer = NotificationConsumer([clicks.name], settings=delivery_settings)
        during: list[int] = []
        writer = threading.Thread(
            target=lambda: during.extend(
                send_mark_set_done(clicks.name, {"datestamp": f"d{n}"}, settings=delivery_settings)
                for n in range(30)
            )
        )
        writer.start()
        with consumer:
            writer.join(60)
            after = [
                send_mark_set_done(clicks.name, {"datestamp": f"a{n}"}, settings=delivery_settings)
                for n in range(10)
            ]
            got = _collect(consumer, 70)
            assert list(consumer.notifications(timeout=1.5)) == []  # no duplicate follows
    ids = [n.event_id for n in got]
    assert sorted(ids) == sorted(before + during + after)
    assert len(set(ids)) == len(ids)
    live = [n.event_id for n in got if n.source is Source.LIVE]
    assert live == sorted(live)  # in event-id order on the wire
    assert {n.source for n in got} >= {Source.RETAINED, Source.LIVE}


def test_cursor_catches_up_partitions_registered_after_it(
    delivery_settings, delivery_catalog: Catalog, clicks: TableInfo
):
    first = delivery_catalog.add_partitions(
        clicks.name, [NewPartition({"datestamp": "1", "region": "us"}, "/a")]
    )
    later = delivery_catalog.add_partitions(
        clicks.name,
        [NewPartition({"datestamp": "2", "region": r}, f"/b/{r}") for r in ("us", "eu")],
    )
    done = delivery_catalog.mark_set_done(clicks.name, {"datestamp": "2"})
    cursor = first[0].event_id  # this consumer already processed the first partition
    with NotificationConsumer([clicks.name], settings=delivery_settings, cursor=cursor) as consumer:
        got = _collect(consumer, 3, timeout=5)
        assert list(consumer.notifications(timeout=0.5)) == []
        assert consumer.cursor.get(clicks.topic) == done
    assert [n.event_id for n in got] == [later[0].event_id, later[1].event_id, done]
    assert [n.source for n in got] == [Source.REGISTRY, Source.REGISTRY, Source.RETAINED]
    assert got[0].body["partitions"] == [{"datestamp": "2", "region": "us"}]


def test_without_cursor_only_dones_are_caught_up(
    delivery_settings, delivery_catalog: Catalog, clicks
):
    delivery_catalog.add_partitions(
        clicks.name, [NewPartition({"datestamp": "1", "region": "us"}, "/a")]
    )
    done = delivery_catalog.mark_set_done(clicks.name, {"datestamp": "1"})
    with NotificationConsumer([clicks.name], settings=delivery_settings) as consumer:
        assert [n.event_id for n in _collect(consumer, 5, timeout=1)] == [done]


def test_duplicates_on_the_wire_are_dropped(delivery_settings, delivery_catalog: Catalog, clicks):
    ids = [delivery_catalog.mark_set_done(clicks.name, {"datestamp": str(n)}) for n in range(3)]
    recorder = Recorder(delivery_settings, clicks.topic)
    try:
        with NotificationConsumer([clicks.name], settings=delivery_settings, cursor=0) as consumer:
            for _ in range(2):
                with Relay(delivery_settings) as relay:
                    relay.drain()
                # As if the receipts were lost: the relay will send them all again.
                engine = create_engine(delivery_settings.database_url)
                with engine.begin() as connection:
                    connection.execute(delete(TopicProgressRow))
                    connection.execute(update(RelayBucketRow).values(published_through=0))
                engine.dispose()
            got = _collect(consumer, 10, timeout=2)
        assert len(recorder.wait_for(6, timeout=10)) == 6  # each event twice on the wire
    finally:
        recorder.close()
    assert [n.event_id for n in got] == ids  # once each: catch-up, then dupes dropped
    assert {n.source for n in got} == {Source.RETAINED}


def test_live_events_at_or_before_the_cursor_are_dropped(
    delivery_settings, delivery_catalog: Catalog, clicks
):
    ids = [delivery_catalog.mark_set_done(clicks.name, {"datestamp": str(n)}) for n in range(3)]
    with NotificationConsumer([clicks.name], settings=delivery_settings, cursor=ids[1]) as consumer:
        with Relay(delivery_settings) as relay:
            relay.drain()
        got = _collect(consumer, 10, timeout=2)
    assert [(n.event_id, n.source) for n in got] == [(ids[2], Source.RETAINED)]


def test_handler_exception_is_reported_and_the_loop_goes_on(delivery_settings, clicks: TableInfo):
    ids = [
        send_mark_set_done(clicks.name, {"datestamp": str(n)}, settings=delivery_settings)
        for n in range(4)
    ]
    reported: list[tuple[int, str]] = []
    handled: list[int] = []

    def handler(notification):
        if notification.event_id == ids[1]:
            raise RuntimeError("boom")
        handled.append(notification.event_id)

    with NotificationConsumer(
        [clicks.name],
        settings=delivery_settings,
        on_error=lambda n, exc: reported.append((n.event_id, str(exc))),
    ) as consumer:
        assert consumer.run(handler, max_messages=4, timeout=5) == 4
    assert reported == [(ids[1], "boom")]
    assert handled == [ids[0], ids[2], ids[3]]


def test_is_set_done_and_wait_with_covers_semantics(delivery_settings, clicks: TableInfo):
    with (
        running_relay(delivery_settings),
        NotificationConsumer([clicks.name], settings=delivery_settings) as consumer,
    ):
        assert not consumer.is_set_done(clicks.name, {"datestamp": "X", "region": "us"})
        assert (
            consumer.wait_for_set_done(clicks.name, {"datestamp": "X", "region": "us"}, timeout=0.5)
            is False
        )
        timer = threading.Timer(
            0.5,
            lambda: send_mark_set_done(clicks.name, {"datestamp": "X"}, settings=delivery_settings),
        )
        timer.start()
        try:
            assert consumer.wait_for_set_done(
                clicks.name, {"region": "us", "datestamp": "X"}, timeout=20
            )
        finally:
            timer.join()
        assert consumer.is_set_done(clicks.name, {"datestamp": "X", "region": "eu"})
        assert not consumer.is_set_done(clicks.name, {"datestamp": "Y"})
        with pytest.raises(InvalidInputError):
            consumer.wait_for_set_done("other.table", {"datestamp": "X"}, timeout=0.1)


def test_per_database_topic_is_filtered_to_the_followed_tables(
    delivery_settings, clicks: TableInfo
):
    settings = dataclasses.replace(delivery_settings, topic_strategy=TopicStrategy.DATABASE)
    with Catalog.open(settings) as catalog:
        # Created under the per-database strategy: both go to hcat.<db>.
        pages = catalog.create_table(
            f"{clicks.name.db}.pages", location="/p", partition_keys=["datestamp"]
        )
        views = catalog.create_table(
            f"{clicks.name.db}.views", location="/v", partition_keys=["ds"]
        )
        assert pages.topic == views.topic == f"hcat.{clicks.name.db}"
    with running_relay(settings), NotificationConsumer([views.name], settings=settings) as consumer:
        send_mark_set_done(pages.name, {"datestamp": "1"}, settings=settings)
        wanted = send_mark_set_done(views.name, {"ds": "1"}, settings=settings)
        got = _collect(consumer, 1, timeout=20)
        assert list(consumer.notifications(timeout=1)) == []
    assert [(n.event_id, str(n.table)) for n in got] == [(wanted, str(views.name))]


def test_consumer_credentials_cannot_publish(delivery_settings, clicks: TableInfo):
    as_reader = dataclasses.replace(
        delivery_settings,
        broker_user=delivery_settings.consumer_user,
        broker_password=delivery_settings.consumer_password,
    )
    event_id = send_mark_set_done(clicks.name, {"datestamp": "1"}, settings=delivery_settings)
    with Relay(as_reader, config=None) as relay:
        assert relay.drain() == 0
        assert "not authorized to write" in relay.stats.parked[event_id]
    with Catalog.open(delivery_settings) as catalog:
        # nothing lost: parked, to be retried once the relay has the right principal
        (parked,) = catalog.outbox.refused()
        assert parked.event_id == event_id
        assert catalog.outbox.retry_parked([event_id], actor="test") == {event_id: event_id + 1}
        assert [event.event_id for event in catalog.outbox.pending()] == [event_id + 1]


def test_anonymous_consumer_is_refused(delivery_settings, clicks: TableInfo):
    anonymous = dataclasses.replace(delivery_settings, consumer_user="", consumer_password="")
    with pytest.raises(BrokerAuthError, match=r"User name \[\] or password is invalid"):
        with NotificationConsumer([clicks.name], settings=anonymous):
            pass


def test_catch_up_is_paged_without_gaps(
    monkeypatch, delivery_settings, delivery_catalog: Catalog, clicks: TableInfo
):
    monkeypatch.setattr("hcat_notify.consumer.catchup.CATCH_UP_PAGE", 7)
    first = delivery_catalog.add_partitions(
        clicks.name,
        [NewPartition({"datestamp": "0", "region": f"r{n}"}, f"/p/{n}") for n in range(3)],
    )
    ids = [delivery_catalog.mark_set_done(clicks.name, {"datestamp": str(n)}) for n in range(20)]
    more = delivery_catalog.add_partitions(
        clicks.name,
        [NewPartition({"datestamp": "1", "region": f"r{n}"}, f"/q/{n}") for n in range(10)],
    )
    with NotificationConsumer(
        [clicks.name], settings=delivery_settings, cursor=first[0].event_id
    ) as consumer:
        got = [n.event_id for n in consumer.notifications(timeout=1)]
    expected = [p.event_id for p in first[1:]] + ids + [p.event_id for p in more]
    assert got == expected


def test_table_events_and_batches_without_a_common_spec_arrive_live(
    delivery_settings, delivery_catalog: Catalog, clicks: TableInfo
):
    spread = [{"datestamp": "1", "region": "a"}, {"datestamp": "2", "region": "a"}]
    with running_relay(delivery_settings):
        with NotificationConsumer([clicks.name], settings=delivery_settings) as consumer:
            added = delivery_catalog.partitions.register(
                clicks.name,
                [NewPartition(s, "/w", 1, 1) for s in spread],
                announce=AnnounceMode.WRITE,
            )
            dropped = delivery_catalog.tables.drop(clicks.name)
            batch, drop = _collect(consumer, 2)
            # dropped while followed: delivered, and the consumer goes on (the table
            # may be created again)
            assert list(consumer.notifications(timeout=0.5)) == []
    assert (batch.event_type, batch.spec, batch.source) == (
        EventType.ADD_PARTITION,
        None,  # the two share no leading key: HCAT_SPEC is empty
        Source.LIVE,
    )
    assert batch.event_id == added.event_ids[0]
    assert [p.as_strings() for p in batch.partitions] == spread
    assert batch.as_dict()["partitions"] == ["datestamp=1/region=a", "datestamp=2/region=a"]
    assert (drop.event_type, drop.spec, drop.partitions) == (EventType.DROP_TABLE, None, ())
    assert (drop.event_id, drop.topic) == (dropped.event_ids[-1], clicks.topic)
    validate_message(drop.headers, json.dumps(drop.body))


class _DropsTheTableOnceChecked:
    """The catalog, but the table is dropped right after the first "is it done?" check
    answers no: the drop can only reach the waiter over the broker."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.dropped: list[int] = []

    def __getattr__(self, name: str):
        return getattr(self.catalog, name)

    def find_covering_done(self, table, spec, **options):
        found = self.catalog.find_covering_done(table, spec, **options)
        if not self.dropped:
            self.dropped.extend(self.catalog.tables.drop(table).event_ids)
        return found

    def close(self) -> None:
        pass


def test_wait_for_set_done_ends_with_an_error_when_the_table_is_dropped(
    delivery_settings, delivery_catalog: Catalog, clicks: TableInfo
):
    catalog = _DropsTheTableOnceChecked(delivery_catalog)
    with running_relay(delivery_settings):
        with NotificationConsumer([clicks.name], settings=delivery_settings, catalog=catalog) as c:
            with pytest.raises(TableDroppedError) as caught:
                c.wait_for_set_done(clicks.name, {"datestamp": "1"}, timeout=120)
    drop = catalog.dropped[-1]
    assert str(caught.value) == (
        f"table {clicks.name} was dropped (event {drop}) while waiting for datestamp=1"
    )
    assert caught.value.event_id == drop
    # Started on the dropped table without a past: the drop is all there is to say.
    gone = f"^table {clicks.name} was dropped \\(event {drop}\\)$"
    with pytest.raises(TableDroppedError, match=gone):
        NotificationConsumer([clicks.name], settings=delivery_settings)
    # With a past from before the drop: the drop is caught up, then the error.
    with NotificationConsumer([clicks.name], settings=delivery_settings, cursor="*:0") as c:
        with pytest.raises(TableDroppedError, match=gone):
            c.wait_for_set_done(clicks.name, {"datestamp": "1"}, timeout=120)
        notifications = c.notifications(timeout=5)
        assert next(notifications).event_id == drop
        with pytest.raises(TableDroppedError, match=gone):
            next(notifications)
