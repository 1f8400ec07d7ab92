"""Live messages hold to the AsyncAPI document: every kind of event, published by a real
relay through the real broker, arrives on a channel the document describes, as one of
that channel's messages, its HCAT_* headers and body valid against that message's
schemas (schemas/asyncapi.yaml, resolved by tests/asyncapi/contract.py); SQLite and
PostgreSQL."""

from __future__ import annotations

import uuid

import pytest

from hcat_notify.config import Settings
from hcat_notify.model.events import EventType
from hcat_notify.relay import Relay
from hcat_notify.store import Catalog, NewPartition
from tests.asyncapi.contract import channel_of, validate_on_topic
from tests.integration.delivery import Recorder
from tests.integration.test_hive_messages import write_existing

pytestmark = pytest.mark.integration


def test_every_kind_on_the_wire_is_a_message_of_its_channel(
    delivery_settings: Settings, delivery_catalog: Catalog
):
    catalog = delivery_catalog
    name = f"a{uuid.uuid4().hex[:10]}.clicks"
    table_topic = f"hcat.{name}"
    on_table = Recorder(delivery_settings, table_topic)
    on_prefix = Recorder(delivery_settings, "hcat", selector=f"HCAT_TABLE = '{name}'")
    try:
        clicks = catalog.create_table(name, location="/w/c", partition_keys=["ds", "region"])
        assert clicks.topic == table_topic
        # A rule (SET_RULE) whose deadline, the day after the set's date, is long past.
        catalog.expect(name, set_keys="ds", parts=["region=us,eu"], deadline="ds+1d 00:00")

        def add(ds: str, *regions: str) -> None:
            parts = [NewPartition({"ds": ds, "region": r}, f"/w/c/{ds}/{r}") for r in regions]
            catalog.add_partitions(name, parts)

        add("20000101", "us")  # incomplete past its deadline: SET_LATE
        add("20000102", "us", "eu")  # complete: the rule's MARK_SET_DONE
        write_existing(catalog, clicks, "append-1", "append", {"ds": "20000102", "region": "us"})
        catalog.partitions.drop(clicks.name, {"ds": "20000102", "region": "eu"})  # SET_REOPENED
        with Relay(delivery_settings, catalog=catalog) as relay:
            relay.drain()  # its timed pass writes the SET_LATE first
            catalog.tables.drop(clicks.name)
            relay.drain()
        wire = {
            table_topic: on_table.wait_for_ids(_ids(catalog, name, table_topic), timeout=30),
            "hcat": on_prefix.wait_for_ids(_ids(catalog, name, "hcat"), timeout=30),
        }
        kinds: set[str] = set()
        for topic, recorder in ((table_topic, on_table), ("hcat", on_prefix)):
            assert recorder.event_ids() == wire[topic]
            for message in recorder.messages:
                body = validate_on_topic(topic, message.headers, message.body)
                assert body["eventType"] == message.headers["HCAT_EVENT"]
                kinds.add(message.headers["HCAT_EVENT"])
        assert kinds == {kind.value for kind in EventType}
        assert channel_of(table_topic) == "tableTopic"
        assert [m.headers["HCAT_EVENT"] for m in on_prefix.messages] == [
            "CREATE_TABLE",
            "DROP_TABLE",
        ]
    finally:
        on_table.close()
        on_prefix.close()


def _ids(catalog: Catalog, name: str, topic: str) -> list[int]:
    """The event ids the catalog wrote for ``topic`` about table ``name``, in order."""
    events = catalog.outbox.events(limit=100_000)
    ids = [e.event_id for e in events if e.topic == topic and e.table == name]
    assert ids, f"no events for {name} on {topic}"
    return ids
