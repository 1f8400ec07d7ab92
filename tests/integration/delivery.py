"""Helpers for delivery tests: a relay in a thread, a raw subscriber that records."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hcat_notify.broker import BrokerConnection, ReceivedMessage, consumer_connection
from hcat_notify.config import Settings
from hcat_notify.model.topics import destination_for
from hcat_notify.relay import Relay, RelayConfig


@contextmanager
def running_relay(settings: Settings, **config: Any) -> Iterator[Relay]:
    """A relay publishing in a background thread until the block ends."""
    config.setdefault("backoff_initial", 0.1)
    config.setdefault("backoff_max", 1.0)
    config.setdefault("lease_ttl", 5.0)
    relay = Relay(settings, config=RelayConfig(**config))
    errors: list[Exception] = []

    def target() -> None:
        try:
            relay.run()
        except Exception as exc:  # noqa: BLE001 - surfaced when the block ends
            errors.append(exc)

    thread = threading.Thread(target=target, name="test-relay", daemon=True)
    thread.start()
    try:
        yield relay
    finally:
        relay.stop()
        thread.join(30)
        relay.close()
        assert not thread.is_alive(), "relay did not stop within 30 s"
        assert errors == [], f"relay thread failed: {errors!r}"


class Recorder:
    """A raw consumer-principal subscription that keeps every message it gets."""

    def __init__(self, settings: Settings, topic: str, selector: str | None = None) -> None:
        self.connection: BrokerConnection = consumer_connection(settings)
        self.connection.connect()
        self.connection.subscribe(destination_for(topic), "recorder", selector=selector)
        self.messages: list[ReceivedMessage] = []

    def wait_for(self, count: int, timeout: float = 60.0) -> list[ReceivedMessage]:
        deadline = time.monotonic() + timeout
        while len(self.messages) < count and time.monotonic() < deadline:
            message = self.connection.receive(timeout=0.2)
            if message is not None:
                self.messages.append(message)
        return list(self.messages)

    def drain(self, quiet: float = 0.5) -> list[ReceivedMessage]:
        """Keep receiving until nothing arrives for ``quiet`` seconds."""
        while (message := self.connection.receive(timeout=quiet)) is not None:
            self.messages.append(message)
        return list(self.messages)

    def event_ids(self) -> list[int]:
        return [int(m.headers["HCAT_EVENT_ID"]) for m in self.messages]

    def close(self) -> None:
        self.connection.close()
