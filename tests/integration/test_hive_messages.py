"""Hive's own reader parses every kind of change as it arrives over JMS.

The ``jms_probe`` (``hive=True``) runs Hive 2.3's ``JSONMessageDeserializer`` from the
jars PySpark ships on each message the relay publishes, picked by ``HCAT_EVENT`` as
Hive's ``MessageDeserializer`` picks it, and calls ``checkValid()``.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from hcat_notify.model.changes import AnnounceMode
from hcat_notify.model.names import TableName
from hcat_notify.model.topics import resolve_topic
from hcat_notify.relay import Relay
from hcat_notify.store import Catalog, NewPartition, TableInfo
from tests.wire import validate_message

pytestmark = pytest.mark.integration

HIVE = {
    "ADD_PARTITION": "JSONAddPartitionMessage",
    "DROP_PARTITION": "JSONDropPartitionMessage",
    "INSERT": "JSONInsertMessage",
    "CREATE_TABLE": "JSONCreateTableMessage",
    "DROP_TABLE": "JSONDropTableMessage",
}


def _props(message: dict[str, Any]) -> dict[str, str]:
    return {k: v["value"] for k, v in message["properties"].items() if k.startswith("HCAT_")}


def write_existing(
    catalog: Catalog, table: TableInfo, job: str, mode: str, spec: dict[str, str]
) -> None:
    """An append or overwrite of an existing partition, as the committer journals it."""
    path = "/".join(f"{k}={v}" for k, v in spec.items())
    catalog.commits.begin(
        job, table.name, mode=mode, partitions=[path], plan={}, started_at=datetime.now(UTC)
    )
    catalog.commits.complete(
        job, [NewPartition(spec, f"/w/{path}", 2, 20, files=(f"/w/{path}/part-{job}.parquet",))]
    )


def test_hive_reads_every_new_event_type(
    jms_probe, broker, delivery_settings, delivery_catalog: Catalog
):
    catalog = delivery_catalog
    # The table is created after the listeners subscribe, so its CREATE_TABLE is heard.
    name = TableName.parse(f"d{uuid.uuid4().hex[:10]}.clicks")
    topic = resolve_topic(
        name, prefix=delivery_settings.topic_prefix, strategy=delivery_settings.topic_strategy
    )
    selector = f"HCAT_TABLE = '{name}'"
    table_topic = jms_probe.listen(broker, topic, count=6, timeout=60, linger=1, hive=True)
    prefix_topic = jms_probe.listen(
        broker, "hcat", count=2, selector=selector, timeout=60, linger=1, hive=True
    )
    clicks = catalog.create_table(
        name, location="/data/clicks", partition_keys=["datestamp", "region"]
    )
    assert clicks.topic == topic
    us = {"datestamp": "20110228", "region": "us"}
    catalog.partitions.register(clicks.name, [NewPartition(us, "/w/us", 1, 10)])
    catalog.partitions.register(
        clicks.name,
        [NewPartition({"datestamp": "20110301", "region": r}, f"/w/{r}", 1, 1) for r in "abc"],
        announce=AnnounceMode.WRITE,
    )
    write_existing(catalog, clicks, "append-1", "append", us)
    write_existing(catalog, clicks, "overwrite-1", "overwrite", us)
    catalog.partitions.drop(clicks.name, {"datestamp": "20110228"})
    catalog.tables.drop(clicks.name)
    with Relay(delivery_settings) as relay:
        assert relay.drain() == 8  # 6 on the table's topic, CREATE and DROP_TABLE on hcat

    on_table = table_topic.result()
    on_prefix = prefix_topic.result()
    events = [_props(m)["HCAT_EVENT"] for m in on_table]
    # the CREATE_TABLE went to the prefix topic only; the DROP_TABLE to both
    assert events == [
        "ADD_PARTITION",
        "ADD_PARTITION",
        "INSERT",
        "INSERT",
        "DROP_PARTITION",
        "DROP_TABLE",
    ]
    assert [_props(m)["HCAT_EVENT"] for m in on_prefix] == ["CREATE_TABLE", "DROP_TABLE"]
    for message in on_table + on_prefix:
        props = _props(message)
        assert message.get("hiveError") is None, message.get("hiveError")
        hive = message["hive"]
        assert hive["class"] == HIVE[props["HCAT_EVENT"]]
        assert (hive["db"], hive["table"]) == (clicks.name.db, clicks.name.table)
        assert hive["server"]
        assert hive["servicePrincipal"] == delivery_settings.broker_user
        assert isinstance(hive["timestamp"], int)
        assert hive["timestamp"] < 10**11  # seconds
        validate_message(props, message["text"])

    by_event: dict[str, list[dict[str, Any]]] = {}
    for message in on_table:
        by_event.setdefault(_props(message)["HCAT_EVENT"], []).append(message)
    single, batch = by_event["ADD_PARTITION"]
    assert single["hive"]["partitions"] == [us]
    assert batch["hive"]["partitions"] == [{"datestamp": "20110301", "region": r} for r in "abc"]
    append, overwrite = by_event["INSERT"]
    assert append["hive"]["partitionKeyValues"] == us
    assert append["hive"]["files"] == ["/w/datestamp=20110228/region=us/part-append-1.parquet"]
    assert [json.loads(m["text"])["replace"] for m in (append, overwrite)] == [False, True]
    (dropped,) = by_event["DROP_PARTITION"]
    assert dropped["hive"]["partitions"] == [us]
    assert by_event["DROP_TABLE"][0]["hive"]["eventType"] == "DROP_TABLE"
    assert json.loads(on_prefix[0]["text"])["tableTopic"] == clicks.topic


def test_a_batch_of_2000_partitions_arrives_under_the_cap_each_listed_once(
    jms_probe, broker, delivery_settings, delivery_catalog: Catalog, clicks: TableInfo
):
    specs = [
        {"datestamp": f"201103{day:02d}", "region": f"region-{n:03d}"}
        for day in range(1, 5)
        for n in range(500)
    ]
    new = [
        NewPartition(
            spec,
            "hdfs://nn:8020/warehouse/clicks/"
            f"datestamp={spec['datestamp']}/region={spec['region']}",
            4,
            4 * 128 * 1024 * 1024,
        )
        for spec in specs
    ]
    registration = delivery_catalog.partitions.register(
        clicks.name, new, announce=AnnounceMode.WRITE
    )
    parts = len(registration.event_ids)
    assert parts > 1
    listener = jms_probe.listen(broker, clicks.topic, count=parts, timeout=60, linger=1, hive=True)
    with Relay(delivery_settings) as relay:
        assert relay.drain() == parts  # the clicks fixture published its CREATE_TABLE before
    received = listener.result()
    cap = delivery_settings.max_message_bytes
    listed = []
    for part, message in enumerate(received, start=1):
        headers = _props(message)
        size = len(message["text"].encode()) + sum(len(k) + len(v) for k, v in headers.items())
        assert size <= cap
        body = validate_message(headers, message["text"])
        assert body["batch"] == {"part": part, "parts": parts, "partitionCount": 2000}
        assert message["hive"]["partitions"] == body["partitions"]  # Hive reads it whole
        listed += [(p["datestamp"], p["region"]) for p in body["partitions"]]
    assert len(listed) == len(set(listed)) == 2000
    assert set(listed) == {(spec["datestamp"], spec["region"]) for spec in specs}
