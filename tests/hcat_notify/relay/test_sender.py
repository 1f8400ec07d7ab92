"""BatchSender on a scripted broker: one transaction per batch, the batch written ahead,
refusals found one event at a time, drops, withdrawals."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from hcat_notify.config import Settings
from hcat_notify.relay.sender import BatchSender
from hcat_notify.store import TableInfo
from hcat_notify.store.records import OutboxEvent
from tests.fakes.broker import FakeBroker

Dones = Callable[[TableInfo, int], list[OutboxEvent]]


class Refusals(list[int]):
    """The ids of the events the broker refused, as the relay's handler is told them."""

    def __call__(self, event: OutboxEvent, reason: str, topic_refused: bool) -> bool:
        self.append(event.event_id)
        return False  # never parked


@pytest.fixture
def refusals() -> Refusals:
    return Refusals()


@pytest.fixture
def batches(settings: Settings, broker: FakeBroker, refusals: Refusals) -> Iterator[BatchSender]:
    sender = BatchSender(settings, broker.connection, use_transactions=True, on_refused=refusals)
    yield sender
    sender.close()


def ids(events: list[OutboxEvent]) -> list[int]:
    return [event.event_id for event in events]


def test_a_batch_goes_out_in_one_transaction(
    batches: BatchSender, broker: FakeBroker, clicks: TableInfo, dones: Dones
) -> None:
    events = dones(clicks, 3)
    assert batches.send(events).sent == events
    assert broker.delivered_ids() == ids(events)
    assert broker.commands() == ["CONNECT", "BEGIN", "SEND", "SEND", "SEND", "COMMIT"]


def test_without_transactions_each_event_has_its_own_receipt(
    settings: Settings, broker: FakeBroker, refusals: Refusals, clicks: TableInfo, dones: Dones
) -> None:
    events = dones(clicks, 2)
    batches = BatchSender(settings, broker.connection, use_transactions=False, on_refused=refusals)
    try:
        assert batches.send(events).sent == events
    finally:
        batches.close()
    assert broker.commands() == ["CONNECT", "SEND", "SEND"]
    assert all("receipt" in headers for command, headers in broker.frames[1:])


def test_the_batch_written_ahead_is_committed_only_if_it_is_the_next_batch(
    batches: BatchSender, broker: FakeBroker, clicks: TableInfo, dones: Dones
) -> None:
    events = dones(clicks, 4)
    batches.connected()
    batches.write_ahead(events[:2])  # written ahead, then another batch comes:
    assert batches.send(events[2:]).sent == events[2:]  # sent on a fresh connection
    batches.write_ahead(events[:2])
    broker.settle()
    frames = len(broker.frames)
    assert batches.send(events[:2]).sent == events[:2]  # this time it is the batch
    assert broker.commands()[frames:] == ["COMMIT"]  # nothing written twice
    assert broker.commands().count("CONNECT") == 2
    assert broker.delivered_ids() == ids(events[2:]) + ids(events[:2])


def test_an_error_about_the_batch_written_ahead_does_not_fail_the_one_before(
    batches: BatchSender,
    broker: FakeBroker,
    refusals: Refusals,
    stray: TableInfo,
    clicks: TableInfo,
    dones: Dones,
) -> None:
    """The batch written ahead during a COMMIT's wait has a SEND the broker refuses: its
    ERROR comes after that COMMIT's receipt, so the committed batch counts as sent (not
    sent again one by one), and the refused batch is then found out on its own."""
    first = dones(clicks, 3)
    ahead = dones(stray, 1) + dones(clicks, 1)
    broker.on("COMMIT", nth=1, delay=0.2)  # the batch ahead is written meanwhile
    assert batches.write(first)
    assert batches.commit()
    batches.write_ahead(ahead)
    broker.settle()  # the receipt and the ERROR after it have both come
    assert batches.settle().sent == first
    assert refusals == []
    assert batches.send(ahead).sent == ahead[1:]
    assert refusals == ids(ahead[:1])
    assert broker.delivered_ids() == ids(first) + ids(ahead[1:])


def test_a_refused_topic_is_found_one_event_at_a_time_and_held(
    clicks: TableInfo,
    stray: TableInfo,
    dones: Dones,
    batches: BatchSender,
    refusals: Refusals,
    broker: FakeBroker,
) -> None:
    before = dones(clicks, 2)
    refused = dones(stray, 2)
    result = batches.send(before + refused)
    assert result.sent == before
    assert result.held == {stray.topic: refused[0].event_id}
    assert result.refused_topics == {stray.topic}
    assert refusals == ids(refused[:1])  # nothing after a refused event of its topic
    assert broker.delivered_ids() == ids(before)  # the transaction rolled back whole


def test_a_connection_dropped_at_the_commit_is_sent_again_one_by_one(
    batches: BatchSender, broker: FakeBroker, clicks: TableInfo, dones: Dones
) -> None:
    events = dones(clicks, 3)
    broker.on("COMMIT", nth=1, drop=True)
    assert batches.send(events).sent == events
    assert batches.connects == 2
    assert broker.delivered_ids() == ids(events)


def test_a_withdrawn_batch_delivers_nothing(
    batches: BatchSender, broker: FakeBroker, clicks: TableInfo, dones: Dones
) -> None:
    events = dones(clicks, 2)
    assert batches.write(events)
    assert batches.withdraw().broken_at == events[0].event_id
    assert batches.send(events[1:]).sent == events[1:]
    assert broker.delivered_ids() == ids(events[1:])
