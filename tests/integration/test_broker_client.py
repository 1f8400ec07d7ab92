"""hcat_notify.broker against the real broker: deadlines, failover, mapped errors."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from hcat_notify.broker import (
    DEFAULT_HEARTBEATS,
    HEARTBEAT_TIMEOUT,
    BrokerConnection,
    consumer_connection,
    publisher_connection,
)
from hcat_notify.config import BrokerAddress, load_settings
from hcat_notify.errors import BrokerAuthError, BrokerUnavailableError
from tests.integration.failover import Proxy, silent_listener

pytestmark = pytest.mark.integration


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def settings(broker):
    return load_settings(
        broker_url=broker.url,
        broker_user=broker.publisher[0],
        broker_password=broker.publisher[1],
        consumer_user=broker.reader[0],
        consumer_password=broker.reader[1],
        broker_timeout=5,
    )


def test_publisher_to_consumer_text_message(settings):
    with consumer_connection(settings) as consumer, publisher_connection(settings) as publisher:
        consumer.subscribe("/topic/hcat.client.test", "s1")
        publisher.send("/topic/hcat.client.test", json.dumps({"a": "ü"}), {"HCAT_EVENT": "X"})
        message = consumer.receive(timeout=5)
    assert message is not None
    assert json.loads(message.body) == {"a": "ü"}
    assert message.headers["HCAT_EVENT"] == "X"
    assert message.headers["persistent"] == "true"
    assert message.headers["amq-msg-type"] == "text"


def test_consumer_may_not_publish(settings):
    with consumer_connection(settings) as consumer:
        with pytest.raises(BrokerAuthError, match="not authorized to write"):
            consumer.send("/topic/hcat.client.test", "{}")
        # The connection stays usable after the refusal.
        assert consumer.is_connected


def test_wrong_password_is_an_auth_error(broker):
    connection = BrokerConnection(
        [BrokerAddress(broker.host, broker.stomp_port)],
        user=broker.reader[0],
        password="wrong",
        timeout=5,
    )
    with pytest.raises(BrokerAuthError, match="refused user 'hcat-reader'"):
        connection.connect()


def test_failover_skips_a_dead_broker(broker):
    dead = BrokerAddress("127.0.0.1", _closed_port())
    live = BrokerAddress(broker.host, broker.stomp_port)
    with BrokerConnection(
        [dead, live], user=broker.publisher[0], password=broker.publisher[1], timeout=5
    ) as conn:
        assert conn.address == live


def test_no_broker_names_every_url():
    ports = [_closed_port(), _closed_port()]
    settings = load_settings(
        broker_url=",".join(f"stomp://127.0.0.1:{p}" for p in ports), broker_timeout=2
    )
    with pytest.raises(BrokerUnavailableError) as info:
        publisher_connection(settings).connect()
    for port in ports:
        assert f"stomp://127.0.0.1:{port}" in str(info.value)


def test_selector_filters_on_hcat_headers(settings):
    with consumer_connection(settings) as consumer, publisher_connection(settings) as publisher:
        consumer.subscribe("/topic/hcat.web", "db-topic", selector="HCAT_TABLE = 'web.clicks'")
        publisher.send("/topic/hcat.web", '{"n":1}', {"HCAT_TABLE": "web.views"})
        publisher.send("/topic/hcat.web", '{"n":2}', {"HCAT_TABLE": "web.clicks"})
        message = consumer.receive(timeout=5)
        assert message is not None
        assert json.loads(message.body) == {"n": 2}
        assert consumer.receive(timeout=0.5) is None


def _pad(i: int) -> str:
    return ("é" if i % 2 else "e") * 100  # UTF-8 and ASCII bodies alternate


@pytest.mark.parametrize("prepared", [False, True], ids=["streamed", "prepared"])
def test_a_transaction_of_many_frames_arrives_whole_and_in_order(settings, prepared):
    """send_in_transaction writes many frames per socket write (and send_prepared the
    same frames, encoded before the transaction began): every one arrives, in order, with
    its headers unescaped (colons, backslashes, line breaks, non-ASCII) and its body
    intact, and only after the COMMIT."""
    tricky = {
        "HCAT_SERVER_URL": "thrift://metastore:9083",
        "HCAT_PARTITION": "dt=2026-11-26/p=a\\b",
        "HCAT_NOTE": "one\ntwo\r\nthree größe 日本",
    }
    count = 600  # about 150 KiB of frames: several chunks
    messages = (
        (
            "/topic/hcat.client.bulk",
            json.dumps({"i": i, "pad": _pad(i)}, ensure_ascii=False),
            {**tricky, "HCAT_EVENT_ID": str(i)},
        )
        for i in range(count)
    )
    with consumer_connection(settings) as consumer, publisher_connection(settings) as publisher:
        consumer.subscribe("/topic/hcat.client.bulk", "bulk")
        if prepared:
            frames = publisher.prepare_sends(messages)
            transaction = publisher.begin(frames.transaction)
            publisher.send_prepared(frames)
        else:
            transaction = publisher.begin()
            publisher.send_in_transaction(transaction, messages)
        assert consumer.receive(timeout=0.5) is None  # nothing before the COMMIT
        publisher.commit(transaction)
        received = [consumer.receive(timeout=10) for _ in range(count)]
        assert consumer.receive(timeout=0.5) is None
    assert all(message is not None for message in received)
    ids = [int(m.headers["HCAT_EVENT_ID"]) for m in received if m is not None]
    assert ids == list(range(count))
    for i, message in enumerate(received):
        assert message is not None
        assert json.loads(message.body) == {"i": i, "pad": _pad(i)}
        assert {k: message.headers[k] for k in tricky} == tricky
        assert message.headers["persistent"] == "true"
        assert message.headers["amq-msg-type"] == "text"


def test_single_topic_strategy_topic_is_writable_by_the_publisher_only(settings):
    with consumer_connection(settings) as consumer, publisher_connection(settings) as publisher:
        consumer.subscribe("/topic/hcat", "single")
        publisher.send("/topic/hcat", '{"n":1}')
        assert consumer.receive(timeout=5) is not None
        with pytest.raises(BrokerAuthError, match="not authorized to write"):
            consumer.send("/topic/hcat", "{}")


def _next_heartbeat(connection: BrokerConnection, timeout: float) -> float:
    seen = connection.last_heartbeat
    deadline = time.monotonic() + timeout
    while connection.last_heartbeat == seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert connection.last_heartbeat != seen, "the broker sent no heart-beat"
    assert connection.last_heartbeat is not None
    return connection.last_heartbeat


def test_a_message_right_after_a_heartbeat_does_not_look_like_a_dead_broker(settings):
    """ActiveMQ skips its keep-alive when it wrote anything in the interval before, so a
    message just after a beat leaves the connection silent for almost two intervals.
    With stomp.py's default tolerance (1.5 intervals) that read as a dead broker: idle
    watchers and relays reconnected several times an hour (issue 15)."""
    interval = DEFAULT_HEARTBEATS[1] / 1000
    with consumer_connection(settings) as consumer, publisher_connection(settings) as publisher:
        consumer.subscribe("/topic/hcat.client.beats", "beats")
        for _ in range(2):
            beat = _next_heartbeat(consumer, timeout=3 * interval)
            publisher.send("/topic/hcat.client.beats", "{}")  # the broker writes right away
            assert consumer.receive(timeout=5) is not None
            # Now the broker is silent until the check after next: wait it out.
            after = _next_heartbeat(consumer, timeout=4 * interval)
            assert after - beat > 1.5 * interval  # the long silence did happen
        assert consumer.is_connected
        assert consumer.heartbeat_timeouts == 0


# --------------------------------------------------------------------------- failover


def test_a_silent_first_address_costs_the_timeout_then_is_skipped(broker):
    """An address that accepts TCP but never answers CONNECT (a hung broker) is given
    the connect timeout, then the next address is tried."""
    with silent_listener() as silent:
        hung = BrokerAddress("127.0.0.1", silent.getsockname()[1])
        live = BrokerAddress(broker.host, broker.stomp_port)
        connection = BrokerConnection(
            [hung, live], user=broker.publisher[0], password=broker.publisher[1], timeout=1.5
        )
        started = time.monotonic()
        with connection:
            took = time.monotonic() - started
            assert connection.address == live
    assert 1.5 <= took < 6


def test_checking_the_connection_before_each_write_asks_the_kernel_nothing(settings, monkeypatch):
    """is_connected and the checks before BEGIN, the SENDs and COMMIT read the
    listener's view: stomp.py's own asks the kernel (getsockname), a system call that
    hands the GIL to another thread for up to a switch interval, five times a batch."""
    asked: list[threading.Thread] = []
    getsockname = socket.socket.getsockname

    def counted(sock: socket.socket) -> object:
        asked.append(threading.current_thread())
        return getsockname(sock)

    with publisher_connection(settings) as publisher:
        monkeypatch.setattr(socket.socket, "getsockname", counted)
        assert publisher.is_connected
        transaction = publisher.begin()
        publisher.send_in_transaction(transaction, [("/topic/hcat.client.ask", "{}", {})])
        publisher.commit(transaction)
        assert publisher.is_connected
        monkeypatch.undo()
    assert [t for t in asked if t is threading.current_thread()] == []


def test_reconnect_after_a_lost_connection_starts_with_the_next_address(broker):
    """After losing its broker, a connection tries the address after the lost one first,
    even when the lost one answers again (a pair's old master restarted as slave would
    not answer at all)."""
    proxy = Proxy(broker.stomp_port)
    try:
        first = BrokerAddress("127.0.0.1", proxy.port)
        second = BrokerAddress(broker.host, broker.stomp_port)
        with BrokerConnection(
            [first, second], user=broker.publisher[0], password=broker.publisher[1], timeout=5
        ) as connection:
            assert connection.address == first
            proxy.cut()
            deadline = time.monotonic() + 5
            while connection.lost == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert connection.lost == 1
            assert not connection.is_connected
            assert connection.connect() == second
            connection.subscribe("/topic/hcat.client.rotation", "r")  # and it works there
            connection.close()
            assert connection.connect() == second  # closed by us, not lost: stays there
    finally:
        proxy.close()


def test_a_hung_broker_is_noticed_within_the_heartbeat_bound(settings, broker):
    """A broker that stops answering while its socket stays open (SIGSTOP, a frozen VM)
    is noticed by the heart-beats within HEARTBEAT_TIMEOUT of its last frame, and a
    wait for a RECEIPT fails then instead of at its own deadline."""
    proxy = Proxy(broker.stomp_port)
    try:
        connection = BrokerConnection(
            [BrokerAddress("127.0.0.1", proxy.port)],
            user=broker.publisher[0],
            password=broker.publisher[1],
            timeout=60,
        )
        with connection:
            assert connection.connected_at is not None
            # Past stomp.py's grace period of the connection's first 9 s.
            while _next_heartbeat(connection, 10) - connection.connected_at < HEARTBEAT_TIMEOUT:
                pass
            proxy.freeze()
            frozen_at = time.monotonic()
            with pytest.raises(BrokerUnavailableError, match="lost before the RECEIPT"):
                connection.send("/topic/hcat.client.hung", "{}", {"HCAT_EVENT_ID": "1"})
            noticed = time.monotonic() - frozen_at
            assert not connection.is_connected
            # stomp.py reports the heart-beat timeout after the disconnect that failed the
            # send, from its own thread: on a loaded machine, a moment later.
            counted = time.monotonic() + 10
            while connection.heartbeat_timeouts == 0 and time.monotonic() < counted:
                time.sleep(0.01)
            assert connection.heartbeat_timeouts == 1
    finally:
        proxy.close()
    assert HEARTBEAT_TIMEOUT - 3.5 < noticed <= HEARTBEAT_TIMEOUT + 1.5
