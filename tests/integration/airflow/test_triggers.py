"""The triggers as Airflow's triggerer runs them: rebuilt from ``serialize()``, their
``run()`` driven by an asyncio loop and cancelled on shutdown; with a real broker, a
SQLite catalog, an ``hcat-notify relay`` process and an Airflow connection (from the
environment, as Airflow's secrets backend reads it)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from typing import Any

import pytest

from hcat_notify.config import Settings
from hcat_notify.store import Catalog, NewPartition, TableInfo
from hcat_notify.writer import send_mark_set_done

pytestmark = [pytest.mark.integration, pytest.mark.airflow]

CONN_ID = "hcat_test"


class LogWaiter(logging.Handler):
    """Sets an event when a log record's message contains ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.INFO)
        self.text = text
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.seen.set()


@pytest.fixture
def logged():
    """``logged(text)``: an event set once hcat_notify logs a message containing text."""
    root = logging.getLogger("hcat_notify")
    handlers: list[LogWaiter] = []
    level = root.level
    root.setLevel(logging.INFO)

    def make(text: str) -> threading.Event:
        handler = LogWaiter(text)
        handlers.append(handler)
        root.addHandler(handler)
        return handler.seen

    yield make
    for handler in handlers:
        root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture
def airflow_connection(monkeypatch, hcat_settings: Settings, broker) -> str:
    """An ``hcat_notify`` Airflow connection in the environment; no HCAT_NOTIFY_* set."""
    conn = {
        "conn_type": "hcat_notify",
        "host": broker.host,
        "port": broker.stomp_port,
        "login": hcat_settings.consumer_user,
        "password": hcat_settings.consumer_password,
        "extra": {"db_url": hcat_settings.database_url, "broker_timeout": 5},
    }
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(conn))
    return CONN_ID


def rebuilt(trigger: Any) -> Any:
    """What the triggerer runs: the trigger's class built again from its serialized form."""
    from airflow.sdk.module_loading import (  # type: ignore[attr-defined]  # not in its __all__
        import_string,
    )

    classpath, kwargs = trigger.serialize()
    return import_string(classpath)(**json.loads(json.dumps(kwargs)))


def mark_done(settings: Settings, table: TableInfo, datestamp: str) -> int:
    return send_mark_set_done(str(table.name), {"datestamp": datestamp}, settings=settings)


class Runner:
    """Drives a trigger's ``run()`` in an asyncio loop of its own thread, as the
    triggerer does; ``stop()`` cancels it as the triggerer does on shutdown."""

    def __init__(self, trigger: Any) -> None:
        self.trigger = trigger
        self.payloads: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self._arrived = threading.Condition()
        self._loop = asyncio.new_event_loop()
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._task = self._loop.create_task(self._collect())
        try:
            self._loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # noqa: BLE001 - surfaced by stop()
            self.error = exc
        finally:
            self._loop.close()

    async def _collect(self) -> None:
        async for event in self.trigger.run():
            with self._arrived:
                self.payloads.append(event.payload)
                self._arrived.notify_all()

    def wait_for(self, count: int, timeout: float = 60) -> list[dict[str, Any]]:
        with self._arrived:
            self._arrived.wait_for(lambda: len(self.payloads) >= count, timeout=timeout)
            return list(self.payloads)

    def stop(self) -> None:
        while self._task is None:
            time.sleep(0.01)
        with contextlib.suppress(RuntimeError):  # a one-shot trigger's loop may be closed
            self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(60)
        assert not self._thread.is_alive()
        assert self.error is None, self.error


def test_event_trigger_fires_per_done_in_order_and_resumes_without_repeats(
    hcat_settings: Settings, clicks_table: TableInfo, relay, airflow_connection: str, logged
):
    from hcat_notify.airflow import HcatEventTrigger

    trigger = HcatEventTrigger(
        tables=[str(clicks_table.name)], subscriber="airflow-watch", conn_id=airflow_connection
    )
    kwargs = json.dumps(trigger.serialize()[1])
    assert hcat_settings.consumer_password not in kwargs

    subscribed = logged("hcat event stream subscriber=airflow-watch")
    first = Runner(rebuilt(trigger))
    assert subscribed.wait(60), "the trigger did not subscribe"
    ids = [mark_done(hcat_settings, clicks_table, day) for day in ("20110301", "20110302")]
    with Catalog.open(hcat_settings) as catalog:  # ADD_PARTITION: not handed out
        catalog.add_partitions(
            clicks_table.name,
            [NewPartition({"datestamp": "20110303", "region": "us"}, "/data/clicks/d3/us")],
        )
    ids.append(mark_done(hcat_settings, clicks_table, "20110303"))

    payloads = first.wait_for(3)
    first.stop()
    assert [p["event_id"] for p in payloads] == ids
    assert [p["spec"] for p in payloads] == [
        "datestamp=20110301",
        "datestamp=20110302",
        "datestamp=20110303",
    ]
    for payload in payloads:
        assert payload["table"] == str(clicks_table.name)
        assert payload["event"] == "MARK_SET_DONE"
        assert payload["table_location"] == clicks_table.location
        assert payload["source"] == "live"

    # While no trigger runs, two more days are marked done.
    later = [mark_done(hcat_settings, clicks_table, day) for day in ("20110304", "20110305")]
    subscribed.clear()
    second = Runner(rebuilt(trigger))
    assert subscribed.wait(60)
    later.append(mark_done(hcat_settings, clicks_table, "20110306"))
    resumed = second.wait_for(3)
    second.stop()
    # Nothing of the first run again; the missed ones first, in order, then live.
    assert [p["event_id"] for p in resumed] == later
    assert [p["source"] for p in resumed] == ["retained", "retained", "live"]


def test_partition_trigger_fires_on_a_partition_under_its_spec(
    hcat_settings: Settings, clicks_table: TableInfo, relay, airflow_connection: str, logged
):
    from hcat_notify.airflow import HcatPartitionTrigger

    trigger = HcatPartitionTrigger(
        table=str(clicks_table.name),
        spec={"datestamp": "20110228"},
        deadline=time.time() + 120,
        conn_id=airflow_connection,
    )
    subscribed = logged("hcat wait subscribed")
    runner = Runner(rebuilt(trigger))
    assert subscribed.wait(60)
    with Catalog.open(hcat_settings) as catalog:
        catalog.add_partitions(  # another day first: not under the spec
            clicks_table.name,
            [NewPartition({"datestamp": "20110301", "region": "us"}, "/data/clicks/0301/us")],
        )
        [added] = catalog.add_partitions(
            clicks_table.name,
            [NewPartition({"datestamp": "20110228", "region": "eu"}, "/data/clicks/0228/eu")],
        )

    [payload] = runner.wait_for(1)
    runner.stop()
    assert payload["status"] == "done"
    assert payload["event"] == "ADD_PARTITION"
    assert payload["event_id"] == added.event_id
    assert payload["spec"] == "datestamp=20110228/region=eu"
    assert payload["location"] == "/data/clicks/0228/eu"


def test_deferred_wait_rides_out_a_broker_outage(
    restartable_broker, hcat_settings: Settings, clicks_table: TableInfo, relay, logged, monkeypatch
):
    from hcat_notify.airflow import HcatMarkSetDoneTrigger
    from tests.integration.delivery import cli_env

    for name, value in cli_env(hcat_settings).items():  # no connection: the settings
        if name.startswith("HCAT_NOTIFY_"):
            monkeypatch.setenv(name, value)
    trigger = HcatMarkSetDoneTrigger(
        table=str(clicks_table.name),
        spec={"datestamp": "20110228", "region": "us"},
        deadline=time.time() + 300,
        conn_id=None,
    )
    subscribed = logged("hcat wait subscribed")
    runner = Runner(rebuilt(trigger))
    assert subscribed.wait(60)

    restartable_broker.stop()
    # Recorded while the broker is down; the relay publishes it once the broker is back.
    event_id = mark_done(hcat_settings, clicks_table, "20110228")
    restartable_broker.start()

    [payload] = runner.wait_for(1, timeout=120)
    runner.stop()
    assert payload["status"] == "done"
    assert payload["event_id"] == event_id
    assert payload["wanted"] == "datestamp=20110228/region=us"


def test_waits_read_through_the_http_api_when_it_is_configured(
    hcat_settings: Settings, clicks_table: TableInfo, relay, broker, monkeypatch, logged, tmp_path
):
    from hcat_notify.airflow import HcatMarkSetDoneSensor, HcatMarkSetDoneTrigger
    from tests.integration.api.support import ApiServer

    with ApiServer(hcat_settings, log=tmp_path / "serve.log") as api:
        # The connection names the API and a catalog that does not exist: every read must
        # go through the API.
        conn = {
            "conn_type": "hcat_notify",
            "host": broker.host,
            "port": broker.stomp_port,
            "login": hcat_settings.consumer_user,
            "password": hcat_settings.consumer_password,
            "extra": {"api_url": api.url, "db_url": f"sqlite:///{tmp_path / 'none' / 'c.db'}"},
        }
        monkeypatch.setenv("AIRFLOW_CONN_HCAT_API", json.dumps(conn))
        before = mark_done(hcat_settings, clicks_table, "20110228")
        sensor = HcatMarkSetDoneSensor(
            task_id="clicks_done",
            table=str(clicks_table.name),
            spec={"datestamp": "20110228", "region": "us"},
            conn_id="hcat_api",
        )
        assert sensor.execute({})["event_id"] == before  # checked once: no deferral

        trigger = HcatMarkSetDoneTrigger(
            table=str(clicks_table.name),
            spec={"datestamp": "20110301"},
            deadline=time.time() + 120,
            conn_id="hcat_api",
        )
        subscribed = logged("hcat wait subscribed")
        runner = Runner(rebuilt(trigger))
        assert subscribed.wait(60)
        later = mark_done(hcat_settings, clicks_table, "20110301")
        [payload] = runner.wait_for(1)
        runner.stop()
    assert payload["status"] == "done"
    assert payload["event_id"] == later
    assert not (tmp_path / "none").exists()
