"""A scripted ActiveMQ for unit tests, behind :class:`BrokerConnection`'s transport.

:class:`FakeBroker` stands where stomp.py's ``Connection12`` does (as httpx's
``MockTransport`` stands behind a client): the real :class:`BrokerConnection` writes its
frames to it and gets the broker's answers through its own listener, from the fake's
thread, in the order the frames came. What it does by default is what ActiveMQ does: a
SEND with a receipt or a COMMIT is stored and answered with a RECEIPT; the SENDs of a
transaction are delivered at its COMMIT, dropped at its ABORT or with the connection.
A script changes that per frame (:meth:`FakeBroker.on`): an ERROR, a dropped connection,
a delay, silence, or a call into the test.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from stomp.exception import ConnectFailedException, NotConnectedException
from stomp.utils import Frame

from hcat_notify.broker.connection import BrokerConnection
from hcat_notify.config import Settings

__all__ = ["Delivered", "FakeBroker", "Rule", "Transaction"]

NOT_AUTHORIZED = "User publisher is not authorized to write to: topic://{}"
ROLLED_BACK = "COMMIT FAILED: Transaction marked rollback only"
BAD_LOGIN = "User name [{}] or password is invalid."


@dataclass(frozen=True)
class Delivered:
    """A message the broker stored (and would deliver to subscribers)."""

    destination: str
    headers: Mapping[str, str]
    body: str

    @property
    def event_id(self) -> int:
        return int(self.headers["HCAT_EVENT_ID"])


@dataclass
class Rule:
    """What the broker does with the frames a script matches (see :meth:`FakeBroker.on`)."""

    command: str
    nth: int | None = None  # only the nth such frame (1-based), else every one
    destination: str | None = None  # only SENDs to this destination
    error: str | None = None  # answer with an ERROR of this message, not the usual
    drop: bool = False  # drop the connection before handling the frame
    delay: float = 0.0  # seconds before handling it (later frames wait too)
    silent: bool = False  # handle it, send no answer (a receipt never comes)
    call: Callable[[Mapping[str, str]], None] | None = None  # run with its headers first
    seen: int = 0


@dataclass
class Transaction:
    """How the client wrote a transaction (seen as it wrote it)."""

    ahead: bool  # begun while a COMMIT awaited its answer
    sends: int = 0


@dataclass
class _Link:
    """One client connection to the broker."""

    listener: Any = None
    connected: bool = False
    # Held while the broker answers on this link: closing waits for it, as stomp.py's
    # transport.stop() waits for its receiver thread (no callback after a close).
    lock: threading.RLock = field(default_factory=threading.RLock)
    transactions: dict[str, list[Delivered]] = field(default_factory=dict)
    rollback_only: set[str] = field(default_factory=set)
    subscriptions: dict[str, str] = field(default_factory=dict)  # id -> destination


class FakeBroker:
    """The broker side of fake stomp.py connections.

    Args:
        refused_topics: destinations (``/topic/...``) the publisher may not write to.
        down: addresses (``(host, port)``) that refuse the TCP connection.
        password: the only password it accepts (any if None).
    """

    def __init__(
        self,
        *,
        refused_topics: set[str] | None = None,
        down: set[tuple[str, int]] | None = None,
        password: str | None = None,
    ) -> None:
        self.refused_topics = refused_topics or set()
        self.down = down or set()
        self.password = password
        self.delivered: list[Delivered] = []
        self.frames: list[tuple[str, dict[str, str]]] = []  # every frame received
        self.rules: list[Rule] = []
        self.connects = 0
        self.transactions: dict[str, Transaction] = {}  # by id, in the order begun
        self._pending_commits = 0  # COMMITs written and not answered yet
        self._links: list[_Link] = []
        self._inbox: queue.Queue[tuple[_Link, str, dict[str, str], str] | None] = queue.Queue()
        self._idle = threading.Condition()
        self._busy = 0
        self._thread = threading.Thread(target=self._serve, name="fake-broker", daemon=True)
        self._thread.start()

    # -- scripting -------------------------------------------------------------------

    def on(self, command: str, **what: Any) -> Rule:
        """Script the frames of ``command`` (SEND, BEGIN, COMMIT, ABORT, SUBSCRIBE; CONNECT
        with ``drop``: closed without an answer, as ActiveMQ now and then closes a refused
        CONNECT before its ERROR frame is written)."""
        rule = Rule(command, **what)
        self.rules.append(rule)
        return rule

    @property
    def committing(self) -> bool:
        """Whether a COMMIT was written and its answer has not been sent yet."""
        with self._idle:
            return self._pending_commits > 0

    def transaction_log(self) -> list[tuple[str, int]]:
        """How each transaction's SENDs were written, in the order begun: ("prepared",
        n) when begun while a COMMIT awaited its answer (written ahead), else
        ("streamed", n)."""
        return [
            ("prepared" if tx.ahead else "streamed", tx.sends) for tx in self.transactions.values()
        ]

    def delivered_ids(self) -> list[int]:
        return [message.event_id for message in self.delivered]

    def commands(self) -> list[str]:
        return [command for command, _ in self.frames]

    def settle(self, timeout: float = 5.0) -> None:
        """Wait until every frame written so far is handled."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._busy and time.monotonic() < deadline:
                self._idle.wait(0.01)

    def close(self) -> None:
        self._inbox.put(None)
        self._thread.join(5)

    # -- the connection factory ------------------------------------------------------

    def transport(self, hosts: list[tuple[str, int]], **_: Any) -> Any:
        """What ``BrokerConnection`` calls in place of ``stomp.Connection12``."""
        return _FakeStomp(self, hosts[0])

    def connection(self, settings: Settings) -> BrokerConnection:
        """A connection factory (as ``publisher_connection``) on this broker."""
        return BrokerConnection(
            settings.broker_addresses,
            user=settings.broker_user,
            password=settings.broker_password,
            timeout=settings.broker_timeout,
            transport=self.transport,
        )

    # -- the broker's side -----------------------------------------------------------

    def _write(self, link: _Link, command: str, headers: dict[str, str], body: str = "") -> None:
        if not link.connected and command != "CONNECT":
            raise NotConnectedException("not connected (fake broker)")
        with self._idle:
            self._busy += 1
            transaction = headers.get("transaction")
            if command == "BEGIN" and transaction is not None:
                self.transactions[transaction] = Transaction(ahead=self._pending_commits > 0)
            elif command == "SEND" and transaction in self.transactions:
                self.transactions[transaction].sends += 1
            elif command == "COMMIT":
                self._pending_commits += 1
        self._inbox.put((link, command, dict(headers), body))

    def _rule_for(self, command: str, headers: Mapping[str, str]) -> Rule | None:
        for rule in self.rules:
            if rule.command != command:
                continue
            if rule.destination is not None and headers.get("destination") != rule.destination:
                continue
            rule.seen += 1
            if rule.nth is None or rule.nth == rule.seen:
                return rule
        return None

    def _serve(self) -> None:
        while (item := self._inbox.get()) is not None:
            link, command, headers, body = item
            try:
                rule = self._rule_for(command, headers)
                if rule is not None:
                    if rule.call is not None:
                        rule.call(headers)
                    time.sleep(rule.delay)
                if command == "COMMIT":  # answered now: the client waits no more after it
                    with self._idle:
                        self._pending_commits -= 1
                with link.lock:
                    self._handle(link, command, headers, body, rule)
            finally:
                with self._idle:
                    self._busy -= 1
                    self._idle.notify_all()

    def _handle(
        self, link: _Link, command: str, headers: dict[str, str], body: str, rule: Rule | None
    ) -> None:
        self.frames.append((command, headers))
        if command == "CONNECT":
            if rule is not None and rule.drop:
                link.listener.on_disconnected()
            else:
                self._connect(link, headers)
            return
        if not link.connected:
            return  # written before the drop, read after it: lost
        if rule is not None and rule.drop:
            self.drop(link)
            return
        receipt = headers.get("receipt")
        transaction = headers.get("transaction")
        error = rule.error if rule is not None else None
        if command == "SEND" and error is None:
            destination = headers["destination"]
            if destination in self.refused_topics:
                error = NOT_AUTHORIZED.format(destination.removeprefix("/topic/"))
            elif transaction is not None:
                link.transactions.setdefault(transaction, []).append(
                    Delivered(destination, headers, body)
                )
            else:
                self._deliver([Delivered(destination, headers, body)])
        elif command == "BEGIN":
            link.transactions[headers["transaction"]] = []
        elif command == "COMMIT" and error is None:
            messages = link.transactions.pop(headers["transaction"], [])
            if headers["transaction"] in link.rollback_only:
                error = ROLLED_BACK
            else:
                self._deliver(messages)
        elif command == "ABORT":
            link.transactions.pop(headers["transaction"], None)
        elif command == "SUBSCRIBE":
            link.subscriptions[headers["id"]] = headers["destination"]
        if error is not None and transaction is not None and command == "SEND":
            link.rollback_only.add(transaction)
        if rule is not None and rule.silent:
            return
        if error is not None:
            answer = {"message": error}
            if receipt is not None:
                answer["receipt-id"] = receipt
            link.listener.on_error(Frame("ERROR", answer, ""))
        elif receipt is not None:
            link.listener.on_receipt(Frame("RECEIPT", {"receipt-id": receipt}, ""))

    def _connect(self, link: _Link, headers: Mapping[str, str]) -> None:
        if self.password is not None and headers.get("passcode") != self.password:
            message = BAD_LOGIN.format(headers.get("login", ""))
            link.listener.on_error(Frame("ERROR", {"message": message}, ""))
            link.listener.on_disconnected()
            return
        link.connected = True
        self.connects += 1
        link.listener.on_connected(Frame("CONNECTED", {"version": "1.2"}, ""))

    def _deliver(self, messages: list[Delivered]) -> None:
        self.delivered.extend(messages)
        for link in list(self._links):
            for sub_id, destination in link.subscriptions.items():
                for message in messages:
                    if message.destination == destination and link.connected:
                        headers = {
                            **message.headers,
                            "subscription": sub_id,
                            "message-id": f"m-{message.headers.get('HCAT_EVENT_ID', '')}",
                        }
                        link.listener.on_message(Frame("MESSAGE", headers, message.body))

    def drop(self, link: _Link | None = None) -> None:
        """Drop a connection (the last one made if None), as a broker going away does."""
        link = link or self._links[-1]
        with link.lock:
            if not link.connected:
                return
            link.connected = False
            link.transactions.clear()
            link.listener.on_disconnected()


class _Transport:
    """The part of stomp.py's transport the connection writes chunks of frames to."""

    blocking = True

    def __init__(self, stomp: _FakeStomp) -> None:
        self._stomp = stomp

    def send(self, chunk: bytes) -> None:
        for command, headers, body in _parse(chunk):
            self._stomp.link_write(command, headers, body)

    def stop(self) -> None:
        self._stomp.disconnect()


class _FakeStomp:
    """Stands for ``stomp.Connection12`` on one address of the fake broker."""

    def __init__(self, broker: FakeBroker, address: tuple[str, int]) -> None:
        self._broker = broker
        self._address = address
        self._link = _Link()
        self.transport = _Transport(self)

    def link_write(self, command: str, headers: dict[str, str], body: str = "") -> None:
        self._broker._write(self._link, command, headers, body)

    def set_listener(self, name: str, listener: Any) -> None:
        self._link.listener = listener

    def connect(self, user: str, password: str, wait: bool = False) -> None:
        if self._address in self._broker.down:
            raise ConnectFailedException()
        self._broker._links.append(self._link)
        self.link_write("CONNECT", {"login": user, "passcode": password})

    def is_connected(self) -> bool:
        return self._link.connected

    def send(
        self,
        destination: str,
        body: str,
        content_type: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.link_write("SEND", {**(headers or {}), "destination": destination}, body)

    def subscribe(
        self, destination: str, id: str, ack: str = "auto", headers: Mapping[str, str] | None = None
    ) -> None:
        self.link_write("SUBSCRIBE", {**(headers or {}), "destination": destination, "id": id})

    def ack(self, id: str) -> None:
        self.link_write("ACK", {"id": id})

    def begin(self, transaction: str) -> None:
        self.link_write("BEGIN", {"transaction": transaction})

    def commit(self, transaction: str, headers: Mapping[str, str] | None = None) -> None:
        self.link_write("COMMIT", {**(headers or {}), "transaction": transaction})

    def abort(self, transaction: str) -> None:
        self.link_write("ABORT", {"transaction": transaction})

    def disconnect(self) -> None:
        with self._link.lock:  # no answer on this link after it
            self._link.connected = False
            self._link.transactions.clear()


_UNESCAPE = {"\\\\": "\\", "\\r": "\r", "\\n": "\n", "\\c": ":"}


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    out, i = [], 0
    while i < len(value):
        pair = value[i : i + 2]
        if pair in _UNESCAPE:
            out.append(_UNESCAPE[pair])
            i += 2
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def _parse(data: bytes) -> list[tuple[str, dict[str, str], str]]:
    """The STOMP frames in ``data`` (whole frames, as the connection writes them)."""
    frames: list[tuple[str, dict[str, str], str]] = []
    position = 0
    for _ in itertools.count():
        while position < len(data) and data[position : position + 1] in (b"\n", b"\r"):
            position += 1  # heart-beats between frames
        if position >= len(data):
            return frames
        head_end = data.index(b"\n\n", position)
        lines = data[position:head_end].decode().split("\n")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers.setdefault(_unescape(name), _unescape(value))  # the first one wins
        start = head_end + 2
        if "content-length" in headers:
            end = start + int(headers["content-length"])
        else:
            end = data.index(b"\0", start)
        frames.append((lines[0], headers, data[start:end].decode()))
        position = end + 1
    return frames
