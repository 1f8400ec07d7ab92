"""Nothing gets stuck: an event or a topic the broker refuses never blocks the others.

An event the broker refuses for what it is (a header over its limit) or for where it
goes (a topic the publisher may not write) is tried a bounded number of times, then
parked: the rest keep flowing, ``hcat-notify status`` shows it, and operators retry or
drop it (``hcat-notify outbox retry|drop``), each action recorded.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import create_engine, insert, select

from hcat_notify.config import Settings
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.topics import DEFAULT_BUCKETS, topic_bucket
from hcat_notify.model.wire import build_mark_set_done, with_event_id
from hcat_notify.store import Catalog, TableInfo
from hcat_notify.store.event_ids import allocate_event_ids
from hcat_notify.store.models import OutboxActionRow, OutboxRow
from tests.integration.delivery import CliProcess, Recorder, changes, run_cli, running_relay

pytestmark = pytest.mark.integration

EXIT_UNDELIVERABLE = 3
EXIT_CREDENTIALS = 77


def _poison(settings: Settings, table: TableInfo) -> int:
    """A done whose HCAT_SPEC header is over the broker's limit, as a version without
    bounds on specs could write it (the door refuses such a spec now): one transaction,
    so that a running relay never sees it otherwise."""
    spec = "datestamp=" + "%2F" * 4000
    message = build_mark_set_done(
        event_id=0,
        table=table.name,
        topic=table.topic,
        spec=PartitionSpec.from_mapping({"datestamp": f"p{uuid.uuid4().hex[:6]}"}),
        timestamp=int(time.time()),
    )
    engine = create_engine(settings.database_url)
    try:
        with engine.begin() as connection:
            event_id = allocate_event_ids(connection, 1)[0]
            headers, body = with_event_id(message.headers, message.body, event_id)
            connection.execute(
                insert(OutboxRow).values(
                    event_id=event_id,
                    topic=table.topic,
                    bucket=topic_bucket(table.topic, DEFAULT_BUCKETS),
                    event_type="MARK_SET_DONE",
                    table_name=str(table.name),
                    headers={**headers, "HCAT_SPEC": spec},
                    body=body,
                    created_at=datetime.now(UTC),
                    attempts=0,
                )
            )
    finally:
        engine.dispose()
    return int(event_id)


def _actions(settings: Settings) -> list[tuple[int, str, int | None]]:
    engine = create_engine(settings.database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                select(
                    OutboxActionRow.event_id, OutboxActionRow.action, OutboxActionRow.new_event_id
                ).order_by(OutboxActionRow.id)
            )
            return [(row[0], row[1], row[2]) for row in rows]
    finally:
        engine.dispose()


@pytest.fixture
def other(delivery_catalog: Catalog, clicks: TableInfo) -> TableInfo:
    return delivery_catalog.create_table(
        f"{clicks.name.db}.views", location="/data/views", partition_keys=["datestamp"]
    )


@pytest.mark.parametrize("transactions", [True, False], ids=["transactions", "one-by-one"])
def test_an_oversized_event_is_parked_and_the_rest_flow(
    delivery_settings: Settings,
    delivery_catalog: Catalog,
    clicks: TableInfo,
    other: TableInfo,
    transactions: bool,
):
    before = [delivery_catalog.mark_set_done(other.name, {"datestamp": str(n)}) for n in (1, 2)]
    poison = _poison(delivery_settings, clicks)
    after_same_topic = delivery_catalog.mark_set_done(clicks.name, {"datestamp": "3"})
    after = [delivery_catalog.mark_set_done(other.name, {"datestamp": str(n)}) for n in (4, 5)]
    flags = [] if transactions else ["--no-transactions"]
    views, own = Recorder(delivery_settings, other.topic), Recorder(delivery_settings, clicks.topic)
    try:
        result = run_cli(delivery_settings, "relay", "--once", *flags)
        assert result.returncode == EXIT_UNDELIVERABLE, result.stderr
        assert f"parked event {poison}: " in result.stdout
        assert "maximum header length" in result.stdout
        views.wait_for(4, timeout=20)
        own.wait_for(1, timeout=20)
    finally:
        views.close()
        own.close()
    assert views.event_ids() == before + after
    assert own.event_ids() == [after_same_topic]

    status = json.loads(run_cli(delivery_settings, "-o", "json", "status").stdout)
    assert status["backlog"] == 0
    (parked,) = status["parked"]
    assert parked["event_id"] == poison
    assert parked["table"] == str(clicks.name)
    assert parked["attempts"] == 3
    assert "maximum header length" in parked["reason"]
    assert parked["parked_at"]
    text = run_cli(delivery_settings, "status").stdout
    assert f"parked event {poison} (MARK_SET_DONE {clicks.name}" in text

    # Retried: announced again as a new event, which the broker refuses again.
    retried = run_cli(delivery_settings, "-o", "json", "outbox", "retry", str(poison))
    assert retried.returncode == 0, retried.stderr
    (renumbered,) = json.loads(retried.stdout)
    new_id = renumbered["new_event_id"]
    assert new_id > after[-1]
    assert run_cli(delivery_settings, "relay", "--once").returncode == EXIT_UNDELIVERABLE
    dropped = run_cli(delivery_settings, "outbox", "drop", str(new_id), "--reason", "too long")
    assert (dropped.returncode, dropped.stdout) == (0, f"event {new_id} dropped\n")
    assert json.loads(run_cli(delivery_settings, "-o", "json", "status").stdout)["parked"] == []
    assert _actions(delivery_settings) == [
        (poison, "parked", None),
        (poison, "retried", new_id),
        (new_id, "parked", None),
        (new_id, "dropped", None),
    ]
    # Each of them once only; nothing else changes.
    again = run_cli(delivery_settings, "outbox", "drop", str(new_id))
    assert again.returncode == 2
    assert again.stderr == f"hcat-notify: error: event {new_id} was already retried or dropped\n"
    again = run_cli(delivery_settings, "outbox", "retry", str(before[0]))
    assert again.returncode == 2
    assert again.stderr == f"hcat-notify: error: event {before[0]} is not parked: it is published\n"
    assert len(_actions(delivery_settings)) == 4


def test_a_running_relay_keeps_publishing_behind_a_poisoned_event(
    delivery_settings: Settings, delivery_catalog: Catalog, clicks: TableInfo, other: TableInfo
):
    views = Recorder(delivery_settings, other.topic)
    try:
        with running_relay(delivery_settings) as relay:
            first = delivery_catalog.mark_set_done(other.name, {"datestamp": "1"})
            views.wait_for(1, timeout=20)
            assert views.event_ids() == [first]
            poison = _poison(delivery_settings, clicks)
            later = [
                delivery_catalog.mark_set_done(other.name, {"datestamp": str(n)})
                for n in range(2, 12)
            ]
            views.wait_for_ids([first, *later], timeout=60)
            deadline = time.monotonic() + 30
            while poison not in relay.stats.parked and time.monotonic() < deadline:
                time.sleep(0.1)
            assert poison in relay.stats.parked
            last = delivery_catalog.mark_set_done(other.name, {"datestamp": "12"})
            views.wait_for_ids([first, *later, last], timeout=30)
    finally:
        views.close()
    # At least once on the wire; every event once after dedupe, in order.
    assert list(dict.fromkeys(views.event_ids())) == [first, *later, last]
    assert [event.event_id for event in delivery_catalog.outbox.refused()] == [poison]


def test_a_topic_the_broker_refuses_is_parked_not_stuck(
    delivery_settings: Settings, delivery_catalog: Catalog, clicks: TableInfo, other: TableInfo
):
    refused = delivery_catalog.create_table(
        f"{clicks.name.db}.outside", location="/data/outside", partition_keys=["ds"], topic="zz.x"
    )
    bad = delivery_catalog.mark_set_done(refused.name, {"ds": "1"})
    good = delivery_catalog.mark_set_done(other.name, {"datestamp": "1"})
    views = Recorder(delivery_settings, other.topic)
    try:
        result = run_cli(delivery_settings, "relay", "--once")
        views.wait_for(1, timeout=20)
    finally:
        views.close()
    assert result.returncode == EXIT_UNDELIVERABLE, result.stderr
    assert f"parked event {bad}: " in result.stdout
    assert "not authorized to write to: topic://zz.x" in result.stdout
    assert views.event_ids() == [good]
    (parked,) = json.loads(run_cli(delivery_settings, "-o", "json", "status").stdout)["parked"]
    assert (parked["event_id"], parked["topic"]) == (bad, "zz.x")


def test_the_door_refuses_a_spec_too_long_for_hive_and_the_broker(
    delivery_settings: Settings, delivery_catalog: Catalog, clicks: TableInfo
):
    result = run_cli(delivery_settings, "mark-done", str(clicks.name), "datestamp=" + "/" * 3500)
    assert result.returncode == 2
    assert result.stderr.startswith("hcat-notify: error: partition spec 'datestamp=%2F")
    assert "at most 767" in result.stderr
    assert result.stderr.count("\n") == 1
    assert changes(delivery_catalog) == []


def test_a_wrong_broker_password_stops_the_relay_with_one_clear_line(
    delivery_settings: Settings, delivery_catalog: Catalog, clicks: TableInfo
):
    delivery_catalog.mark_set_done(clicks.name, {"datestamp": "1"})
    wrong = dataclasses.replace(delivery_settings, broker_password="not-the-password")
    relay = CliProcess(wrong, "relay")
    code, err = relay.finish(timeout=60)
    address = delivery_settings.broker_url.split(",")[0]
    assert code == EXIT_CREDENTIALS
    lines = [line for line in err.splitlines() if "error:" in line]
    assert lines == [
        f"hcat-notify: error: broker {address} refused user 'hcat-publisher': "
        "User name [hcat-publisher] or password is invalid. "
        "(a wrong user or password is not retried; fix the settings)"
    ]
    assert "None" not in err
    assert delivery_catalog.outbox.backlog()[0] == 1
