"""The broker's security and STOMP behaviour that hcat-notify relies on.

Raw stomp.py against the session ``broker`` (deploy/activemq/activemq.xml):

* the publisher principal may write ``hcat.>`` topics and nothing else (other topics and
  all queues are refused: the bus carries partition notifications only);
* reader principals may subscribe to (and thereby create) ``hcat.>`` topics and read
  advisories, but never write;
* anonymous and wrong-password connections are refused;
* deploy/local/activemq.sh status/start/stop behave as documented, and the JVM gets its
  documented heap.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import stomp

from tests.fixtures.broker import (
    SCRIPT,
    BrokerInfo,
    RecordingListener,
    stomp_close,
    stomp_connect,
)

pytestmark = pytest.mark.integration

WAIT = 10.0
TEXT_HEADERS = {"amq-msg-type": "text", "persistent": "true"}

Client = tuple[stomp.Connection12, RecordingListener]


def _topic(kind: str) -> str:
    """A fresh topic name nobody has used: hcat.<kind>.t<random>."""
    return f"hcat.{kind}.t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def clients(broker: BrokerInfo) -> Iterator[list[Client]]:
    """Connections opened by a test; all closed afterwards."""
    opened: list[Client] = []
    yield opened
    for conn, listener in opened:
        stomp_close(conn, listener)


def _open(broker: BrokerInfo, clients: list[Client], principal: tuple[str, str]) -> Client:
    client = stomp_connect(broker, principal, timeout=WAIT)
    clients.append(client)
    return client


def _subscribe(client: Client, destination: str, sub_id: str = "sub-1") -> None:
    conn, listener = client
    receipt = f"sub-{uuid.uuid4().hex}"
    conn.subscribe(destination, id=sub_id, ack="auto", headers={"receipt": receipt})
    assert listener.wait_receipt(receipt, WAIT), (
        f"no receipt for SUBSCRIBE {destination}: "
        f"{[e.headers.get('message') for e in listener.errors]}"
    )


def _send(client: Client, destination: str, body: str, **headers: str) -> str:
    """SEND with a receipt; returns the receipt id (the caller decides what to expect)."""
    conn, _ = client
    receipt = f"send-{uuid.uuid4().hex}"
    conn.send(destination, body, headers={**TEXT_HEADERS, **headers, "receipt": receipt})
    return receipt


def _send_confirmed(client: Client, destination: str, body: str, **headers: str) -> None:
    receipt = _send(client, destination, body, **headers)
    _, listener = client
    assert listener.wait_receipt(receipt, WAIT), (
        f"no receipt for SEND to {destination}: "
        f"{[e.headers.get('message') for e in listener.errors]}"
    )


def _expect_refused_send(client: Client, destination: str, principal: str) -> None:
    conn, listener = client
    receipt = _send(client, destination, '{"evil": true}')
    error = listener.wait_error(WAIT)
    assert error is not None, f"SEND to {destination} as {principal} was not refused"
    message = error.headers.get("message", "")
    assert "not authorized to write" in message
    assert principal in message
    # ActiveMQ puts the failed SEND's receipt id on the ERROR frame, and sends no RECEIPT.
    assert error.headers.get("receipt-id") == receipt
    assert receipt not in listener.receipts
    # The connection stays open after an authorization ERROR.
    assert conn.is_connected()


# --------------------------------------------------------------------------- publish/read


def test_publisher_reaches_reader_subscribed_to_a_new_topic(
    broker: BrokerInfo, clients: list[Client]
) -> None:
    topic = _topic("auth")
    reader = _open(broker, clients, broker.reader)
    # Nobody has published to the topic yet: the reader's SUBSCRIBE creates it (admin).
    _subscribe(reader, f"/topic/{topic}")

    publisher = _open(broker, clients, broker.publisher)
    body = json.dumps({"eventType": "ADD_PARTITION", "db": "x", "table": "y"})
    _send_confirmed(publisher, f"/topic/{topic}", body, HCAT_EVENT="ADD_PARTITION")

    messages = reader[1].wait_messages(1, WAIT)
    assert len(messages) == 1
    message = messages[0]
    assert json.loads(message.body) == json.loads(body)
    assert message.headers["destination"] == f"/topic/{topic}"
    assert message.headers["HCAT_EVENT"] == "ADD_PARTITION"
    assert message.headers["amq-msg-type"] == "text"
    assert message.headers["persistent"] == "true"
    assert not reader[1].errors
    assert not publisher[1].errors


def test_reader_may_not_write(broker: BrokerInfo, clients: list[Client]) -> None:
    topic = _topic("auth")
    subscriber = _open(broker, clients, broker.reader)
    _subscribe(subscriber, f"/topic/{topic}")

    intruder = _open(broker, clients, broker.reader)
    _expect_refused_send(intruder, f"/topic/{topic}", broker.reader[0])

    # A publisher message sent afterwards is the first and only one the subscriber sees,
    # so the refused message was never delivered.
    publisher = _open(broker, clients, broker.publisher)
    _send_confirmed(publisher, f"/topic/{topic}", '{"marker": 1}')
    messages = subscriber[1].wait_messages(1, WAIT)
    assert [m.body for m in messages] == ['{"marker": 1}']


@pytest.mark.parametrize(
    "destination",
    ["/topic/other.x.y", "/topic/hcatx.y", "/queue/hcat.x.y"],
    ids=["other-topic", "prefix-lookalike", "queue"],
)
def test_publisher_may_write_only_hcat_topics(
    broker: BrokerInfo, clients: list[Client], destination: str
) -> None:
    """Decision: the bus carries hcat.> topics only; nothing else exists for anyone."""
    publisher = _open(broker, clients, broker.publisher)
    _expect_refused_send(publisher, destination, broker.publisher[0])
    # ... and the same connection can still publish where it is allowed to.
    _send_confirmed(publisher, f"/topic/{_topic('auth')}", "{}")


def test_reader_may_not_subscribe_outside_hcat(broker: BrokerInfo, clients: list[Client]) -> None:
    conn, listener = _open(broker, clients, broker.reader)
    receipt = f"sub-{uuid.uuid4().hex}"
    conn.subscribe("/topic/other.x.y", id="sub-1", ack="auto", headers={"receipt": receipt})
    error = listener.wait_error(WAIT)
    assert error is not None
    assert "not authorized to read" in error.headers.get("message", "")
    assert receipt not in listener.receipts


# --------------------------------------------------------------------------- authentication


def test_anonymous_connect_is_refused(broker: BrokerInfo) -> None:
    conn, listener = stomp_connect(broker, None, timeout=WAIT, require=False)
    try:
        assert listener.connected is None
        error = listener.wait_error(WAIT)
        assert error is not None
        assert "password is invalid" in error.headers.get("message", "")
    finally:
        stomp_close(conn, listener)


@pytest.mark.parametrize(
    "who",
    ["publisher-wrong-password", "reader-wrong-password", "unknown-user"],
)
def test_bad_credentials_are_refused(broker: BrokerInfo, who: str) -> None:
    principal = {
        "publisher-wrong-password": (broker.publisher[0], "not-the-password"),
        "reader-wrong-password": (broker.reader[0], "not-the-password"),
        "unknown-user": ("mallory", broker.publisher[1]),
    }[who]
    conn, listener = stomp_connect(broker, principal, timeout=WAIT, require=False)
    try:
        assert listener.connected is None
        error = listener.wait_error(WAIT)
        assert error is not None
        message = error.headers.get("message", "")
        assert "password is invalid" in message
        assert principal[0] in message
        # The broker drops the connection after refusing it.
        assert listener.wait_disconnected(WAIT)
    finally:
        stomp_close(conn, listener)


# --------------------------------------------------------------------------- advisories


def test_reader_receives_consumer_advisories(broker: BrokerInfo, clients: list[Client]) -> None:
    topic = _topic("adv")
    watcher = _open(broker, clients, broker.reader)
    _subscribe(watcher, f"/topic/ActiveMQ.Advisory.Consumer.Topic.{topic}", "advisory")

    consumer = _open(broker, clients, broker.reader)
    _subscribe(consumer, f"/topic/{topic}")

    messages = watcher[1].wait_messages(1, WAIT)
    assert messages, "no consumer advisory arrived"
    advisory = messages[0]
    assert advisory.headers["type"] == "Advisory"
    assert advisory.headers["consumerCount"] == "1"
    assert advisory.headers["destination"] == f"/topic/ActiveMQ.Advisory.Consumer.Topic.{topic}"
    assert not watcher[1].errors
    assert watcher[0].is_connected()


# --------------------------------------------------------------------------- the script


def _script(broker: BrokerInfo, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), command],
        env=broker.script_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def local_broker(broker: BrokerInfo) -> BrokerInfo:
    if not broker.controllable:
        pytest.skip(f"the script manages local brokers only (mode {broker.mode})")
    return broker


def test_script_status_reports_running_broker(local_broker: BrokerInfo) -> None:
    result = _script(local_broker, "status")
    assert result.returncode == 0, result.stderr
    pid = local_broker.pid()
    assert result.stdout.strip() == (
        f"running (pid {pid}, stomp {local_broker.host}:{local_broker.stomp_port})"
    )


def test_script_start_twice_is_a_noop(local_broker: BrokerInfo) -> None:
    pid = local_broker.pid()
    result = _script(local_broker, "start")
    assert result.returncode == 0, result.stderr
    assert "already running" in result.stdout
    assert local_broker.pid() == pid
    assert local_broker.is_running()


def test_the_broker_jvm_has_a_fixed_heap_of_one_gib(local_broker: BrokerInfo) -> None:
    """activemq.sh's default JVM options (docs/operations.md, "The broker's heap"), as
    the running JVM got them; HCAT_NOTIFY_BROKER_JAVA_OPTS replaces them when set."""
    pid = local_broker.pid()
    assert pid is not None
    arguments = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    options = local_broker.script_env().get("HCAT_NOTIFY_BROKER_JAVA_OPTS", "-Xms1g -Xmx1g")
    assert arguments[1 : 1 + len(options.split())] == options.split(), arguments[:4]


def test_stop_and_start_keep_address_and_credentials(restartable_broker: BrokerInfo) -> None:
    broker = restartable_broker
    old_pid = broker.pid()
    broker.stop()
    assert not broker.is_running()
    assert broker.pid() is None
    stopped = _script(broker, "status")
    assert (stopped.returncode, stopped.stdout.strip()) == (3, "stopped")
    # stop when stopped is a no-op too
    assert _script(broker, "stop").returncode == 0

    broker.start()
    assert broker.is_running()
    new_pid = broker.pid()
    assert new_pid is not None
    assert new_pid != old_pid


def _start_jdbc(tmp_path: Path, java_dir: Path, url: str) -> subprocess.CompletedProcess[str]:
    """``start --pair --jdbc-url URL`` in a fresh home, with the jars of ``java_dir``."""
    env = dict(
        os.environ,
        HCAT_NOTIFY_HOME=str(tmp_path / "home"),
        HCAT_NOTIFY_JAVA_DIR=str(java_dir),
        HCAT_NOTIFY_BROKER_PORT="1613",
        HCAT_NOTIFY_OPENWIRE_PORT="1616",
    )
    return subprocess.run(
        ["bash", str(SCRIPT), "start", "--pair", "--jdbc-url", url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_jdbc_store_without_its_jars_is_refused_naming_their_packages(tmp_path: Path) -> None:
    java_dir = tmp_path / "java"
    java_dir.mkdir()
    for jar in ("xstream.jar", "jettison.jar", "activemq-jdbc-store.jar", "commons-pool2.jar"):
        (java_dir / jar).touch()
    result = _start_jdbc(tmp_path, java_dir, "jdbc:postgresql://127.0.0.1:1/broker?user=u")
    assert result.returncode == 1
    assert "libpostgresql-jdbc-java libcommons-dbcp2-java" in result.stderr
    assert f"{java_dir}/postgresql.jar" in result.stderr
    assert "libcommons-pool2-java" not in result.stderr
    assert not (tmp_path / "home" / "activemq" / "activemq.pid").exists()


def test_a_jdbc_url_other_than_postgresql_is_refused(tmp_path: Path) -> None:
    result = _start_jdbc(tmp_path, tmp_path, "postgresql://u:secret@db/broker")
    assert result.returncode == 1
    assert "must be jdbc:postgresql://" in result.stderr
    assert "got postgresql://..." in result.stderr
    assert "secret" not in result.stderr
    assert not (tmp_path / "home" / "activemq").exists()
