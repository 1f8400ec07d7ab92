"""Records read from the catalog are decoded when first read, and say the same as the
message on the wire. SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest

from hcat_notify.broker.connection import ReceivedMessage
from hcat_notify.model.events import EventType
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.topics import destination_for
from hcat_notify.notification import Source, from_message, from_outbox
from hcat_notify.store import Catalog, NewPartition

pytestmark = pytest.mark.integration


def _events(catalog: Catalog):
    catalog.create_table(
        "web.clicks",
        location="/w/clicks",
        partition_keys=["datestamp", "region"],
    )
    catalog.add_partitions(
        "web.clicks",
        [NewPartition({"datestamp": "20110228", "region": r}, "/w") for r in ("us", "e/u")],
    )
    catalog.mark_set_done("web.clicks", {"datestamp": "20110228"})
    return catalog.catch_up(["web.clicks"], cursor="*:0")


def test_a_notification_from_the_catalog_equals_the_one_from_the_wire(catalog: Catalog):
    page = _events(catalog)
    # CREATE_TABLE goes to the prefix topic, not the table's.
    assert [e.event_type for e in page] == [
        EventType.ADD_PARTITION,
        EventType.ADD_PARTITION,
        EventType.MARK_SET_DONE,
    ]
    for event in page:
        stored = from_outbox(event, Source.LIVE)
        wire = from_message(
            ReceivedMessage(destination_for(event.topic), dict(event.headers), event.body)
        )
        assert wire is not None
        assert stored == wire
        assert stored.as_dict() == wire.as_dict()
    done = from_outbox(page[-1], Source.RETAINED)
    assert done.spec == PartitionSpec.parse("datestamp=20110228")
    assert done.body == json.loads(page[-1].body)
    assert done.headers["HCAT_EVENT"] == "MARK_SET_DONE"
    escaped = from_outbox(page[1], Source.REGISTRY)
    assert escaped.partitions == (
        PartitionSpec.from_mapping({"datestamp": "20110228", "region": "e/u"}),
    )


def test_records_are_read_only_and_replace_names_a_bad_field(catalog: Catalog):
    event = _events(catalog)[-1]
    notification = from_outbox(event, Source.RETAINED)
    with pytest.raises(AttributeError, match="read-only"):
        notification.event_id = 1
    with pytest.raises(AttributeError, match="read-only"):
        event.body = "{}"
    with pytest.raises(TypeError, match="'colour'"):
        notification.replace(colour="red")
    moved = notification.replace(spec=None, event_id=99)
    assert (moved.event_id, moved.spec, moved.body) == (99, None, notification.body)
    assert notification.event_id == event.event_id  # the original did not change
    assert event.created_at.tzinfo is not None


def test_a_catch_up_page_indexes_slices_and_compares_like_a_list(catalog: Catalog):
    page = _events(catalog)
    events = list(page)
    assert len(page) == len(events) == 3
    assert page[-1].event_id == events[-1].event_id
    assert [e.event_id for e in page[1:]] == [e.event_id for e in events[1:]]
    assert page == events
    assert page != events[:2]
    ids = [e.event_id for e in events]
    assert ids == sorted(ids)
    limited = catalog.catch_up(["web.clicks"], cursor="*:0", page_after=ids[0], limit=1)
    assert [e.event_id for e in limited] == [ids[1]]
