"""A real JMS client (Oozie's kind) receives what the relay publishes."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from hcat_notify.config import TopicStrategy
from hcat_notify.relay import Relay
from hcat_notify.store import Catalog, NewPartition, TableInfo
from tests.wire import validate_message

pytestmark = pytest.mark.integration

TEXT_MESSAGE = "org.apache.activemq.command.ActiveMQTextMessage"
HCAT_PROPERTIES = (
    "HCAT_EVENT",
    "HCAT_MESSAGE_VERSION",
    "HCAT_MESSAGE_FORMAT",
    "HCAT_EVENT_ID",
    "HCAT_TABLE",
    "HCAT_SPEC",
)


def _props(message: dict[str, Any]) -> dict[str, str]:
    assert all(message["properties"][name]["type"] == "String" for name in HCAT_PROPERTIES)
    return {name: message["properties"][name]["value"] for name in HCAT_PROPERTIES}


def test_jms_consumer_gets_text_messages_hive_can_parse(
    jms_probe, broker, delivery_settings, delivery_catalog: Catalog, clicks: TableInfo
):
    listener = jms_probe.listen(broker, clicks.topic, count=3, timeout=60)
    delivery_catalog.add_partitions(
        clicks.name,
        [
            NewPartition(
                {"datestamp": "20110228", "region": "us"},
                "/w/datestamp=20110228/region=us",
                4,
                4096,
            ),
            NewPartition({"datestamp": "20110228", "region": "Zürich 🚀"}, "/w/z", 1, 1),
        ],
        job_id="job-1",
    )
    done = delivery_catalog.mark_set_done(clicks.name, {"datestamp": "20110228"})
    with Relay(delivery_settings) as relay:
        assert relay.drain() == 3
    received = listener.result()
    assert [m["jmsClass"] for m in received] == [TEXT_MESSAGE] * 3
    assert all(m["isTextMessage"] and m["deliveryMode"] == 2 for m in received)

    first, second, last = (_props(m) for m in received)
    assert first["HCAT_EVENT"] == "ADD_PARTITION"
    assert (first["HCAT_MESSAGE_VERSION"], first["HCAT_MESSAGE_FORMAT"]) == ("0.1", "json")
    assert first["HCAT_TABLE"] == str(clicks.name)
    assert first["HCAT_SPEC"] == "datestamp=20110228/region=us"
    assert [int(p["HCAT_EVENT_ID"]) for p in (first, second, last)] == [2, 3, done]

    # The fields Hive's JSONAddPartitionMessage requires, with Hive's types.
    body = json.loads(received[0]["text"])
    assert (body["db"], body["table"]) == (clicks.name.db, clicks.name.table)
    assert body["partitions"] == [{"datestamp": "20110228", "region": "us"}]
    assert isinstance(body["timestamp"], int)
    assert body["timestamp"] < 10**11  # seconds, not milliseconds
    # Characters outside the BMP survive as JSON escapes (raw, ActiveMQ breaks them).
    assert json.loads(received[1]["text"])["partitions"] == [
        {"datestamp": "20110228", "region": "Zürich 🚀"}
    ]
    assert _props(received[2])["HCAT_EVENT"] == "MARK_SET_DONE"
    for message in received:
        validate_message(_props(message), message["text"])


def test_jms_selector_filters_a_per_database_topic(
    jms_probe, broker, delivery_settings, clicks: TableInfo
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
        topic = pages.topic
        assert topic == views.topic == f"hcat.{clicks.name.db}"
        listener = jms_probe.listen(
            broker, topic, count=1, selector=f"HCAT_TABLE = '{views.name}'", linger=2
        )
        catalog.mark_set_done(pages.name, {"datestamp": "1"})
        wanted = catalog.mark_set_done(views.name, {"ds": "1"})
        catalog.mark_set_done(pages.name, {"datestamp": "2"})
        with Relay(settings, catalog=catalog) as relay:
            assert relay.drain() == 5  # and the two tables' CREATE_TABLE on hcat
    received = listener.result()
    assert [int(_props(m)["HCAT_EVENT_ID"]) for m in received] == [wanted]
