"""Wire messages as CloudEvents 1.0: every kind, parsed by the ``cloudevents`` SDK."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from hcat_notify.errors import InvalidInputError
from hcat_notify.model.changes import (
    EventContext,
    PartitionChange,
    TableFacts,
    build_insert,
    build_partition_batch,
    build_table_event,
)
from hcat_notify.model.cloudevents import (
    CLOUDEVENTS_BATCH_JSON,
    CLOUDEVENTS_JSON,
    SEQUENCE_WIDTH,
    dump_batch,
    dump_cloudevent,
    event_type_name,
    extension_name,
    sequence_of,
    to_cloudevent,
    validate_source,
)
from hcat_notify.model.completeness import parse_rule
from hcat_notify.model.cursor import MAX_EVENT_ID
from hcat_notify.model.events import EventType
from hcat_notify.model.names import TableName
from hcat_notify.model.set_events import SetVerdict, build_set_event, build_set_rule
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.wire import (
    Message,
    PartitionDetails,
    build_add_partition,
    build_mark_set_done,
)
from tests.wire import (
    parse_cloudevent,
    parse_cloudevent_batch,
    validate_cloudevent,
    validate_message,
)

SOURCE = "urn:hcat-notify:test"
TABLE = TableName("web", "clicks")
TOPIC = "hcat.web.clicks"
STAMP = 1298851200  # 2011-02-28T00:00:00Z
CONTEXT = EventContext(
    table=TABLE, topic=TOPIC, timestamp=STAMP, server="meta", service_principal="hcat-publisher"
)
SPEC = PartitionSpec.from_mapping({"datestamp": "20110228", "region": "us"})
DAY = PartitionSpec.from_mapping({"datestamp": "20110228"})
FACTS = TableFacts(
    location="/w/web.db/clicks",
    partition_keys=["datestamp", "region"],
    storage_format="parquet",
    topic=TOPIC,
)
VERDICT = SetVerdict(
    spec=DAY,
    generation=2,
    rule_version=3,
    expected=2,
    present=1,
    missing=["datestamp=20110228/region=eu"],
    deadline=STAMP,
)


def _every_kind() -> dict[EventType, Message]:
    """One real message of every kind, built as the catalog builds them."""
    messages = {
        EventType.ADD_PARTITION: build_add_partition(
            event_id=7,
            table=TABLE,
            topic=TOPIC,
            partition=SPEC,
            timestamp=STAMP,
            server="meta",
            service_principal="hcat-publisher",
            details=PartitionDetails(location="/w/x", file_count=2, total_bytes=10),
        ),
        EventType.MARK_SET_DONE: build_mark_set_done(
            event_id=8, table=TABLE, topic=TOPIC, spec=DAY, timestamp=STAMP, rule_version=3
        ),
        EventType.DROP_PARTITION: build_partition_batch(
            EventType.DROP_PARTITION,
            CONTEXT,
            [PartitionChange(SPEC)],
            event_id=9,
            part=1,
            parts=1,
            total=1,
        ),
        EventType.INSERT: build_insert(
            CONTEXT,
            SPEC,
            event_id=10,
            replace=False,
            files=["part-0.parquet"],
            details=PartitionDetails(location="/w/x", file_count=3, total_bytes=30),
            files_added=1,
            bytes_added=10,
            max_message_bytes=65536,
        ),
        EventType.CREATE_TABLE: build_table_event(
            EventType.CREATE_TABLE, CONTEXT, FACTS, event_id=11
        ),
        EventType.DROP_TABLE: build_table_event(EventType.DROP_TABLE, CONTEXT, FACTS, event_id=12),
        EventType.SET_LATE: build_set_event(
            EventType.SET_LATE, VERDICT, event_id=13, table=TABLE, topic=TOPIC, timestamp=STAMP
        ),
        EventType.SET_REOPENED: build_set_event(
            EventType.SET_REOPENED, VERDICT, event_id=14, table=TABLE, topic=TOPIC, timestamp=STAMP
        ),
        EventType.SET_RULE: build_set_rule(
            event_id=15,
            table=TABLE,
            topic=TOPIC,
            timestamp=STAMP,
            version=3,
            rule=parse_rule(
                ("datestamp", "region"), set_keys="datestamp", parts=["region=us"]
            ).as_json(),
            principal="hcat-publisher",
        ),
    }
    assert set(messages) == set(EventType)  # a new kind needs a case here
    return messages


MESSAGES = _every_kind()


@pytest.mark.parametrize("kind", list(EventType), ids=str)
def test_every_kind_is_a_cloudevent_the_sdk_parses_with_the_hive_body_as_data(kind):
    message = MESSAGES[kind]
    body = validate_message(message.headers, message.body)
    event = parse_cloudevent(dump_cloudevent(message, source=SOURCE))
    assert event.get_specversion() == "1.0"
    assert event.get_id() == str(message.event_id)
    assert event.get_source() == SOURCE
    assert event.get_type() == f"org.apache.hive.hcatalog.{kind.value.lower()}"
    assert event.get_time() == datetime(2011, 2, 28, tzinfo=UTC)
    assert event.get_extension("sequence") == str(message.event_id).zfill(19)
    assert event.get_datacontenttype() == "application/json"
    assert event.get_data() == body  # unchanged: Hive's JSONMessageDeserializer reads it
    assert event.get_extension("hcatevent") == kind.value
    assert event.get_extension("hcattable") == "web.clicks"
    assert event.get_extension("hcateventid") == str(message.event_id)
    if kind.about_table:
        assert event.get_subject() == "web.clicks"
        assert "hcatspec" not in event.get_attributes()  # HCAT_SPEC is empty
    else:
        spec = message.headers["HCAT_SPEC"]
        assert spec in (SPEC.to_path(), DAY.to_path())
        assert event.get_subject() == f"web.clicks/{spec}"
        assert event.get_extension("hcatspec") == spec
    # The dict form is the same event; its data the same object.
    as_dict = to_cloudevent(message, source=SOURCE)
    assert as_dict == json.loads(dump_cloudevent(message, source=SOURCE))
    validate_cloudevent(as_dict)  # schemas/cloudevent.schema.json


def test_structured_mode_carries_the_body_byte_for_byte():
    message = MESSAGES[EventType.ADD_PARTITION]
    text = dump_cloudevent(message, source=SOURCE).decode()
    assert text.endswith(f',"data":{message.body}}}')


def test_set_headers_become_extensions_with_valid_names():
    done = to_cloudevent(MESSAGES[EventType.MARK_SET_DONE], source=SOURCE)
    assert done["subject"] == "web.clicks/datestamp=20110228"
    assert done["hcatsetgeneration"] == "1"
    assert done["hcatdonereason"] == "writer"
    assert done["hcatruleversion"] == "3"
    assert done["hcatmessageversion"] == "0.1"
    assert done["hcatmessageformat"] == "json"
    late = to_cloudevent(MESSAGES[EventType.SET_LATE], source=SOURCE)
    assert late["hcatsetgeneration"] == "2"


def test_extension_names_follow_the_cloudevents_rule():
    assert extension_name("HCAT_SET_GENERATION") == "hcatsetgeneration"
    assert extension_name("HCAT_EVENT_ID") == "hcateventid"
    assert extension_name("HCAT_SOME_VERY_LONG_HEADER_NAME") is None  # over 20 characters
    assert extension_name("X-Trace") is None  # a hyphen cannot be in a name


def test_unknown_headers_that_cannot_be_extensions_stay_out():
    plain = MESSAGES[EventType.SET_RULE]
    headers = dict(plain.headers) | {"HCAT_SOME_VERY_LONG_HEADER_NAME": "1", "x-trace": "t"}
    event = to_cloudevent(
        Message(plain.event_id, plain.event_type, plain.topic, headers, plain.body), source=SOURCE
    )
    assert not any("long" in name or "trace" in name for name in event)
    assert event["hcatruleversion"] == "3"


def test_batch_mode_is_an_array_in_the_order_given():
    messages = list(MESSAGES.values())
    batch = parse_cloudevent_batch(dump_batch(messages, source=SOURCE))
    assert [event.get_id() for event in batch] == [str(m.event_id) for m in messages]
    for event, message in zip(batch, messages, strict=True):
        assert event.get_data() == message.body_json()
    assert dump_batch([], source=SOURCE) == b"[]"
    assert CLOUDEVENTS_JSON == "application/cloudevents+json"
    assert CLOUDEVENTS_BATCH_JSON == "application/cloudevents-batch+json"


def test_sequence_sorts_as_the_event_ids_do():
    ids = [1, 9, 10, 99, 100, 12345, MAX_EVENT_ID]
    assert SEQUENCE_WIDTH == 19
    assert sorted(sequence_of(i) for i in ids) == [sequence_of(i) for i in ids]
    assert sequence_of(MAX_EVENT_ID) == str(MAX_EVENT_ID)
    with pytest.raises(InvalidInputError, match="out of range"):
        sequence_of(MAX_EVENT_ID + 1)


def test_type_names_every_kind():
    assert event_type_name(EventType.SET_REOPENED) == "org.apache.hive.hcatalog.set_reopened"
    assert len({event_type_name(kind) for kind in EventType}) == len(EventType)


@pytest.mark.parametrize(
    ("source", "problem"),
    [("", "empty"), ("urn:a b", "spaces"), ("urn:\x01", "control"), ("u" * 3000, "longer")],
)
def test_a_bad_source_is_refused_with_one_line(source, problem):
    with pytest.raises(InvalidInputError, match=problem) as caught:
        dump_cloudevent(MESSAGES[EventType.INSERT], source=source)
    assert "\n" not in str(caught.value)
    assert validate_source("https://hcat.example.com/catalog") == "https://hcat.example.com/catalog"


def test_a_body_without_a_timestamp_is_refused():
    plain = MESSAGES[EventType.SET_RULE]
    broken = Message(plain.event_id, plain.event_type, plain.topic, plain.headers, '{"a":1}')
    with pytest.raises(InvalidInputError, match="timestamp"):
        to_cloudevent(broken, source=SOURCE)


@pytest.mark.parametrize("kind", list(EventType), ids=str)
def test_the_text_is_the_attributes_encoded_then_the_body_as_it_is(kind):
    # built without a dict nor parsing the body: the same bytes as encoding them would give
    spec = PartitionSpec.from_mapping({"datestamp": 'q"uo\\te', "region": "zürich%s"})
    message = MESSAGES[kind]
    if not kind.about_table:
        message = Message(
            message.event_id,
            message.event_type,
            message.topic,
            {**message.headers, "HCAT_SPEC": spec.to_path()},
            message.body,
        )
    source = 'urn:a%sb"\\c'
    attributes = to_cloudevent(message, source=source)
    del attributes["data"]
    head = json.dumps(attributes, ensure_ascii=True, separators=(",", ":"))
    expected = f'{head[:-1]},"data":{message.body}}}'
    assert dump_cloudevent(message, source=source).decode() == expected
    assert dump_batch([message, message], source=source).decode() == f"[{expected},{expected}]"
