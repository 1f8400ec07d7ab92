"""BrokerConnection on a scripted broker: receipts, transactions, errors, drops, failover."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hcat_notify.broker.connection import BrokerConnection
from hcat_notify.config import BrokerAddress
from hcat_notify.errors import (
    BrokerAuthError,
    BrokerCredentialsError,
    BrokerTimeoutError,
    BrokerUnavailableError,
)
from tests.fakes.broker import FakeBroker

A, B = BrokerAddress("a.example", 61613), BrokerAddress("b.example", 61613)


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    fake = FakeBroker(password="secret")
    yield fake
    fake.close()


def connection(
    broker: FakeBroker, password: str = "secret", timeout: float = 5.0
) -> BrokerConnection:
    return BrokerConnection(
        [A, B], user="publisher", password=password, timeout=timeout, transport=broker.transport
    )


def test_a_send_with_a_receipt_is_stored(broker: FakeBroker) -> None:
    with connection(broker) as conn:
        conn.send("/topic/t", "{}", {"HCAT_EVENT_ID": "1"})
    assert broker.delivered_ids() == [1]
    assert broker.delivered[0].headers["amq-msg-type"] == "text"
    assert broker.delivered[0].headers["persistent"] == "true"


def test_a_transaction_is_delivered_at_its_commit_and_an_aborted_one_never(
    broker: FakeBroker,
) -> None:
    messages = [("/topic/t", "{}", {"HCAT_EVENT_ID": str(n)}) for n in (1, 2, 3)]
    with connection(broker) as conn:
        dropped = conn.begin()
        conn.send_in_transaction(dropped, messages[:1])
        conn.abort(dropped)
        prepared = conn.prepare_sends(messages[1:])
        conn.begin(prepared.transaction)
        conn.send_prepared(prepared)
        pending = conn.write_commit(prepared.transaction)
        assert conn.await_commit(pending) == 0
    assert broker.delivered_ids() == [2, 3]


def test_a_refused_send_raises_the_auth_error(broker: FakeBroker) -> None:
    broker.refused_topics.add("/topic/secret")
    with connection(broker) as conn, pytest.raises(BrokerAuthError, match="not authorized"):
        conn.send("/topic/secret", "{}", {"HCAT_EVENT_ID": "1"})
    assert broker.delivered == []


def test_an_error_about_a_send_in_a_transaction_fails_its_commit(broker: FakeBroker) -> None:
    """A refused SEND's ERROR (it has no receipt id) fails the COMMIT's wait, with the
    first ERROR's reason; ActiveMQ's answer to the COMMIT (rolled back) comes after."""
    broker.refused_topics.add("/topic/secret")
    with connection(broker) as conn:
        transaction = conn.begin()
        conn.send_in_transaction(transaction, [("/topic/secret", "{}", {"HCAT_EVENT_ID": "1"})])
        with pytest.raises(BrokerAuthError, match="not authorized"):
            conn.commit(transaction)
        broker.settle()
        assert len(conn.errors) == 2
    assert broker.delivered == []


def test_no_receipt_in_time_is_a_timeout(broker: FakeBroker) -> None:
    broker.on("COMMIT", silent=True)
    with connection(broker, timeout=0.2) as conn:
        transaction = conn.begin()
        with pytest.raises(BrokerTimeoutError, match="no RECEIPT"):
            conn.commit(transaction)


def test_a_slow_receipt_is_waited_for(broker: FakeBroker) -> None:
    broker.on("COMMIT", delay=0.3)
    with connection(broker, timeout=5) as conn:
        transaction = conn.begin()
        conn.send_in_transaction(transaction, [("/topic/t", "{}", {"HCAT_EVENT_ID": "1"})])
        assert conn.commit(transaction) == 0
    assert broker.delivered_ids() == [1]


def test_a_dropped_connection_fails_the_wait_and_the_next_connect_tries_the_next_broker(
    broker: FakeBroker,
) -> None:
    broker.on("COMMIT", nth=1, drop=True)
    conn = connection(broker)
    try:
        assert conn.connect() == A
        transaction = conn.begin()
        conn.send_in_transaction(transaction, [("/topic/t", "{}", {"HCAT_EVENT_ID": "1"})])
        with pytest.raises(BrokerUnavailableError, match="outcome is unknown"):
            conn.commit(transaction)
        assert not conn.is_connected
        assert conn.lost == 1
        assert conn.connect() == B  # after the lost one
    finally:
        conn.close()
    assert broker.delivered == []  # the transaction went with the connection


def test_an_address_that_refuses_the_connection_is_skipped(broker: FakeBroker) -> None:
    broker.down.add((A.host, A.port))
    conn = connection(broker)
    try:
        assert conn.connect() == B
    finally:
        conn.close()
    broker.down.add((B.host, B.port))
    with pytest.raises(BrokerUnavailableError, match=r"a\.example"):
        conn.connect()


def test_a_refused_login_is_not_tried_further(broker: FakeBroker) -> None:
    with pytest.raises(BrokerCredentialsError, match="refused user 'publisher'"):
        connection(broker, password="wrong").connect()
    assert broker.connects == 0


def test_a_refused_login_whose_error_frame_never_came_is_still_reported_as_refused(
    broker: FakeBroker,
) -> None:
    broker.on("CONNECT", nth=1, drop=True)  # closed before the ERROR frame was written
    alone = BrokerConnection([A], user="publisher", password="wrong", transport=broker.transport)
    with pytest.raises(BrokerCredentialsError, match="refused user 'publisher'"):
        alone.connect()
    assert broker.commands() == ["CONNECT", "CONNECT"]  # the same broker, once more


def test_a_broker_that_closes_every_connect_without_a_reason_is_passed_over(
    broker: FakeBroker,
) -> None:
    broker.on("CONNECT", nth=1, drop=True)
    broker.on("CONNECT", nth=1, drop=True)  # counts the CONNECTs the first let through
    conn = connection(broker)
    try:
        assert conn.connect() == B
    finally:
        conn.close()
    assert broker.commands() == ["CONNECT", "CONNECT", "CONNECT"]


def test_a_subscription_receives_what_is_sent_after_its_receipt(broker: FakeBroker) -> None:
    with connection(broker) as reader, connection(broker) as writer:
        reader.subscribe("/topic/t", "sub-1")
        writer.send("/topic/t", "hello", {"HCAT_EVENT_ID": "7"})
        message = reader.receive(timeout=5)
    assert message is not None
    assert (message.body, message.subscription) == ("hello", "sub-1")
    assert message.headers["HCAT_EVENT_ID"] == "7"
