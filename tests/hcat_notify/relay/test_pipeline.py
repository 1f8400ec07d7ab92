"""The relay's steps on a scripted broker: read, write, commit (reading and writing the
next batch ahead meanwhile), settle, record; and whole drains through them."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import delete

from hcat_notify.config import Settings
from hcat_notify.relay import Relay, RelayConfig
from hcat_notify.store import Catalog, TableInfo
from hcat_notify.store.records import OutboxEvent
from tests.fakes.broker import FakeBroker

Dones = Callable[[TableInfo, int], list[OutboxEvent]]


def relay(settings: Settings, broker: FakeBroker, **config: object) -> Relay:
    return Relay(
        settings,
        config=RelayConfig(**config),  # type: ignore[arg-type]
        connection_factory=broker.connection,
        member_id="m1",
    )


@pytest.fixture
def joined(settings: Settings, broker: FakeBroker, clicks: TableInfo) -> Iterator[Relay]:
    """A relay that owns every bucket (an empty drain took them), between batches."""
    with relay(settings, broker, batch_size=2) as member:
        assert member.drain() == 0
        member.pipeline.own(member.membership.owned())
        yield member


def test_a_drain_publishes_every_event_in_order_on_one_connection(
    settings: Settings, broker: FakeBroker, catalog: Catalog, clicks: TableInfo, dones: Dones
) -> None:
    events = dones(clicks, 11)
    with relay(settings, broker, batch_size=4) as member:
        assert member.drain() == 11
        assert member.stats.batches == 3
    assert broker.delivered_ids() == [e.event_id for e in events]
    assert broker.commands().count("CONNECT") == 1
    assert catalog.group.progress()[clicks.topic] == events[-1].event_id


def test_the_next_batch_is_read_and_written_ahead_while_a_full_one_is_stored(
    joined: Relay, broker: FakeBroker, clicks: TableInfo, dones: Dones
) -> None:
    events = dones(clicks, 4)
    pipeline = joined.pipeline
    batch = pipeline.read()
    assert batch.fresh == events[:2]
    assert batch.full
    assert pipeline.write(batch)
    assert pipeline.committable(batch)
    assert pipeline.commit(batch)
    pipeline.read_ahead(batch)
    broker.settle()
    assert broker.commands()[-4:] == ["COMMIT", "BEGIN", "SEND", "SEND"]  # written ahead
    result = pipeline.settle(batch)
    assert result.sent == events[:2]
    assert pipeline.record(batch, result, idle_step=10**9) == events[:2]
    nxt = pipeline.read()  # the page read ahead
    assert nxt.fresh == events[2:]
    written = len(broker.frames)
    assert pipeline.write(nxt)
    assert pipeline.commit(nxt)
    assert pipeline.settle(nxt).sent == events[2:]
    broker.settle()
    assert broker.commands()[written:] == ["COMMIT"]  # nothing written again
    assert broker.delivered_ids() == [e.event_id for e in events]


def test_a_batch_whose_bucket_was_lost_before_its_commit_is_withdrawn(
    joined: Relay, broker: FakeBroker, clicks: TableInfo, dones: Dones
) -> None:
    events = dones(clicks, 1)
    batch = joined.pipeline.read()
    pipeline = joined.pipeline
    assert pipeline.write(batch)
    bucket = events[0].bucket
    epoch = joined.membership.owned()[bucket].epoch
    joined.membership.lose({bucket: epoch})  # another member took it meanwhile
    assert not pipeline.committable(batch)
    result = pipeline.withdraw(batch)
    assert result.broken_at == events[0].event_id
    broker.settle()
    assert broker.delivered == []


def test_a_dropped_commit_is_sent_again_and_nothing_is_lost(
    settings: Settings, broker: FakeBroker, clicks: TableInfo, dones: Dones
) -> None:
    events = dones(clicks, 6)
    broker.on("COMMIT", nth=2, drop=True)
    with relay(settings, broker, batch_size=3) as member:
        assert member.drain() == 6
        assert member.stats.connects == 2
    assert broker.delivered_ids() == [e.event_id for e in events]


def test_a_refused_topic_is_parked_and_the_others_go_out(
    settings: Settings,
    broker: FakeBroker,
    catalog: Catalog,
    stray: TableInfo,
    clicks: TableInfo,
    dones: Dones,
) -> None:
    refused = dones(stray, 1)
    dones(clicks, 2)
    others = [e.event_id for e in catalog.outbox.pending() if e.topic != stray.topic]
    with relay(settings, broker, batch_size=10, max_attempts=2) as member:
        assert member.drain() == len(others)
        assert set(member.stats.parked) == {refused[0].event_id}
    assert broker.delivered_ids() == others


def test_a_relay_holds_the_progress_of_the_topics_it_reads_not_of_every_idle_one(
    settings: Settings, broker: FakeBroker, catalog: Catalog, clicks: TableInfo, dones: Dones
) -> None:
    """Gaining buckets reads no topic's progress: a topic's is read with its events, so
    that a relay's memory grows with the active topics, not with every topic that ever
    published (a hundred thousand of them cost 20 MiB, issue 31). An event its topic's
    progress already covers (published by an earlier owner) is still not sent again."""
    from sqlalchemy import insert

    from hcat_notify.model.topics import topic_bucket
    from hcat_notify.store.models import TopicProgressRow

    buckets = catalog.group.info().bucket_count
    idle = [f"hcat.idle.t{n:04d}" for n in range(1000)]
    events = dones(clicks, 3)
    with catalog._engine.begin() as conn:  # what earlier owners published
        conn.execute(
            insert(TopicProgressRow),
            [
                {"topic": t, "bucket": topic_bucket(t, buckets), "last_event_id": 1}
                | {"epoch": 1, "updated_at": 0.0}
                for t in idle
            ],
        )
        conn.execute(delete(TopicProgressRow).where(TopicProgressRow.topic == clicks.topic))
        conn.execute(
            insert(TopicProgressRow).values(
                topic=clicks.topic,
                bucket=topic_bucket(clicks.topic, buckets),
                last_event_id=events[0].event_id,
                epoch=1,
                updated_at=0.0,
            )
        )
    with relay(settings, broker, batch_size=10) as member:
        assert member.drain() == 2
        known = dict(member.pipeline.topic_progress)
    assert broker.delivered_ids() == [e.event_id for e in events[1:]]
    assert known == {clicks.topic: events[-1].event_id}
