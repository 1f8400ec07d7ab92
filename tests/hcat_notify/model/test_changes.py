"""Messages of every other change: Hive-shaped bodies, batches under a byte cap."""

from __future__ import annotations

import json

import pytest

from hcat_notify.errors import InvalidInputError
from hcat_notify.model.changes import (
    AnnounceMode,
    EventContext,
    PartitionChange,
    TableFacts,
    announce_mode,
    build_insert,
    build_partition_batch,
    build_table_event,
    common_prefix,
    plan_batches,
)
from hcat_notify.model.events import EventType
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.wire import PartitionDetails
from tests.wire import validate_message

CONTEXT = EventContext(
    table=TableName("web", "clicks"),
    topic="hcat.web.clicks",
    timestamp=1298851200,
    server="meta",
    service_principal="hcat-publisher",
)


def _spec(day: int, region: str) -> PartitionSpec:
    return PartitionSpec.from_mapping({"datestamp": f"2011{day:04d}", "region": region})


def _batches(changes, cap, event_type=EventType.ADD_PARTITION):
    groups = plan_batches(event_type, CONTEXT, changes, max_message_bytes=cap, job_id="job-1")
    return [
        build_partition_batch(
            event_type,
            CONTEXT,
            group,
            event_id=10**6 + part,
            part=part,
            parts=len(groups),
            total=len(changes),
            job_id="job-1",
        )
        for part, group in enumerate(groups, start=1)
    ]


def _size(message) -> int:
    headers = sum(len(k.encode()) + len(v.encode()) for k, v in message.headers.items())
    return len(message.body.encode()) + headers


def test_2000_partitions_split_under_the_cap_each_listed_once():
    changes = [
        PartitionChange(
            _spec(day, f"region-{n}"),
            PartitionDetails(location=f"/w/d={day}/r={n}", file_count=3, total_bytes=3 * 10**6),
        )
        for day in range(4)
        for n in range(500)
    ]
    cap = 64 * 1024
    messages = _batches(changes, cap)
    assert len(messages) > 1
    listed = []
    for part, message in enumerate(messages, start=1):
        assert _size(message) <= cap
        body = validate_message(message.headers, message.body)  # complete on its own
        assert body["batch"] == {"part": part, "parts": len(messages), "partitionCount": 2000}
        assert len(body["partitionDetails"]) == len(body["partitions"])
        assert body["jobId"] == "job-1"
        listed += [tuple(p.items()) for p in body["partitions"]]
    assert sorted(listed) == sorted(tuple(c.spec.as_strings().items()) for c in changes)
    assert len(set(listed)) == 2000
    # fills messages: not far from the cap
    assert all(_size(m) > cap * 0.8 for m in messages[:-1])


def test_batch_spec_is_the_common_leading_spec():
    same_day = [PartitionChange(_spec(1, r)) for r in ("us", "eu")]
    (message,) = _batches(same_day, 64 * 1024)
    assert message.headers["HCAT_SPEC"] == "datestamp=20110001"
    assert json.loads(message.body)["spec"] == "datestamp=20110001"
    mixed = [PartitionChange(_spec(1, "us")), PartitionChange(_spec(2, "us"))]
    (message,) = _batches(mixed, 64 * 1024)
    assert message.headers["HCAT_SPEC"] == ""
    assert "spec" not in json.loads(message.body)
    validate_message(message.headers, message.body)
    assert common_prefix([_spec(1, "us")]) == _spec(1, "us")
    assert common_prefix([]) is None


def test_drop_partition_lists_partitions_as_hive_does():
    (message,) = _batches([PartitionChange(_spec(1, "us"))], 64 * 1024, EventType.DROP_PARTITION)
    body = validate_message(message.headers, message.body)
    assert body["eventType"] == "DROP_PARTITION"
    assert body["partitions"] == [{"datestamp": "20110001", "region": "us"}]
    assert message.headers["HCAT_SPEC"] == "datestamp=20110001/region=us"


def test_insert_carries_part_key_vals_files_and_replace():
    message = build_insert(
        CONTEXT,
        _spec(1, "us"),
        event_id=7,
        replace=True,
        files=["/w/a.parquet"],
        details=PartitionDetails(location="/w", file_count=4, total_bytes=40, job_id="j"),
        files_added=1,
        bytes_added=10,
        max_message_bytes=64 * 1024,
    )
    body = validate_message(message.headers, message.body)
    assert body["partKeyVals"] == {"datestamp": "20110001", "region": "us"}
    assert (body["files"], body["replace"]) == (["/w/a.parquet"], True)
    assert (body["fileCount"], body["bytes"], body["filesAdded"], body["bytesAdded"]) == (
        4,
        40,
        1,
        10,
    )


def test_insert_with_too_many_files_is_cut_under_the_cap():
    files = [
        f"/warehouse/web/clicks/datestamp=1/region=us/part-{n:06d}.parquet" for n in range(5000)
    ]
    message = build_insert(
        CONTEXT,
        _spec(1, "us"),
        event_id=7,
        replace=False,
        files=files,
        details=PartitionDetails(location="/w", file_count=5000, total_bytes=1),
        files_added=5000,
        bytes_added=1,
        max_message_bytes=16 * 1024,
    )
    assert _size(message) <= 16 * 1024
    body = validate_message(message.headers, message.body)
    assert body["filesTruncated"] is True
    assert body["files"] == files[: len(body["files"])]
    assert body["filesAdded"] == 5000


@pytest.mark.parametrize("event_type", [EventType.CREATE_TABLE, EventType.DROP_TABLE])
def test_table_events_have_no_spec(event_type):
    facts = TableFacts(location="/w", partition_keys=["datestamp"], storage_format="orc", topic="t")
    message = build_table_event(event_type, CONTEXT, facts, event_id=3)
    body = validate_message(message.headers, message.body)
    assert message.headers["HCAT_SPEC"] == ""
    assert body["tableTopic"] == "t"
    assert body["partitionKeys"] == ["datestamp"]
    with pytest.raises(InvalidInputError):
        build_table_event(EventType.INSERT, CONTEXT, facts, event_id=3)


def test_announce_mode_from_property_or_override():
    assert announce_mode({}) is AnnounceMode.PARTITION
    assert announce_mode({"hcat.notify.announce": "WRITE"}) is AnnounceMode.WRITE
    assert announce_mode({"hcat.notify.announce": "write"}, "partition") is AnnounceMode.PARTITION
    with pytest.raises(InvalidInputError, match="unknown announce mode 'table'"):
        announce_mode({}, "table")
