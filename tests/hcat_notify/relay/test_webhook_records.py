"""A topic's next events go out while the record of its last 2xx is still being written,
up to a batch of events unrecorded in all (what a failover may send again)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any, cast

from hcat_notify.config import Settings
from hcat_notify.relay import Relay, RelayConfig
from hcat_notify.store import Catalog
from tests.fakes.broker import FakeBroker
from tests.fixtures.webhook_receiver import Receiver


class HeldRecords:
    """Stands for the relay's catalog; the webhook pass's records of 2xx wait until
    :attr:`release` is set."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog
        self.release = threading.Event()
        self.released_at = 0.0
        self.started = threading.Event()

    @property
    def webhooks(self) -> Any:
        return HeldWebhooks(self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._catalog, name)


class HeldWebhooks:
    def __init__(self, held: HeldRecords) -> None:
        self._held = held

    def record_delivered_many(self, *args: Any) -> list[str]:
        self._held.started.set()
        self._held.release.wait(30)
        return self._held._catalog.webhooks.record_delivered_many(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._held._catalog.webhooks, name)


def _wait(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.01)


def test_the_next_events_go_out_while_the_last_record_is_written(
    hook_settings: Settings, broker: FakeBroker, receiver: Receiver
):
    with Catalog.open(hook_settings) as catalog:
        _check(hook_settings, broker, catalog, receiver)


def _check(settings: Settings, broker: FakeBroker, catalog: Catalog, receiver: Receiver) -> None:
    held = HeldRecords(catalog)
    catalog.create_table("web.clicks", location="/w/clicks", partition_keys=["ds"])
    catalog.webhooks.add("rec", receiver.url, "web.*")

    def arrived() -> list[int]:  # one CloudEvent a request (the default format)
        return [int(json.loads(r.body)["id"]) for r in receiver.ok()]

    relay = Relay(
        settings,
        config=RelayConfig(webhook_batch=2),
        catalog=cast(Catalog, held),
        connection_factory=broker.connection,
        member_id="solo",
    )
    thread = threading.Thread(target=relay.run, daemon=True)
    thread.start()
    try:
        first = catalog.mark_set_done("web.clicks", {"ds": "1"})
        _wait(lambda: arrived() == [first] and held.started.is_set(), "the first 2xx's record")
        # its record is held: the second event goes out all the same
        second = catalog.mark_set_done("web.clicks", {"ds": "2"})
        _wait(lambda: arrived() == [first, second], "the second event while the first records")
        # two events unrecorded (a batch): the third waits for the record
        third = catalog.mark_set_done("web.clicks", {"ds": "3"})
        _wait(lambda: third in broker.delivered_ids(), "the third on the broker")
        held.released_at = time.monotonic()
        held.release.set()
        _wait(lambda: arrived() == [first, second, third], "the third after the record")
        _wait(
            lambda: [t.last_event_id for t in catalog.webhooks.topics("rec")] == [third],
            "the progress",
        )
    finally:
        held.release.set()
        relay.stop()
        thread.join(30)
        relay.close()
    assert not thread.is_alive()
    (last,) = [r for r in receiver.ok() if int(json.loads(r.body)["id"]) == third]
    assert last.at > held.released_at
