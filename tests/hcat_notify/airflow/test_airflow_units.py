"""hcat_notify.airflow without a broker: connections, serialized triggers, matching,
bad input. (Against a real broker and Airflow: tests/integration/airflow/.)"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from hcat_notify.airflow.stream import parse_event_types
from hcat_notify.airflow.waiting import Condition, Target, notification_payload
from hcat_notify.config import load_settings
from hcat_notify.consumer import Notification, Source
from hcat_notify.errors import ConfigError, InvalidInputError, TableDroppedError
from hcat_notify.model.events import EventType
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec

SECRET = "s3cret-reader-pw"


def notification(event: EventType, spec: str, table: str = "web.clicks") -> Notification:
    return Notification(
        event_id=7,
        event_type=event,
        table=TableName.parse(table),
        spec=PartitionSpec.parse(spec),
        body={},
        headers={},
        topic=f"hcat.{table}",
        source=Source.LIVE,
    )


def test_no_module_of_hcat_notify_imports_airflow():
    script = (
        "import sys, hcat_notify, hcat_notify.cli, hcat_notify.consumer, hcat_notify.airflow, "
        "hcat_notify.airflow.waiting, hcat_notify.airflow.stream; "
        "print('airflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_connection_type_is_registered_with_airflow():
    [entry] = [
        e
        for e in importlib.metadata.entry_points(group="apache_airflow_provider")
        if e.value.startswith("hcat_notify")
    ]
    info = entry.load()()
    [conn_type] = info["connection-types"]
    assert conn_type == {
        "connection-type": "hcat_notify",
        "hook-class-name": "hcat_notify.airflow.hooks.HcatNotifyHook",
    }


def test_a_connection_layers_over_the_settings(monkeypatch):
    from hcat_notify.airflow.hooks import settings_from_connection

    monkeypatch.setenv("HCAT_NOTIFY_TOPIC_PREFIX", "corp")
    settings = settings_from_connection(
        host="broker.example",
        port=61999,
        login="reader",
        password=SECRET,
        extra={"db_url": "sqlite:////tmp/catalog.db", "api_timeout": 3},
    )
    assert settings.broker_url == "stomp://broker.example:61999"
    assert (settings.consumer_user, settings.consumer_password) == ("reader", SECRET)
    assert settings.db_url == "sqlite:////tmp/catalog.db"
    assert settings.api_timeout == 3
    assert settings.topic_prefix == "corp"  # from the environment
    assert SECRET not in repr(settings)


def test_extra_broker_url_lists_a_pair_and_wins_over_host():
    from hcat_notify.airflow.hooks import settings_from_connection

    pair = "stomp://a.example:61613,stomp://b.example:61613"
    settings = settings_from_connection(
        host="ignored.example", port=None, login=None, password=None, extra={"broker_url": pair}
    )
    assert settings.broker_url == pair


def test_an_unknown_setting_in_extra_is_named():
    from hcat_notify.airflow.hooks import settings_from_connection

    with pytest.raises(ConfigError, match="brokr_url"):
        settings_from_connection(
            host=None, port=None, login=None, password=None, extra={"brokr_url": "x"}
        )


def test_a_missing_connection_other_than_the_default_is_an_error(monkeypatch):
    from hcat_notify.airflow.hooks import HcatNotifyHook

    monkeypatch.setenv("HCAT_NOTIFY_BROKER_URL", "stomp://127.0.0.1:61777")
    assert HcatNotifyHook(None).get_settings().broker_url == "stomp://127.0.0.1:61777"
    assert HcatNotifyHook().get_settings().broker_url == "stomp://127.0.0.1:61777"
    with pytest.raises(ConfigError, match="no Airflow connection 'nope'"):
        HcatNotifyHook("nope").get_settings()


def test_a_connection_from_the_environment(monkeypatch):
    from hcat_notify.airflow.hooks import HcatNotifyHook

    conn = {"conn_type": "hcat_notify", "host": "127.0.0.1", "port": 61888, "password": SECRET}
    monkeypatch.setenv("AIRFLOW_CONN_HCAT_UNIT", json.dumps(conn))
    settings = HcatNotifyHook("hcat_unit").get_settings()
    assert settings.broker_url == "stomp://127.0.0.1:61888"
    assert settings.consumer_password == SECRET


def test_serialized_triggers_hold_names_and_ids_never_credentials():
    from hcat_notify.airflow import HcatEventTrigger, HcatMarkSetDoneTrigger, HcatPartitionTrigger

    deadline = datetime(2011, 3, 1, tzinfo=UTC).timestamp()
    for kind in (HcatMarkSetDoneTrigger, HcatPartitionTrigger):
        classpath, kwargs = kind(
            table="web.clicks", spec={"datestamp": "20110228"}, deadline=deadline
        ).serialize()
        assert classpath == f"hcat_notify.airflow.triggers.{kind.__name__}"
        assert kwargs == {
            "table": "web.clicks",
            "spec": {"datestamp": "20110228"},
            "deadline": deadline,
            "conn_id": "hcat_notify_default",
            "subscriber": None,
        }
        assert kind(**kwargs).serialize() == (classpath, kwargs)
    classpath, kwargs = HcatEventTrigger(
        tables=["Web.Clicks"], subscriber="nightly", event_types=["add_partition"]
    ).serialize()
    assert kwargs == {
        "tables": ["web.clicks"],
        "subscriber": "nightly",
        "event_types": ["ADD_PARTITION"],
        "conn_id": "hcat_notify_default",
    }


def test_event_trigger_refuses_bad_input_at_once():
    from hcat_notify.airflow import HcatEventTrigger

    with pytest.raises(InvalidInputError, match="unknown event type"):
        HcatEventTrigger(tables=["web.clicks"], subscriber="s", event_types=["MARK_DONE"])
    with pytest.raises(InvalidInputError):
        HcatEventTrigger(tables=["not a table"], subscriber="s")
    with pytest.raises(InvalidInputError, match="at least one event type"):
        parse_event_types([])


def test_a_broader_done_covers_a_narrower_spec_not_the_reverse():
    wanted = Target(
        Condition.DONE, TableName.parse("web.clicks"), PartitionSpec.parse("datestamp=20110228")
    )
    assert wanted.match(notification(EventType.MARK_SET_DONE, "datestamp=20110228")) == (
        PartitionSpec.parse("datestamp=20110228")
    )
    assert None is wanted.match(
        notification(EventType.MARK_SET_DONE, "datestamp=20110228/region=us")
    )
    assert None is wanted.match(notification(EventType.MARK_SET_DONE, "datestamp=20110301"))
    assert None is wanted.match(notification(EventType.ADD_PARTITION, "datestamp=20110228"))
    assert None is wanted.match(
        notification(EventType.MARK_SET_DONE, "datestamp=20110228", table="web.views")
    )


def test_a_partition_under_the_spec_satisfies_a_partition_wait():
    wanted = Target(
        Condition.PARTITION,
        TableName.parse("web.clicks"),
        PartitionSpec.parse("datestamp=20110228"),
    )
    assert wanted.match(notification(EventType.ADD_PARTITION, "datestamp=20110228/region=us"))
    assert None is wanted.match(
        notification(EventType.ADD_PARTITION, "datestamp=20110301/region=us")
    )
    assert None is wanted.match(notification(EventType.MARK_SET_DONE, "datestamp=20110228"))


def test_many_long_waits_run_at_once_none_queued_behind_the_others():
    # A triggerer holds many deferred sensors; the loop's default executor has only
    # CPUs + 4 threads, so waits must not queue there.
    import asyncio
    import threading

    from hcat_notify.airflow.triggers import in_thread

    waits = 40
    started = threading.Semaphore(0)
    release = threading.Event()

    def wait(index: int) -> int:
        started.release()
        release.wait(60)
        return index

    async def scenario() -> list[int]:
        tasks = [
            asyncio.ensure_future(in_thread(functools.partial(wait, i), f"w{i}"))
            for i in range(waits)
        ]
        running = 0
        while running < waits:
            assert await asyncio.to_thread(started.acquire, True, 30), f"only {running} started"
            running += 1
        release.set()
        return await asyncio.gather(*tasks)

    assert asyncio.run(scenario()) == list(range(waits))


def test_an_error_in_the_thread_reaches_the_awaiting_trigger():
    import asyncio

    from hcat_notify.airflow.triggers import in_thread

    def fail() -> None:
        raise InvalidInputError("bad spec")

    with pytest.raises(InvalidInputError, match="bad spec"):
        asyncio.run(in_thread(fail, "failing"))


def test_a_batch_satisfies_a_partition_wait_by_its_partition_under_the_spec():
    wanted = Target(
        Condition.PARTITION,
        TableName.parse("web.clicks"),
        PartitionSpec.parse("datestamp=20110228"),
    )
    batch = notification(EventType.ADD_PARTITION, "datestamp=20110227").replace(
        spec=None,
        partitions=(
            PartitionSpec.parse("datestamp=20110227/region=us"),
            PartitionSpec.parse("datestamp=20110228/region=eu"),
        ),
    )
    assert wanted.match(batch) == PartitionSpec.parse("datestamp=20110228/region=eu")
    payload = notification_payload(batch, wanted.match(batch))
    assert payload["spec"] == "datestamp=20110228/region=eu"
    assert payload["partitions"] == [
        "datestamp=20110227/region=us",
        "datestamp=20110228/region=eu",
    ]


def test_the_tables_drop_ends_a_wait_with_an_error():
    wanted = Target(
        Condition.DONE, TableName.parse("web.clicks"), PartitionSpec.parse("datestamp=20110228")
    )
    dropped = notification(EventType.DROP_TABLE, "datestamp=20110228").replace(spec=None)
    with pytest.raises(TableDroppedError, match=r"web\.clicks was dropped"):
        wanted.match(dropped)


def _verdict(event: EventType, generation: int, **body) -> Notification:
    headers = {"HCAT_SET_GENERATION": str(generation)}
    if "reason" in body:
        headers["HCAT_DONE_REASON"] = body["reason"]
    return Notification(
        event_id=9,
        event_type=event,
        table=TableName.parse("web.clicks"),
        spec=PartitionSpec.parse("datestamp=20261126"),
        body={"generation": generation, **body},
        headers=headers,
        topic="hcat.web.clicks",
        source=Source.LIVE,
    )


def test_a_wait_for_a_done_ends_only_at_a_done_of_its_generation():
    """A SET_LATE or SET_REOPENED never ends a wait; ``min_generation`` passes over
    older dones (docs/completeness.md)."""
    spec = PartitionSpec.parse("datestamp=20261126/region=us")
    table = TableName.parse("web.clicks")
    late = _verdict(EventType.SET_LATE, 1, missing=["datestamp=20261126/region=eu"], missingCount=1)
    reopened = _verdict(EventType.SET_REOPENED, 2, missing=[], missingCount=0)
    first = _verdict(EventType.MARK_SET_DONE, 1, reason="rule")
    second = _verdict(EventType.MARK_SET_DONE, 2, reason="changed")
    any_done = Target(Condition.DONE, table, spec)
    from_second = Target(Condition.DONE, table, spec, min_generation=2)
    assert [any_done.match(n) for n in (late, reopened, first)] == [None, None, first.spec]
    assert [from_second.match(n) for n in (late, first, second)] == [None, None, second.spec]
    assert (late.generation, late.reason, late.missing) == (
        1,
        None,
        ("datestamp=20261126/region=eu",),
    )
    assert (second.generation, second.reason) == (2, "changed")
    assert second.describe() == "datestamp=20261126 generation 2 (changed)"
    assert late.describe() == "datestamp=20261126 generation 1, 1 missing"
    assert notification_payload(late)["missing"] == ["datestamp=20261126/region=eu"]
    assert notification_payload(second)["generation"] == 2
    assert notification_payload(second)["reason"] == "changed"
    # An asset watcher filters on the new kinds as on any other.
    assert parse_event_types(["set_late", "SET_REOPENED"]) == {
        EventType.SET_LATE,
        EventType.SET_REOPENED,
    }


def test_a_done_trigger_keeps_its_minimum_generation():
    from hcat_notify.airflow import HcatMarkSetDoneTrigger

    trigger = HcatMarkSetDoneTrigger(
        table="web.clicks", spec={"datestamp": "1"}, deadline=1.0, min_generation=2
    )
    classpath, kwargs = trigger.serialize()
    assert kwargs["min_generation"] == 2
    assert HcatMarkSetDoneTrigger(**kwargs).serialize() == (classpath, kwargs)


def test_a_timed_out_done_sensor_logs_what_the_rule_still_misses(monkeypatch, tmp_path):
    from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout

    from hcat_notify.airflow import HcatMarkSetDoneSensor
    from hcat_notify.store import Catalog, NewPartition

    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    monkeypatch.setenv("HCAT_NOTIFY_DB_URL", url)
    monkeypatch.setenv("HCAT_NOTIFY_HOME", str(tmp_path / "home"))
    with Catalog.open(load_settings()) as catalog:
        for name in ("web.clicks", "web.plain"):
            catalog.create_table(
                name,
                location=f"/data/{name}",
                partition_keys=["datestamp", "region"],
                table_type="EXTERNAL_TABLE",
            )
        catalog.expect("web.clicks", set_keys="datestamp", parts=["region=us,eu,apac"])
        values = {"datestamp": "20261126", "region": "us"}
        catalog.add_partitions("web.clicks", [NewPartition(values, "/data/x", 1, 1)])
    # Airflow's task logger is structlog's, and Airflow's logging setup may disable
    # loggers made before it: the test reads the sensor's lines from a recorder of its own.
    lines: list[str] = []

    class Recorder:
        def info(self, message: str, *args: object) -> None:
            lines.append(message % args)

        warning = info

    monkeypatch.setattr(HcatMarkSetDoneSensor, "log", Recorder())
    logged = []
    for table in ("web.clicks", "web.plain"):
        sensor = HcatMarkSetDoneSensor(
            task_id=f"wait_{table.replace('.', '_')}",
            table=table,
            spec={"datestamp": "20261126", "region": "eu"},
            conn_id=None,
            timeout=5,
            min_generation=1,
        )
        lines.clear()
        with pytest.raises(AirflowSensorTimeout) as caught:
            sensor.execute_complete({}, {"status": "timeout"})
        assert "at generation >= 1" in str(caught.value)
        logged.append([line for line in lines if "not done" in line])
    assert logged == [
        [
            "not done: web.clicks datestamp=20261126: open, generation 1, 1 of 3 parts present; "
            "missing 2: datestamp=20261126/region=eu, datestamp=20261126/region=apac"
        ],
        [],  # no rule: nothing to say
    ]
    with pytest.raises(AirflowFailException, match="min_generation"):
        HcatMarkSetDoneSensor(task_id="bad", table="web.clicks", spec={}, min_generation=0)
