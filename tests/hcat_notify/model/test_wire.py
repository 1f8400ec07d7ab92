"""The message model builds what the wire contract and schemas/ describe."""

from __future__ import annotations

import json

import jsonschema
import pytest

from hcat_notify.model.events import EventType
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.wire import (
    PartitionDetails,
    build_add_partition,
    build_mark_set_done,
)
from tests.wire import validate_message, validator

CLICKS = TableName("web", "clicks")


def _add(spec: PartitionSpec, **kwargs):
    return build_add_partition(
        event_id=42,
        table=CLICKS,
        topic="hcat.web.clicks",
        partition=spec,
        timestamp=1298851200,
        server="thrift://meta:9083",
        service_principal="hcat-publisher",
        **kwargs,
    )


def test_add_partition_is_hive_compatible_and_valid():
    spec = PartitionSpec.from_mapping({"datestamp": "20110228", "region": "us"})
    message = _add(
        spec, details=PartitionDetails(location="/d/x", file_count=2, total_bytes=99, job_id="j1")
    )
    body = validate_message(message.headers, message.body)
    # The fields Hive's JSONAddPartitionMessage reads:
    assert body["server"] == "thrift://meta:9083"
    assert body["servicePrincipal"] == "hcat-publisher"
    assert (body["db"], body["table"], body["tableType"]) == ("web", "clicks", "MANAGED_TABLE")
    assert body["timestamp"] == 1298851200  # seconds, not millis
    assert body["partitions"] == [{"datestamp": "20110228", "region": "us"}]
    assert (body["location"], body["fileCount"], body["bytes"], body["jobId"]) == (
        "/d/x",
        2,
        99,
        "j1",
    )
    assert message.headers == {
        "HCAT_EVENT": "ADD_PARTITION",
        "HCAT_MESSAGE_VERSION": "0.1",
        "HCAT_MESSAGE_FORMAT": "json",
        "HCAT_EVENT_ID": "42",
        "HCAT_TABLE": "web.clicks",
        "HCAT_SPEC": "datestamp=20110228/region=us",
    }
    assert message.event_type is EventType.ADD_PARTITION


def test_add_partition_keeps_table_key_order_and_escapes_the_spec():
    spec = PartitionSpec.from_mapping({"region": "us/east", "datestamp": None})
    message = _add(spec)
    body = validate_message(message.headers, message.body)
    assert list(body["partitions"][0]) == ["region", "datestamp"]
    assert body["partitions"][0] == {"region": "us/east", "datestamp": "__HIVE_DEFAULT_PARTITION__"}
    assert message.headers["HCAT_SPEC"] == "region=us%2Feast/datestamp=__HIVE_DEFAULT_PARTITION__"


def test_mark_set_done_is_sorted_and_valid():
    spec = PartitionSpec.from_mapping({"region": "us", "datestamp": "2011=02"})
    message = build_mark_set_done(
        event_id=7, table=CLICKS, topic="hcat.web.clicks", spec=spec, timestamp=1
    )
    body = validate_message(message.headers, message.body)
    assert body["spec"] == "datestamp=2011%3D02/region=us"
    assert list(body["partitionSpec"]) == ["datestamp", "region"]
    assert body["partitionSpec"]["datestamp"] == "2011=02"
    assert message.headers["HCAT_SPEC"] == body["spec"]
    assert body["eventId"] == 7


def test_bodies_are_ascii_json_with_unicode_escapes():
    # ActiveMQ 5.17 breaks raw 4-byte UTF-8 on the way to OpenWire JMS consumers
    # (AMQ-8398); escaped, every JSON reader gets the same values back.
    spec = PartitionSpec.from_mapping({"city": "Zürich 日本 🚀"})
    message = build_mark_set_done(event_id=1, table=CLICKS, topic="t", spec=spec, timestamp=1)
    assert message.body.isascii()
    assert "\\ud83d\\ude80" in message.body
    assert json.loads(message.body)["partitionSpec"] == {"city": "Zürich 日本 🚀"}


@pytest.mark.parametrize(
    ("schema", "body"),
    [
        (
            "add_partition.schema.json",
            {"eventType": "ADD_PARTITION", "db": "web", "table": "clicks"},
        ),
        (
            "mark_set_done.schema.json",
            {
                "eventType": "MARK_SET_DONE",
                "db": "web",
                "table": "clicks",
                "timestamp": 1700000000000,
                "eventId": 1,
                "spec": "a=1",
                "partitionSpec": {"a": "1"},
            },
        ),
        ("headers.schema.json", {"HCAT_EVENT": "DROP_TABLE"}),
    ],
)
def test_schemas_reject_what_the_contract_forbids(schema, body):
    # incomplete bodies, millisecond timestamps, unknown events
    with pytest.raises(jsonschema.ValidationError):
        validator(schema).validate(body)
