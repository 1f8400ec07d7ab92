"""What a JMS 1.1 client (Oozie's kind) sees of hcat-notify's STOMP messages.

The ``jms_probe`` fixture runs ``tests/interop/JmsProbe.java`` (ActiveMQConnectionFactory
over OpenWire, reader principal). These tests prove the fixture and pin the wire
contract from the JMS side:

* a SEND through :class:`hcat_notify.broker.BrokerConnection` arrives as an
  ``ActiveMQTextMessage``, persistent, body intact (non-ASCII included), every ``HCAT_*``
  header a ``String`` JMS property — also ``HCAT_EVENT_ID``, which looks numeric;
* a JMS selector on ``HCAT_TABLE`` filters a per-database topic at the broker;
* without ``amq-msg-type:text`` (stomp.py's default frame carries ``content-length``)
  the very same body arrives as a ``BytesMessage`` — why BrokerConnection sets it;
* all properties are Strings, so a numeric selector (``HCAT_EVENT_ID > 41``) silently
  matches nothing for a JMS consumer;
* characters outside the BMP (emoji) do not survive STOMP → OpenWire raw (AMQ-8398,
  seen on Debian's 5.17.2; an upstream fix was proposed in 2024): in the body
  ``getText()`` throws, in a header they become U+FFFD. As JSON ``\\uXXXX`` escapes in
  the body they arrive intact.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from hcat_notify.broker import BrokerConnection
from hcat_notify.config import BrokerAddress
from tests.fixtures.broker import BrokerInfo, stomp_close, stomp_connect
from tests.fixtures.jms import JmsProbe

pytestmark = pytest.mark.integration

WAIT = 10.0
TEXT_MESSAGE = "org.apache.activemq.command.ActiveMQTextMessage"
BYTES_MESSAGE = "org.apache.activemq.command.ActiveMQBytesMessage"
PERSISTENT = 2  # javax.jms.DeliveryMode.PERSISTENT


def _topic(kind: str) -> str:
    return f"hcat.{kind}.t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def publisher(broker: BrokerInfo) -> Iterator[BrokerConnection]:
    user, password = broker.publisher
    conn = BrokerConnection(
        [BrokerAddress(broker.host, broker.stomp_port)], user=user, password=password, timeout=WAIT
    )
    conn.connect()
    try:
        yield conn
    finally:
        conn.close()


def _headers(event: str, table: str, spec: str, event_id: int) -> dict[str, str]:
    return {
        "HCAT_EVENT": event,
        "HCAT_MESSAGE_VERSION": "0.1",
        "HCAT_MESSAGE_FORMAT": "json",
        "HCAT_EVENT_ID": str(event_id),
        "HCAT_TABLE": table,
        "HCAT_SPEC": spec,
    }


def _add_partition_body(db: str, table: str, partition: dict[str, str], event_id: int) -> str:
    return json.dumps(
        {
            "eventType": "ADD_PARTITION",
            "server": "thrift://metastore.example:9083",
            "servicePrincipal": "hcat/_HOST@EXAMPLE.COM",
            "db": db,
            "table": table,
            "tableType": "MANAGED_TABLE",
            "timestamp": 1298851200,
            "partitions": [partition],
            "eventId": event_id,
        },
        ensure_ascii=False,
    )


def test_brokerconnection_message_is_a_persistent_text_message_with_string_properties(
    broker: BrokerInfo, jms_probe: JmsProbe, publisher: BrokerConnection
) -> None:
    topic = _topic("jms")
    table = "jms.clicks"
    # Raw (not \\u-escaped) non-ASCII in the body and a header: Latin-1 range and CJK,
    # plus a quote/backslash/newline/tab for the probe's hand-written JSON escaping.
    partition = {"datestamp": "20110228", "region": 'zürich/東京 "q" \\ \n\t'}
    body = _add_partition_body("jms", "clicks", partition, 12345678901234)
    headers = _headers("ADD_PARTITION", table, "datestamp=20110228/region=zürich東京", 42)

    listener = jms_probe.listen(broker, topic, count=1, timeout=WAIT)
    publisher.send(f"/topic/{topic}", body, headers)
    [message] = listener.result()

    assert message["jmsClass"] == TEXT_MESSAGE
    assert message["isTextMessage"] is True
    assert message["text"] == body
    assert json.loads(message["text"])["partitions"] == [partition]
    assert message["deliveryMode"] == PERSISTENT
    assert message["destination"] == f"topic://{topic}"
    assert message["topicName"] == topic
    assert message["jmsMessageId"]
    properties = message["properties"]
    for name, value in headers.items():
        # Every STOMP header becomes a String property, even the numeric-looking id.
        assert properties[name] == {"type": "String", "value": value}, name
    # ActiveMQ consumes destination/persistent/receipt (JMS headers or STOMP-only), but
    # passes the other STOMP headers on as String properties — hyphenated names too. No
    # content-type: each header is a property the broker parses and stores per message.
    assert set(properties) == {*headers, "amq-msg-type", "content-length"}
    assert properties["amq-msg-type"] == {"type": "String", "value": "text"}
    assert properties["content-length"] == {
        "type": "String",
        "value": str(len(body.encode("utf-8"))),
    }


def test_selector_on_a_per_database_topic_delivers_only_the_matching_table(
    broker: BrokerInfo, jms_probe: JmsProbe, publisher: BrokerConnection
) -> None:
    topic = "hcat.web"
    listener = jms_probe.listen(
        broker, topic, count=1, selector="HCAT_TABLE = 'web.clicks'", timeout=WAIT, linger=2.0
    )
    # The non-matching message goes first: if the selector let it through, it would be
    # the first one the probe prints (one producer, one topic: order is kept).
    views = _add_partition_body("web", "views", {"datestamp": "20110228"}, 1)
    clicks = _add_partition_body("web", "clicks", {"datestamp": "20110228"}, 2)
    publisher.send(
        f"/topic/{topic}", views, _headers("ADD_PARTITION", "web.views", "datestamp=20110228", 1)
    )
    publisher.send(
        f"/topic/{topic}", clicks, _headers("ADD_PARTITION", "web.clicks", "datestamp=20110228", 2)
    )

    messages = listener.result()  # linger: a second message would fail here

    assert [m["text"] for m in messages] == [clicks]
    assert messages[0]["properties"]["HCAT_TABLE"] == {"type": "String", "value": "web.clicks"}


def test_nothing_arrives_when_the_selector_matches_nothing(
    broker: BrokerInfo, jms_probe: JmsProbe, publisher: BrokerConnection
) -> None:
    topic = _topic("jms")
    listener = jms_probe.listen(
        broker, topic, count=1, selector="HCAT_TABLE = 'web.nothing'", timeout=3
    )
    publisher.send(
        f"/topic/{topic}",
        _add_partition_body("web", "clicks", {"datestamp": "1"}, 1),
        _headers("ADD_PARTITION", "web.clicks", "datestamp=1", 1),
    )
    assert listener.result(allow_timeout=True) == []
    assert "timeout" in listener.stderr


def test_stomp_send_without_amq_msg_type_arrives_as_a_bytes_message(
    broker: BrokerInfo, jms_probe: JmsProbe
) -> None:
    """stomp.py adds ``content-length`` to every SEND; ActiveMQ's STOMP→JMS mapping turns
    such a frame into a BytesMessage unless ``amq-msg-type:text`` says otherwise. A JMS
    consumer expecting a TextMessage (Oozie casts) would fail on it."""
    topic = _topic("jms")
    body = json.dumps({"eventType": "ADD_PARTITION", "region": "zürich"}, ensure_ascii=False)
    listener = jms_probe.listen(broker, topic, count=1, timeout=WAIT)

    conn, recorder = stomp_connect(broker, broker.publisher, timeout=WAIT)
    try:
        receipt = f"send-{uuid.uuid4().hex}"
        conn.send(
            f"/topic/{topic}",
            body,
            headers={"persistent": "true", "HCAT_EVENT": "ADD_PARTITION", "receipt": receipt},
        )
        assert recorder.wait_receipt(receipt, WAIT), [e.headers for e in recorder.errors]
    finally:
        stomp_close(conn, recorder)

    [message] = listener.result()
    assert message["jmsClass"] == BYTES_MESSAGE
    assert message["isTextMessage"] is False
    assert message["isBytesMessage"] is True
    assert message["text"] is None
    assert message["bytesAsUtf8"] == body
    assert message["bodyLength"] == len(body.encode("utf-8"))
    assert message["deliveryMode"] == PERSISTENT
    assert message["properties"]["HCAT_EVENT"] == {"type": "String", "value": "ADD_PARTITION"}


def test_numeric_selector_on_event_id_matches_nothing(
    broker: BrokerInfo, jms_probe: JmsProbe, publisher: BrokerConnection
) -> None:
    """HCAT_EVENT_ID is a String property: ``> 41`` compares a string with a number,
    which is UNKNOWN in JMS selector logic, so nothing is delivered (no error either).
    ``HCAT_EVENT_ID = '42'`` (a string literal) does match."""
    topic = _topic("jms")
    numeric = jms_probe.listen(broker, topic, count=1, selector="HCAT_EVENT_ID > 41", timeout=3)
    string = jms_probe.listen(broker, topic, count=1, selector="HCAT_EVENT_ID = '42'", timeout=3)
    body = _add_partition_body("jms", "clicks", {"datestamp": "1"}, 42)
    publisher.send(f"/topic/{topic}", body, _headers("ADD_PARTITION", "jms.clicks", "d=1", 42))

    assert [m["text"] for m in string.result()] == [body]
    assert numeric.result(allow_timeout=True) == []


def test_astral_characters_arrive_intact_as_json_escapes(
    broker: BrokerInfo, jms_probe: JmsProbe, publisher: BrokerConnection
) -> None:
    """The safe way to carry emoji & co to JMS consumers: ``\\ud83c\\udf89`` in the JSON."""
    topic = _topic("jms")
    partition = {"datestamp": "20110228", "region": "party 🎉 𝄞"}
    body = json.dumps({"eventType": "ADD_PARTITION", "partitions": [partition]})  # ASCII
    listener = jms_probe.listen(broker, topic, count=1, timeout=WAIT)
    publisher.send(f"/topic/{topic}", body, _headers("ADD_PARTITION", "jms.x", "d=1", 1))

    [message] = listener.result()
    assert message["textError"] is None
    assert message["text"] == body
    assert json.loads(message["text"])["partitions"] == [partition]


@pytest.mark.xfail(
    strict=True,
    reason="AMQ-8398: ActiveMQ's STOMP->OpenWire conversion copies standard UTF-8 where "
    "OpenWire expects its 3-byte modified UTF-8; 4-byte characters break. If this passes, "
    "the broker is fixed and the wire contract can allow raw non-BMP characters.",
)
@pytest.mark.parametrize("where", ["body", "header"])
def test_raw_astral_characters_reach_jms_consumers(
    broker: BrokerInfo, jms_probe: JmsProbe, publisher: BrokerConnection, where: str
) -> None:
    topic = _topic("jms")
    value = "party 🎉"
    body = json.dumps({"v": value if where == "body" else "x"}, ensure_ascii=False)
    headers = {"HCAT_SPEC": f"region={value}" if where == "header" else "region=x"}
    listener = jms_probe.listen(broker, topic, count=1, timeout=WAIT)
    publisher.send(f"/topic/{topic}", body, headers)

    [message] = listener.result()
    # Observed on 5.17.2: body -> textError "java.io.UTFDataFormatException";
    # header -> "region=party \ufffd\ufffd".
    assert message["textError"] is None
    assert message["text"] == body
    assert message["properties"]["HCAT_SPEC"]["value"] == headers["HCAT_SPEC"]


def test_probe_reports_refused_credentials(broker: BrokerInfo, jms_probe: JmsProbe) -> None:
    with pytest.raises(AssertionError, match=r"exited before READY[\s\S]*JMSSecurityException"):
        jms_probe.listen(broker, _topic("jms"), count=1, principal=(broker.reader[0], "wrong"))
