"""Consumers without the database: NotificationConsumer, ``wait`` and ``watch`` catch up
through the HTTP API (subscribe first, then catch up), with the same guarantees."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time

import pytest

from hcat_notify.api.client import ApiClient
from hcat_notify.config import Settings
from hcat_notify.consumer import NotificationConsumer, Source
from hcat_notify.errors import InvalidInputError, TableDroppedError, TableNotFoundError
from hcat_notify.model.events import EventType
from hcat_notify.store import Catalog, NewPartition
from tests.integration.api.support import ApiServer
from tests.integration.delivery import CLI, CliProcess, cli_env, running_relay

pytestmark = pytest.mark.integration


def _no_database(settings: Settings, api: ApiServer) -> Settings:
    """The settings of a consumer that has the API but no database credentials."""
    return dataclasses.replace(
        settings, db_url="postgresql+psycopg://nobody:x@127.0.0.1:1/none", api_url=api.url
    )


def test_consumer_catches_up_through_the_api_then_goes_live(
    api: ApiServer, api_settings: Settings, api_catalog: Catalog, new_table
):
    name = new_table()
    retained = api_catalog.mark_set_done(name, {"datestamp": "1"})
    settings = _no_database(api_settings, api)
    with running_relay(api_settings):
        with NotificationConsumer([name], settings=settings) as consumer:
            assert isinstance(consumer._catalog, ApiClient)
            first = next(consumer.notifications(timeout=10))
            assert (first.event_id, first.source) == (retained, Source.RETAINED)
            live = api_catalog.mark_set_done(name, {"datestamp": "2"})
            second = next(consumer.notifications(timeout=30))
            assert (second.event_id, second.source) == (live, Source.LIVE)
            assert consumer.is_set_done(name, {"datestamp": "2", "region": "us"})
            assert not consumer.is_set_done(name, {"datestamp": "3"})
            cursor = consumer.cursor
    # With a cursor: every event after it, partitions too, through the API.
    api_catalog.add_partitions(
        name, [NewPartition({"datestamp": "3", "region": "us"}, f"/d/{name}")]
    )
    third = api_catalog.mark_set_done(name, {"datestamp": "3"})
    with running_relay(api_settings):
        with NotificationConsumer([name], settings=settings, cursor=cursor) as consumer:
            got = [next(consumer.notifications(timeout=10)) for _ in range(2)]
    assert [(n.event_type, n.source) for n in got] == [
        (EventType.ADD_PARTITION, Source.REGISTRY),
        (EventType.MARK_SET_DONE, Source.RETAINED),
    ]
    assert got[-1].event_id == third


def test_consumer_api_url_argument_and_errors(api: ApiServer, api_settings: Settings, new_table):
    name = new_table()
    consumer = NotificationConsumer([name], settings=api_settings, api_url=[api.url])
    try:
        assert isinstance(consumer._catalog, ApiClient)
        assert consumer._catalog.urls == (api.url,)
    finally:
        consumer.close()
    with pytest.raises(TableNotFoundError, match=r"nosuch\.t is not registered"):
        NotificationConsumer(["nosuch.t"], settings=api_settings, api_url=api.url)
    with pytest.raises(InvalidInputError, match="durable subscriber"):
        NotificationConsumer([name], settings=api_settings, api_url=api.url, subscriber="s1")


def test_durable_subscriber_reads_the_database_whatever_the_settings_say(
    api: ApiServer, api_settings: Settings, new_table
):
    name = new_table()
    settings = dataclasses.replace(api_settings, api_url=api.url)
    consumer = NotificationConsumer([name], settings=settings, subscriber="durable-one")
    try:
        assert isinstance(consumer._catalog, Catalog)
    finally:
        consumer.close()


def test_wait_through_the_api(
    api: ApiServer, api_settings: Settings, api_catalog: Catalog, new_table
):
    name = new_table()
    settings = _no_database(api_settings, api)
    env = cli_env(settings)
    with running_relay(api_settings):
        waiting = subprocess.Popen(
            [CLI, "wait", name, "datestamp=20110228", "region=us", "--timeout", "60"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(3)  # subscribed and checked the catalog through the API
        api_catalog.mark_set_done(name, {"datestamp": "20110228"})
        out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert "done" in out
    done_now = subprocess.run(
        [CLI, "wait", name, "datestamp=20110228", "--timeout", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done_now.returncode == 0, done_now.stderr
    timeout = subprocess.run(
        [CLI, "wait", name, "datestamp=19990101", "--timeout", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert timeout.returncode == 1, timeout.stderr


def test_watch_through_the_api(
    api: ApiServer, api_settings: Settings, api_catalog: Catalog, new_table
):
    name = new_table()
    retained = api_catalog.mark_set_done(name, {"datestamp": "1"})
    settings = _no_database(api_settings, api)
    with running_relay(api_settings):
        watch = CliProcess(settings, "watch", name, "--json", "--max-messages", "2")
        first = json.loads(watch.next(timeout=30))
        live = api_catalog.mark_set_done(name, {"datestamp": "2"})
        second = json.loads(watch.next(timeout=30))
        code, err = watch.finish()
    assert code == 0, err
    assert (first["event_id"], first["source"]) == (retained, "retained")
    assert (second["event_id"], second["source"]) == (live, "live")


def test_wait_through_the_api_on_a_dropped_table_exits_2(
    api: ApiServer, api_settings: Settings, api_catalog: Catalog, new_table
):
    name = new_table()
    env = cli_env(_no_database(api_settings, api))
    with running_relay(api_settings):
        waiter = subprocess.Popen(
            [CLI, "-v", "wait", name, "datestamp=1", "--timeout", "120"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(3)  # subscribed and checked the catalog through the API
        drop = api_catalog.tables.drop(name).event_ids[-1]
        out, err = waiter.communicate(timeout=60)
    assert (waiter.returncode, out) == (2, "")
    # over the broker, or through the API if the drop came before the consumer's check
    assert err.splitlines()[-1].startswith(f"hcat-notify: error: table {name} was dropped")
    again = subprocess.run(
        [CLI, "wait", name, "datestamp=1", "--timeout", "120"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (again.returncode, again.stdout) == (2, "")
    assert again.stderr == f"hcat-notify: error: table {name} was dropped (event {drop})\n"
    with pytest.raises(TableDroppedError, match=f"was dropped \\(event {drop}\\)"):
        NotificationConsumer([name], settings=_no_database(api_settings, api))
