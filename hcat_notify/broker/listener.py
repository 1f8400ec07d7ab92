"""The stomp.py listener of a :class:`~hcat_notify.broker.connection.BrokerConnection`:
it turns frames into calls of the connection's callbacks and never raises (an exception
in a listener kills stomp.py's receiver thread)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import stomp

from hcat_notify.config import BrokerAddress

__all__ = ["FrameCallbacks", "Listener", "ReceivedMessage"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReceivedMessage:
    """A MESSAGE frame as delivered to a subscription."""

    destination: str
    headers: Mapping[str, str]
    body: str
    subscription: str | None = None
    ack_id: str | None = None


@dataclass(frozen=True)
class FrameCallbacks:
    """What a connection does with the frames of its current stomp.py connection."""

    connected: Callable[[], None]
    error: Callable[[Mapping[str, str], str], None]  # headers, body
    receipt: Callable[[str], None]  # the receipt id
    message: Callable[[ReceivedMessage], None]
    disconnected: Callable[[], None]
    heartbeat: Callable[[], None]
    heartbeat_timeout: Callable[[BrokerAddress], None]


class Listener(stomp.ConnectionListener):  # type: ignore[misc]
    """Turns frames into callbacks; never raises (it would kill stomp.py).

    Each stomp.py connection gets its own listener, told by ``current`` whether its
    connection is still the one in use, so that late callbacks of a connection already
    replaced (a disconnect, an ERROR) cannot touch the state of the next one.
    """

    def __init__(
        self, callbacks: FrameCallbacks, current: Callable[[], bool], address: BrokerAddress
    ) -> None:
        self._callbacks = callbacks
        self._current = current
        self._address = address

    def on_connected(self, frame: Any) -> None:
        if self._current():
            self._callbacks.connected()

    def on_error(self, frame: Any) -> None:
        if not self._current():
            return
        try:
            self._callbacks.error(dict(frame.headers), frame.body or "")
        except Exception:  # pragma: no cover - defensive: must not kill the receiver
            logger.exception("error handling an ERROR frame")

    def on_receipt(self, frame: Any) -> None:
        if self._current():
            self._callbacks.receipt(frame.headers.get("receipt-id", ""))

    def on_message(self, frame: Any) -> None:
        if not self._current():
            return
        try:
            headers = dict(frame.headers)
            self._callbacks.message(
                ReceivedMessage(
                    destination=headers.get("destination", ""),
                    headers=headers,
                    body=frame.body if isinstance(frame.body, str) else frame.body.decode(),
                    subscription=headers.get("subscription"),
                    ack_id=headers.get("ack") or headers.get("message-id"),
                )
            )
        except Exception:  # pragma: no cover - defensive
            logger.exception("error handling a MESSAGE frame")

    def on_disconnected(self) -> None:
        if self._current():
            self._callbacks.disconnected()

    def on_heartbeat(self) -> None:
        if self._current():
            self._callbacks.heartbeat()

    def on_heartbeat_timeout(self) -> None:
        # stomp.py calls this after on_disconnected, by which time the caller may have
        # connected again: count it whatever the generation (it touches no state).
        self._callbacks.heartbeat_timeout(self._address)
