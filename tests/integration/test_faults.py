"""Delivery across broker outages, relay crashes and restarts (real broker, both DBs)."""

from __future__ import annotations

import dataclasses
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from hcat_notify.config import Settings
from hcat_notify.consumer import NotificationConsumer, Source
from hcat_notify.store import Catalog, NewPartition, TableInfo
from hcat_notify.writer import send_mark_set_done
from tests.integration.delivery import CLI, Recorder, changes, cli_env, running_relay
from tests.integration.failover import silent_listener

pytestmark = pytest.mark.integration


def _relay_process(settings: Settings, *args: str) -> subprocess.Popen[str]:
    # Its log goes to a file: a pipe nobody reads until the end would fill and stall it.
    log = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed with the process
    process = subprocess.Popen(
        [CLI, "relay", *args], env=cli_env(settings), stdout=log, stderr=log, text=True
    )
    process.log = log  # type: ignore[attr-defined]
    return process


def _finish(process: subprocess.Popen[str], timeout: float = 60) -> str:
    """Wait for the process; its log."""
    process.wait(timeout)
    log = process.log  # type: ignore[attr-defined]
    log.seek(0)
    return str(log.read())


def _published(catalog: Catalog) -> int:
    return len(changes(catalog)) - catalog.outbox.backlog()[0]


def _collect(consumer: NotificationConsumer, count: int, timeout: float = 60.0) -> list[int]:
    """The event ids of the next ``count`` notifications, or of those that came within
    ``timeout``. A quiet spell does not end the wait: a relay restarted on a loaded
    machine may take longer than any fixed gap to start publishing (seen at load 11: the
    restarted relay's first message came after a 5 s idle wait had given up)."""
    got: list[int] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and (left := deadline - time.monotonic()) > 0:
        for notification in consumer.notifications(timeout=min(left, 5.0)):
            got.append(notification.event_id)
            if len(got) >= count or time.monotonic() > deadline:
                break
    return got


def test_calls_succeed_while_the_broker_is_down_and_all_arrive_after(
    restartable_broker, delivery_settings: Settings, delivery_catalog: Catalog, clicks: TableInfo
):
    restartable_broker.stop()
    ids = [
        send_mark_set_done(clicks.name, {"datestamp": f"{n:04d}"}, settings=delivery_settings)
        for n in range(500)
    ]
    assert ids == sorted(ids)
    assert delivery_catalog.outbox.backlog()[0] == 500
    restartable_broker.start()

    recorder = Recorder(delivery_settings, clicks.topic)
    try:
        with NotificationConsumer([clicks.name], settings=delivery_settings, cursor=0) as consumer:
            with running_relay(delivery_settings, batch_size=64):
                wire = recorder.wait_for(500, timeout=60)
                seen = _collect(consumer, 500)
                assert list(consumer.notifications(timeout=1)) == []
    finally:
        recorder.close()
    assert [int(m.headers["HCAT_EVENT_ID"]) for m in wire] == ids  # all, in event-id order
    assert seen == ids  # the consumer sees each once
    assert delivery_catalog.outbox.backlog()[0] == 0


def test_relay_and_consumer_ride_out_a_broker_restart(
    restartable_broker, delivery_settings: Settings, clicks: TableInfo
):
    with NotificationConsumer([clicks.name], settings=delivery_settings, cursor=0) as consumer:
        with running_relay(delivery_settings, batch_size=16) as relay:
            first = [
                send_mark_set_done(clicks.name, {"datestamp": f"a{n}"}, settings=delivery_settings)
                for n in range(50)
            ]
            seen = _collect(consumer, 50)
            assert seen == first
            restartable_broker.stop()
            second = [
                send_mark_set_done(clicks.name, {"datestamp": f"b{n}"}, settings=delivery_settings)
                for n in range(50)
            ]
            restartable_broker.start()
            seen += _collect(consumer, 50, timeout=90)
            assert list(consumer.notifications(timeout=1.5)) == []
            assert relay.stats.connects >= 2  # it reconnected
    assert seen == first + second  # once each, in order, across the outage


def test_relay_killed_mid_batch_loses_nothing(
    delivery_settings: Settings, delivery_catalog: Catalog, clicks
):
    total = 4000
    with NotificationConsumer([clicks.name], settings=delivery_settings, cursor=0) as consumer:
        for start in range(0, total, 500):
            delivery_catalog.add_partitions(
                clicks.name,
                [
                    NewPartition({"datestamp": "d", "region": f"r{n:05d}"}, f"/p/{n}")
                    for n in range(start, start + 500)
                ],
            )
        ids = [e.event_id for e in changes(delivery_catalog)]
        relay = _relay_process(delivery_settings, "--batch-size", "10", "--session-timeout", "2")
        try:
            deadline = time.monotonic() + 60
            while _published(delivery_catalog) == 0 and time.monotonic() < deadline:
                time.sleep(0.005)
            relay.send_signal(signal.SIGKILL)
            relay.wait(30)
        finally:
            if relay.poll() is None:
                relay.kill()
            _finish(relay)
        published_at_kill = _published(delivery_catalog)
        assert 0 < published_at_kill < total, "the relay must die mid-stream"
        restarted = _relay_process(
            delivery_settings, "--batch-size", "500", "--session-timeout", "2"
        )
        try:
            seen = _collect(consumer, total, timeout=120)
            assert list(consumer.notifications(timeout=1.5)) == []
        finally:
            restarted.send_signal(signal.SIGTERM)
            err = _finish(restarted)
        assert restarted.returncode == 0, err
    assert seen == ids, err  # nothing lost, order kept, the resent batch dropped as duplicates
    assert delivery_catalog.outbox.backlog()[0] == 0


def test_sigterm_stops_the_relay_cleanly(
    delivery_settings: Settings, delivery_catalog: Catalog, clicks
):
    recorder = Recorder(delivery_settings, clicks.topic)
    relay = _relay_process(delivery_settings, "--batch-size", "5")
    try:
        for n in range(300):
            delivery_catalog.mark_set_done(clicks.name, {"datestamp": str(n)})
        deadline = time.monotonic() + 60
        while _published(delivery_catalog) < 50 and time.monotonic() < deadline:
            time.sleep(0.01)
        relay.send_signal(signal.SIGTERM)
        err = _finish(relay)
        assert relay.returncode == 0, err
        assert "relay stopped" in err
        wire = {int(m.headers["HCAT_EVENT_ID"]) for m in recorder.drain(quiet=1.0)}
    finally:
        if relay.poll() is None:
            relay.kill()
        recorder.close()
    progress = delivery_catalog.group.progress()[clicks.topic]
    published = {e.event_id for e in changes(delivery_catalog) if e.event_id <= progress}
    assert published  # it did publish before stopping
    assert published <= wire  # no progress recorded past what the broker took


def test_consumer_started_after_the_done_gets_it_exactly_once(
    delivery_settings: Settings, clicks: TableInfo
):
    event_id = send_mark_set_done(
        clicks.name, {"datestamp": "20110228"}, settings=delivery_settings
    )
    with running_relay(delivery_settings):
        time.sleep(0.5)  # the relay has published it before the consumer exists
        with NotificationConsumer([clicks.name], settings=delivery_settings) as consumer:
            got = list(consumer.notifications(timeout=2))
    assert [(n.event_id, n.source) for n in got] == [(event_id, Source.RETAINED)]


def test_unreachable_first_broker_addresses_are_skipped(
    delivery_settings: Settings, clicks: TableInfo
):
    """As documented: an address that refuses connections is skipped at once, one that
    accepts TCP but never answers costs the broker timeout; the relay and the consumer
    both end up on the live broker and deliver everything."""
    with socket.socket() as closed, silent_listener() as silent:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        settings = dataclasses.replace(
            delivery_settings,
            broker_url=(
                f"stomp://127.0.0.1:{closed.getsockname()[1]},"
                f"stomp://127.0.0.1:{silent.getsockname()[1]},{delivery_settings.broker_url}"
            ),
            broker_timeout=1.5,
        )
        with NotificationConsumer([clicks.name], settings=settings, cursor=0) as consumer:
            with running_relay(settings) as relay:
                ids = [
                    send_mark_set_done(clicks.name, {"datestamp": f"u{n}"}, settings=settings)
                    for n in range(20)
                ]
                seen = _collect(consumer, 20)
                assert relay.stats.failures == 0  # skipping is not a failure
    assert seen == ids
