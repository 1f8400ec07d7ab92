"""Helpers for failover tests: what the relay got receipts for (and from which broker),
the relay's recorded progress watched against those receipts, a stream of writes, and a
TCP proxy that can cut or freeze a connection to a real broker."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from hcat_notify.broker import BrokerConnection
from hcat_notify.broker.connection import PendingCommit
from hcat_notify.broker.frames import PreparedSends
from hcat_notify.config import Settings
from hcat_notify.consumer import Notification, NotificationConsumer
from hcat_notify.relay import Relay
from hcat_notify.store import Catalog, NewPartition, TableInfo
from hcat_notify.writer import send_mark_set_done
from tests.integration.delivery import running_relay


@dataclass(frozen=True)
class Receipt:
    broker: str  # the address whose RECEIPT it was
    at: float  # monotonic


class ReceiptLog:
    """Every event id a relay's connection got a RECEIPT for: the broker and the time.

    ``factory`` is the relay's ``connection_factory``: the connections it builds are
    real :class:`BrokerConnection` objects that note an event once its frame (or the
    COMMIT of its transaction) is receipted, before the relay learns of it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.receipts: dict[int, list[Receipt]] = {}
        self.sent: dict[int, list[str]] = {}  # event id -> brokers its SEND frame went to
        self.connections: list[BrokerConnection] = []
        # hold_commit(): the next COMMIT waits (its SENDs are at the broker, uncommitted)
        # until release() - so a test can kill the broker with a batch in flight.
        self._hold = threading.Event()
        self.holding = threading.Event()
        self._release = threading.Event()
        self.held: list[int] = []

    def factory(self, settings: Settings) -> BrokerConnection:
        connection = _RecordingConnection(
            self,
            settings.broker_addresses,
            user=settings.broker_user,
            password=settings.broker_password,
            timeout=settings.broker_timeout,
        )
        self.connections.append(connection)
        return connection

    def hold_commit(self) -> None:
        self._release.clear()
        self._hold.set()

    def release(self) -> None:
        self._release.set()

    def _before_commit(self, event_ids: list[int]) -> None:
        if event_ids and self._hold.is_set():
            self._hold.clear()
            self.held = list(event_ids)
            self.holding.set()
            self._release.wait(60)

    def note_sent(self, event_id: int, broker: str) -> None:
        with self._lock:
            self.sent.setdefault(event_id, []).append(broker)

    def note(self, event_ids: list[int], broker: str) -> None:
        now = time.monotonic()
        with self._lock:
            for event_id in event_ids:
                self.receipts.setdefault(event_id, []).append(Receipt(broker, now))

    def snapshot(self) -> dict[int, list[Receipt]]:
        with self._lock:
            return {key: list(value) for key, value in self.receipts.items()}


class _RecordingConnection(BrokerConnection):
    def __init__(self, log: ReceiptLog, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._log = log
        self._transactions: dict[str, list[int]] = {}
        self._committing: dict[str, list[int]] = {}  # receipt -> its COMMIT's event ids

    def send(
        self, destination: str, body: str, headers: Mapping[str, str] | None = None, **kw: object
    ) -> None:
        event_id = int((headers or {})["HCAT_EVENT_ID"])
        self._log.note_sent(event_id, str(self.address))
        super().send(destination, body, headers, **kw)  # type: ignore[arg-type]
        transaction = kw.get("transaction")
        if transaction is not None:
            self._transactions.setdefault(str(transaction), []).append(event_id)
        elif kw.get("receipt", True):
            self._log.note([event_id], str(self.address))

    def send_in_transaction(
        self, transaction: str, messages: Iterable[tuple[str, str, Mapping[str, str]]]
    ) -> None:
        ids = self._transactions.setdefault(transaction, [])

        def noted() -> Iterator[tuple[str, str, Mapping[str, str]]]:
            for message in messages:
                yield message
                # Resumed once the frame was encoded; every frame has left by the time
                # send_in_transaction returns (before the COMMIT), as in send().
                event_id = int(message[2]["HCAT_EVENT_ID"])
                self._log.note_sent(event_id, str(self.address))
                ids.append(event_id)

        super().send_in_transaction(transaction, noted())

    def send_prepared(self, prepared: PreparedSends) -> None:
        super().send_prepared(prepared)
        ids = [int(headers["HCAT_EVENT_ID"]) for _, _, headers in prepared.messages]
        for event_id in ids:
            self._log.note_sent(event_id, str(self.address))
        self._transactions.setdefault(prepared.transaction, []).extend(ids)

    def write_commit(self, transaction: str) -> PendingCommit:
        ids = self._transactions.pop(transaction, [])
        self._log._before_commit(ids)
        pending = super().write_commit(transaction)
        self._committing[pending.receipt] = ids
        return pending

    def await_commit(self, pending: PendingCommit, *, timeout: float | None = None) -> int:
        errors = super().await_commit(pending, timeout=timeout)
        self._log.note(self._committing.pop(pending.receipt, []), str(self.address))
        return errors


class ProgressWatch:
    """Samples the relay group's recorded progress per topic, and checks each sample
    against the receipts: progress through event N of a topic needs a RECEIPT for every
    event of that topic up to N, received before the sample was read."""

    def __init__(self, catalog: Catalog, receipts: ReceiptLog, stream: Stream) -> None:
        self._catalog = catalog
        self._receipts = receipts
        self._stream = stream
        self.samples: list[tuple[float, dict[str, int]]] = []
        self.violations: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress-watch", daemon=True)

    def __enter__(self) -> ProgressWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            at = time.monotonic()
            progress = self._catalog.group.progress()
            receipted = self._receipts.snapshot()  # read after the progress
            written = self._stream.ids()
            self.samples.append((at, progress))
            for topic, through in progress.items():
                missing = [i for i in written.get(topic, []) if i <= through and i not in receipted]
                if missing:
                    self.violations.append(
                        f"{topic} recorded through {through} without a receipt for {missing[:5]}"
                    )

    def progress_between(self, start: float, end: float) -> list[dict[str, int]]:
        return [progress for at, progress in self.samples if start <= at <= end]


@dataclass
class Stream:
    """Writers committing events to some tables at a steady pace, in threads: half of
    them partitions (``Catalog.add_partitions``), half ``send_mark_set_done``."""

    settings: Settings
    catalog: Catalog
    tables: list[TableInfo]
    total: int
    per_second: float
    writers: int = 2
    ids_by_topic: dict[str, list[int]] = field(default_factory=dict)
    call_seconds: list[float] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Stream:
        for table in self.tables:
            self.ids_by_topic.setdefault(table.topic, [])
        share = self.total // self.writers
        for number in range(self.writers):
            thread = threading.Thread(
                target=self._write, args=(number, share), name=f"writer-{number}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        return self

    def _write(self, number: int, count: int) -> None:
        pace = self.writers / self.per_second
        started = time.monotonic()
        try:
            for n in range(count):
                delay = started + n * pace - time.monotonic()
                if self._stop.wait(max(delay, 0)):
                    return
                table = self.tables[(number + n) % len(self.tables)]
                before = time.monotonic()
                if n % 2:
                    event_id = send_mark_set_done(
                        table.name, {"datestamp": f"w{number}-{n}"}, settings=self.settings
                    )
                else:
                    (added,) = self.catalog.add_partitions(
                        table.name,
                        [
                            NewPartition(
                                {"datestamp": f"w{number}-{n}", "region": "us"}, table.location
                            )
                        ],
                    )
                    assert added.event_id is not None
                    event_id = added.event_id
                with self._lock:
                    self.ids_by_topic[table.topic].append(event_id)
                    self.call_seconds.append(time.monotonic() - before)
        except BaseException as exc:  # noqa: BLE001 - the test asserts there were none
            self.errors.append(exc)

    @property
    def written(self) -> int:
        with self._lock:
            return sum(len(ids) for ids in self.ids_by_topic.values())

    def ids(self) -> dict[str, list[int]]:
        """Per topic, the event ids written so far, in id order."""
        with self._lock:
            return {topic: sorted(ids) for topic, ids in self.ids_by_topic.items()}

    def stop(self) -> None:
        """Stop writing (a failed test must not leave writers behind)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def join(self, timeout: float = 120.0) -> None:
        for thread in self._threads:
            thread.join(timeout)
        assert not any(t.is_alive() for t in self._threads), "writers did not finish"
        assert self.errors == [], f"a writer failed: {self.errors!r}"


class Collector:
    """Runs a started consumer in a thread and keeps every notification it delivers."""

    def __init__(self, consumer: NotificationConsumer) -> None:
        self.consumer = consumer
        self.got: list[Notification] = []
        self.arrived: list[float] = []
        self._thread = threading.Thread(target=self._run, name="collector", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for notification in self.consumer.notifications():
            self.got.append(notification)
            self.arrived.append(time.monotonic())

    def wait_for(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.got) < count and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self, quiet: float = 1.5) -> list[Notification]:
        """Wait until nothing more arrives for ``quiet`` s, then stop; everything got."""
        seen = -1
        while seen != len(self.got):
            seen = len(self.got)
            time.sleep(quiet)
        self.consumer.stop()
        self._thread.join(30)
        return list(self.got)


class Proxy:
    """A TCP proxy on loopback in front of a real broker: :meth:`cut` closes every
    connection through it (a dropped socket), :meth:`freeze` stops forwarding while
    keeping the sockets open (a hung broker)."""

    def __init__(self, target_port: int) -> None:
        self._target = ("127.0.0.1", target_port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._frozen = threading.Event()
        self._stopped = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._target)
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._pump, args=(source, sink), name="proxy-pump", daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                data = source.recv(65536)
                if not data:
                    break
                while self._frozen.is_set() and not self._stopped.is_set():
                    time.sleep(0.05)
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def freeze(self) -> None:
        self._frozen.set()

    def cut(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self._stopped.set()
        self._server.close()
        self.cut()


def silent_listener() -> socket.socket:
    """A listening socket that never answers: TCP connects succeed, CONNECT hangs (as a
    hung broker's would). Close it after the test."""
    return socket.create_server(("127.0.0.1", 0))


@dataclass
class Delivery:
    """What :func:`delivering` runs."""

    relay: Relay
    receipts: ReceiptLog
    collector: Collector
    watch: ProgressWatch


@contextlib.contextmanager
def delivering(
    settings: Settings, catalog: Catalog, stream: Stream, **relay_config: Any
) -> Iterator[Delivery]:
    """A relay whose receipts are logged, a consumer of the stream's tables from the
    start (cursor 0) collecting in a thread, and a watch on the recorded progress."""
    receipts = ReceiptLog()
    consumer = NotificationConsumer([t.name for t in stream.tables], settings=settings, cursor=0)
    with (
        consumer,
        running_relay(settings, connection_factory=receipts.factory, **relay_config) as relay,
    ):
        collector = Collector(consumer)
        try:
            with ProgressWatch(catalog, receipts, stream) as watch:
                yield Delivery(relay, receipts, collector, watch)
        finally:
            stream.stop()
            receipts.release()
