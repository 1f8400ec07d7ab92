"""A STOMP connection to ActiveMQ with deadlines, failover and mapped errors.

stomp.py's own waits have no deadlines, it does not reconnect by itself, and a listener
that raises kills its receiver thread. This wrapper owns all three: every wait has a
timeout, the listener never raises, and callers reconnect by calling
:meth:`BrokerConnection.connect` again, which walks the configured brokers starting after
the one whose connection was lost (docs/architecture.md, "Broker failover").
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType

import stomp
from stomp.exception import StompException

from hcat_notify.broker.errors import FAULT_ERRORS, BrokerFault, classify, error_for
from hcat_notify.broker.frames import PreparedSends, send_chunks
from hcat_notify.broker.listener import FrameCallbacks, Listener, ReceivedMessage
from hcat_notify.config import BrokerAddress, Settings
from hcat_notify.errors import (
    BrokerCredentialsError,
    BrokerError,
    BrokerTimeoutError,
    BrokerUnavailableError,
)

__all__ = [
    "DEFAULT_HEARTBEATS",
    "HEARTBEAT_RECEIVE_SCALE",
    "HEARTBEAT_TIMEOUT",
    "BrokerConnection",
    "PendingCommit",
    "ReceivedMessage",
    "consumer_connection",
    "error_for",
    "publisher_connection",
]

logger = logging.getLogger(__name__)

# (client sends every, client wants every) in ms; ActiveMQ drops silent peers.
DEFAULT_HEARTBEATS = (10_000, 3_000)
# How long a silent broker is tolerated, in units of the interval we ask it to beat at.
# ActiveMQ skips a keep-alive when it wrote any frame during the previous interval, so
# after a message the silence can last almost two intervals; stomp.py's default of 1.5
# then drops idle connections that just received something (a watcher or a relay with
# sporadic traffic reconnected several times an hour). With 3 x 3 s a hung broker is
# noticed within 9 s, and a healthy one never stays silent for more than 6 s.
HEARTBEAT_RECEIVE_SCALE = 3.0
# stomp.py checks at the moment the tolerated silence ends, so a hung broker is noticed
# 9 s after the last frame it sent, and every wait on that connection fails then. (In a
# connection's first 9 s stomp.py counts the silence from the end of a grace period of
# the same length, so a broker that hangs then is noticed up to 18 s after CONNECTED.)
HEARTBEAT_TIMEOUT = DEFAULT_HEARTBEATS[1] / 1000 * HEARTBEAT_RECEIVE_SCALE
_ids = itertools.count(1)
_CONNECTION_LOST = "connection lost"


@dataclass
class _Waiter:
    event: threading.Event = field(default_factory=threading.Event)
    error: str | None = None
    errors_before: int = 0  # ERROR frames received before the RECEIPT


@dataclass(frozen=True)
class PendingCommit:
    """A COMMIT written and not yet answered (:meth:`BrokerConnection.write_commit`)."""

    transaction: str
    receipt: str
    waiter: _Waiter = field(repr=False)


class _ClosedWithoutReasonError(BrokerUnavailableError):
    """The broker closed the connection during CONNECT and sent no ERROR frame."""


# Every SEND: without amq-msg-type, the content-length header stomp.py adds makes
# ActiveMQ deliver a BytesMessage; JMS consumers (Oozie) expect a TextMessage. No
# content-type: the body is JSON by contract, and ActiveMQ would keep the header as a
# property of every message, parsed and stored each time (~1-2 us of the broker's CPU a
# message, of ~15: docs/architecture.md, "Messages").
_TEXT_MESSAGE = {"amq-msg-type": "text", "persistent": "true"}


class BrokerConnection:
    """One STOMP 1.2 connection, tried against each configured broker in turn.

    :meth:`connect` may be called again after the connection was lost (a dropped socket,
    a missed heart-beat): it starts with the broker after the lost one, so a master/slave
    pair is walked in the order that finds the new master first.

    Args:
        addresses: brokers in failover order.
        user: login.
        password: passcode.
        timeout: seconds for each wait (connect, receipt).
        heartbeats: STOMP heart-beat header, in ms.
        transport: makes the stomp.py connection to one broker (called as
            ``stomp.Connection12`` is, which it defaults to; tests give a fake broker's).
    """

    def __init__(
        self,
        addresses: Sequence[BrokerAddress],
        *,
        user: str,
        password: str,
        timeout: float = 10.0,
        heartbeats: tuple[int, int] = DEFAULT_HEARTBEATS,
        transport: Callable[..., stomp.Connection12] = stomp.Connection12,
    ) -> None:
        if not addresses:
            raise BrokerError("no broker address configured")
        self._addresses = tuple(addresses)
        self._user = user
        self._password = password
        self._timeout = timeout
        self._heartbeats = heartbeats
        self._transport = transport
        self._conn: stomp.Connection12 | None = None
        self._lock = threading.Lock()
        self._connected = threading.Event()
        self._receipts: dict[str, _Waiter] = {}
        self._errors: list[str] = []
        self._refusal: str | None = None  # an ERROR frame that answered CONNECT
        self._generation = 0
        self._start = 0  # index of the address the next connect() tries first
        self.messages: queue.Queue[ReceivedMessage] = queue.Queue()
        self.address: BrokerAddress | None = None
        self._trying: BrokerAddress | None = None  # the address a connect() is trying
        self.last_heartbeat: float | None = None  # monotonic time of the broker's last beat
        self.heartbeat_timeouts = 0  # times the broker was silent for too long
        self.lost = 0  # connections lost (not closed by us) since this object was made
        self.connected_at: float | None = None  # monotonic time of the last CONNECTED
        self._callbacks = FrameCallbacks(
            connected=self._on_connected,
            error=self._on_error,
            receipt=self._on_receipt,
            message=lambda message: self.messages.put(message),
            disconnected=self._on_disconnected,
            heartbeat=self._on_heartbeat,
            heartbeat_timeout=self._on_heartbeat_timeout,
        )

    # -- listener callbacks ----------------------------------------------------------

    def _on_connected(self) -> None:
        self._connected.set()

    def _on_error(self, headers: Mapping[str, str], body: str) -> None:
        message = headers.get("message", "").strip() or body.strip() or "ERROR frame"
        logger.warning("broker %s sent ERROR: %s", self._trying, message)
        with self._lock:
            self._errors.append(message)
            receipt_id = headers.get("receipt-id")
            if receipt_id is None:
                # An ERROR about a frame sent without a receipt (a SEND inside a
                # transaction): we cannot tell which wait it concerns, so fail them all
                # rather than let one report success or wait for its deadline.
                waiters = list(self._receipts.values())
            else:
                # About one receipt; one we no longer wait for concerns nobody.
                waiter = self._receipts.get(receipt_id)
                waiters = [] if waiter is None else [waiter]
        for item in waiters:
            if item.error is None:  # the first ERROR says why; later ones are echoes
                item.error = message
            item.event.set()
        if self._conn is None and self._refusal is None:
            self._refusal = message  # CONNECT was answered with an ERROR
        if not self._connected.is_set():
            self._connected.set()

    def _on_receipt(self, receipt_id: str) -> None:
        # Answered: an ERROR after it is about later frames and must not touch it.
        with self._lock:
            waiter = self._receipts.pop(receipt_id, None)
            if waiter is not None:
                waiter.errors_before = len(self._errors)
        if waiter is not None:
            waiter.event.set()

    def _on_disconnected(self) -> None:
        if self._conn is None:
            # Closed during CONNECT (after an ERROR, or without a word) or by close():
            # wake connect() now instead of at its deadline.
            logger.debug("disconnected from broker %s", self._trying)
            self._connected.set()
            return
        self.lost += 1
        if self._trying is not None:  # the address this connection was made to
            self._start = (self._addresses.index(self._trying) + 1) % len(self._addresses)
        logger.warning(
            "lost the connection to broker %s; the next connect tries %s first",
            self._trying,
            self._addresses[self._start],
        )
        self._connected.clear()
        with self._lock:
            waiters = list(self._receipts.values())
        for item in waiters:
            if not item.event.is_set():
                item.error = _CONNECTION_LOST
                item.event.set()

    def _on_heartbeat(self) -> None:
        self.last_heartbeat = time.monotonic()

    def _on_heartbeat_timeout(self, address: BrokerAddress) -> None:
        # stomp.py has closed the socket already (on_disconnected came first).
        with self._lock:
            self.heartbeat_timeouts += 1
        logger.warning(
            "broker %s sent nothing for %.0f s (heart-beat timeout): connection dropped",
            address,
            self._heartbeats[1] / 1000 * HEARTBEAT_RECEIVE_SCALE,
        )

    # -- public API ------------------------------------------------------------------

    @property
    def is_connected(self) -> bool:
        """Connected, as the listener saw it: CONNECTED came and no loss since (a write
        on a socket that died meanwhile fails, as a loss). stomp.py's own check asks the
        kernel each time (``getsockname``), a system call that hands the GIL to another
        thread for up to a switch interval; the relay asked five times a batch."""
        return self._conn is not None and self._connected.is_set()

    @property
    def errors(self) -> list[str]:
        """ERROR frames received on this connection (their ``message`` headers)."""
        with self._lock:
            return list(self._errors)

    def connect(self) -> BrokerAddress:
        """Connect to the first broker that accepts us, closing any connection first.

        Tries every configured address once: from the first on a fresh object, from the
        one after the last broker whose connection was lost on a reconnect. An address
        that refuses the TCP connection is skipped at once; one that accepts it but does
        not answer CONNECT (a hung broker) costs the timeout. Messages not yet received
        from the previous connection are dropped (their acks would mean nothing on the
        next one): callers catch up from the catalog.

        Returns:
            The address connected to.

        Raises:
            BrokerCredentialsError: a broker refused the credentials (not tried further).
            BrokerUnavailableError: no broker answered; the message names every URL.
        """
        self.close()
        self.messages = queue.Queue()
        with self._lock:
            self._errors = []
        count = len(self._addresses)
        failures = []
        for offset in range(count):
            index = (self._start + offset) % count
            address = self._addresses[index]
            try:
                self._connect_one(address)
            except BrokerCredentialsError:
                raise
            except BrokerError as exc:
                failures.append(f"{address}: {exc}")
                continue
            previous, self.address, self._start = self.address, address, index
            self.connected_at = time.monotonic()
            if previous is not None and previous != address:
                logger.warning(
                    "connected to broker %s as %s (was %s)", address, self._user, previous
                )
            else:
                logger.info("connected to broker %s as %s", address, self._user)
            return address
        raise BrokerUnavailableError("cannot connect to broker: " + "; ".join(failures))

    def _connect_one(self, address: BrokerAddress) -> None:
        # ActiveMQ (5.17) now and then closes a refused CONNECT before its ERROR frame is
        # written (about 1 in 100 on loopback): a close without a reason is tried once
        # more, so that bad credentials are reported as such, not as an outage.
        try:
            self._attempt(address)
        except _ClosedWithoutReasonError:
            self._attempt(address)

    def _attempt(self, address: BrokerAddress) -> None:
        conn = self._transport(
            [(address.host, address.port)],
            heartbeats=self._heartbeats,
            heart_beat_receive_scale=HEARTBEAT_RECEIVE_SCALE,
            reconnect_attempts_max=1,
            timeout=self._timeout,
            try_loopback_connect=False,
        )
        self._generation += 1
        self._trying = address
        generation = self._generation
        conn.set_listener(
            "hcat-notify",
            Listener(self._callbacks, lambda: generation == self._generation, address),
        )
        self._connected.clear()
        self._refusal = None
        try:
            conn.connect(self._user, self._password, wait=False)
        except (StompException, OSError) as exc:
            self._stop(conn)
            raise BrokerUnavailableError(f"connection refused ({type(exc).__name__})") from exc
        if not self._connected.wait(self._timeout):
            self._stop(conn)
            raise BrokerTimeoutError(f"no CONNECTED frame within {self._timeout:g}s")
        refusal = self._refusal
        if refusal is not None or not conn.is_connected():
            self._stop(conn)
            if refusal is not None and classify(refusal) is BrokerFault.CREDENTIALS:
                raise BrokerCredentialsError(
                    f"broker {address} refused user {self._user!r}: {refusal}"
                )
            # A broker going down (or shutting down) closes connections mid-CONNECT too:
            # that is an outage, to be retried elsewhere, never a reason to give up.
            if refusal is None:
                raise _ClosedWithoutReasonError(
                    "the broker closed the connection during CONNECT: no reason given"
                )
            raise BrokerUnavailableError(
                f"the broker closed the connection during CONNECT: {refusal}"
            )
        self._conn = conn
        # stomp.py leaves Nagle's algorithm on: a small COMMIT after the SENDs then waits
        # for the broker's delayed ACK, about 40 ms per receipt. Off, except while a
        # transaction's SENDs are written (see begin()).
        self._nagle(False)

    def _nagle(self, on: bool) -> None:
        """Nagle's algorithm on the broker socket. Turning it off sends whatever is
        buffered at once (Linux and BSD push pending data on TCP_NODELAY)."""
        conn = self._conn
        if conn is None:
            return
        with contextlib.suppress(OSError, AttributeError):
            conn.transport.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0 if on else 1)

    def _require(self) -> stomp.Connection12:
        conn = self._conn
        if conn is None or not self._connected.is_set():
            raise BrokerUnavailableError(
                f"not connected to a broker ({self.address or 'never connected'})"
            )
        return conn

    def _await_receipt(
        self, receipt: str, waiter: _Waiter, what: str, timeout: float | None
    ) -> int:
        """Wait for the RECEIPT; how many ERROR frames the connection had received
        before it (the broker answers in order: later ones concern later frames)."""
        deadline = self._timeout if timeout is None else timeout
        try:
            if not waiter.event.wait(deadline):
                raise BrokerTimeoutError(
                    f"no RECEIPT for {what} within {deadline:g}s from {self.address}"
                )
            if waiter.error == _CONNECTION_LOST:
                raise BrokerUnavailableError(
                    f"{what}: connection to {self.address} lost before the RECEIPT "
                    "(the outcome is unknown)"
                )
            if waiter.error is not None:
                fault = classify(waiter.error)
                verb = "failed at" if fault is BrokerFault.OTHER else "refused by"
                raise FAULT_ERRORS[fault](f"{what} {verb} {self.address}: {waiter.error}")
            return waiter.errors_before
        finally:
            with self._lock:
                self._receipts.pop(receipt, None)

    @contextlib.contextmanager
    def _writing(self, what: str, receipt: str | None = None) -> Iterator[None]:
        """Map stomp.py's and the socket's errors while writing a frame to ours; forget
        the frame's receipt if it never left."""
        try:
            yield
        except (StompException, OSError) as exc:
            if receipt is not None:
                with self._lock:
                    self._receipts.pop(receipt, None)
            raise BrokerUnavailableError(
                f"{what} failed: connection to {self.address} lost ({type(exc).__name__})"
            ) from exc

    def _register(self) -> tuple[str, _Waiter]:
        receipt = f"hcat-{next(_ids)}"
        waiter = _Waiter()
        with self._lock:
            self._receipts[receipt] = waiter
        return receipt, waiter

    def send(
        self,
        destination: str,
        body: str,
        headers: Mapping[str, str] | None = None,
        *,
        transaction: str | None = None,
        receipt: bool = True,
        timeout: float | None = None,
    ) -> None:
        """SEND a persistent JMS TextMessage; wait for its RECEIPT unless told not to.

        Raises:
            BrokerAuthError: the principal may not write to ``destination``.
            BrokerTimeoutError: no receipt within the deadline (outcome unknown).
            BrokerError: the connection failed; the outcome is unknown.
        """
        conn = self._require()
        frame_headers = {**(headers or {}), **_TEXT_MESSAGE}
        if transaction is not None:
            frame_headers["transaction"] = transaction
        what = f"SEND to {destination}"
        if not receipt:
            with self._writing(what):
                conn.send(destination, body, headers=frame_headers)
            return
        receipt_id, waiter = self._register()
        frame_headers["receipt"] = receipt_id
        with self._writing(what, receipt_id):
            conn.send(destination, body, headers=frame_headers)
        self._await_receipt(receipt_id, waiter, what, timeout)

    def send_in_transaction(
        self, transaction: str, messages: Iterable[tuple[str, str, Mapping[str, str]]]
    ) -> None:
        """SEND persistent JMS TextMessages ``(destination, body, headers)`` in a
        transaction, without receipts (the COMMIT's receipt answers for them).

        The frames are those :meth:`send` writes, written in chunks of many frames.

        Raises:
            BrokerError: the connection failed; the transaction is not committed.
        """
        conn = self._require()
        with self._writing(f"SEND in {transaction}"):
            if not conn.transport.blocking:
                self._send_each(conn, transaction, messages)
                return
            # Encoded here and written in large chunks: stomp.py's per-frame path (header
            # merging, listeners, a lock and a system call per frame) was most of the
            # relay's sending time. Frames go out whole, so the heart-beat thread's
            # newlines can only fall between them.
            for chunk in send_chunks(messages, self._fixed_headers(transaction)):
                conn.transport.send(chunk)

    def prepare_sends(
        self, messages: Iterable[tuple[str, str, Mapping[str, str]]]
    ) -> PreparedSends:
        """Encode the SENDs of a transaction to come (nothing is written): :meth:`begin`
        it with its ``transaction`` id, then :meth:`send_prepared`."""
        transaction = f"hcat-tx-{next(_ids)}"
        listed = tuple(messages)
        chunks = tuple(send_chunks(listed, self._fixed_headers(transaction)))
        return PreparedSends(transaction, listed, chunks)

    def send_prepared(self, prepared: PreparedSends) -> None:
        """Write the frames of a prepared transaction, begun with its id: the same as
        :meth:`send_in_transaction` of its messages.

        Raises:
            BrokerError: the connection failed; the transaction is not committed.
        """
        conn = self._require()
        with self._writing(f"SEND in {prepared.transaction}"):
            if not conn.transport.blocking:
                self._send_each(conn, prepared.transaction, prepared.messages)
                return
            for chunk in prepared.chunks:
                conn.transport.send(chunk)

    @staticmethod
    def _fixed_headers(transaction: str) -> dict[str, str]:
        return {**_TEXT_MESSAGE, "transaction": transaction}

    def _send_each(
        self,
        conn: stomp.Connection12,
        transaction: str,
        messages: Iterable[tuple[str, str, Mapping[str, str]]],
    ) -> None:
        """One frame at a time: stomp.py's own writer thread owns a non-blocking (TLS)
        transport's socket."""
        fixed = self._fixed_headers(transaction)
        for destination, body, headers in messages:
            conn.send(destination, body, headers={**headers, **fixed})

    def subscribe(
        self,
        destination: str,
        subscription_id: str,
        *,
        ack: str = "auto",
        selector: str | None = None,
        timeout: float | None = None,
    ) -> None:
        """SUBSCRIBE and wait for the receipt: only then is the subscription live."""
        conn = self._require()
        headers: dict[str, str] = {}
        if selector:
            headers["selector"] = selector
        receipt_id, waiter = self._register()
        headers["receipt"] = receipt_id
        what = f"SUBSCRIBE to {destination}"
        with self._writing(what, receipt_id):
            conn.subscribe(destination, subscription_id, ack=ack, headers=headers)
        self._await_receipt(receipt_id, waiter, what, timeout)

    def receive(self, timeout: float | None = None) -> ReceivedMessage | None:
        """The next delivered message, or None if none arrives within ``timeout``."""
        try:
            return self.messages.get(timeout=self._timeout if timeout is None else timeout)
        except queue.Empty:
            return None

    def ack(self, message: ReceivedMessage) -> None:
        """Acknowledge one message (for ``client`` / ``client-individual`` subscriptions)."""
        if message.ack_id is None:
            return
        with self._writing("ACK"):
            self._require().ack(message.ack_id)

    def begin(self, transaction: str | None = None) -> str:
        """Begin a STOMP transaction (a new id, or a prepared one); return its id."""
        transaction = transaction or f"hcat-tx-{next(_ids)}"
        with self._writing("BEGIN"):
            self._require().begin(transaction)
        # The transaction's SENDs need no answer: let the kernel pack them into full
        # segments (one small packet each costs the broker and us a wake-up apiece).
        # COMMIT and ABORT turn it off again, which pushes them out.
        self._nagle(True)
        return transaction

    def commit(self, transaction: str, *, timeout: float | None = None) -> int:
        """COMMIT a transaction and wait for its RECEIPT; how many ERROR frames had come
        before the RECEIPT (``errors[:n]``: any of the transaction's are among them).

        The same as :meth:`write_commit` then :meth:`await_commit`.
        """
        return self.await_commit(self.write_commit(transaction), timeout=timeout)

    def write_commit(self, transaction: str) -> PendingCommit:
        """Write the COMMIT of a transaction, with a receipt, without waiting for it:
        the broker stores the transaction while the caller does other work, then
        :meth:`await_commit`.

        Raises:
            BrokerError: the connection failed; the outcome is unknown.
        """
        conn = self._require()
        receipt_id, waiter = self._register()
        what = f"COMMIT {transaction}"
        self._nagle(False)
        with self._writing(what, receipt_id):
            conn.commit(transaction, headers={"receipt": receipt_id})
        return PendingCommit(transaction, receipt_id, waiter)

    def await_commit(self, pending: PendingCommit, *, timeout: float | None = None) -> int:
        """Wait for the RECEIPT of a COMMIT :meth:`write_commit` wrote; how many ERROR
        frames had come before it (as :meth:`commit` returns).

        Args:
            pending: what :meth:`write_commit` returned.
            timeout: seconds to wait for the RECEIPT (default: the connection's).

        Raises:
            BrokerError: refused, failed, no RECEIPT in time, or the connection was lost.
        """
        return self._await_receipt(
            pending.receipt, pending.waiter, f"COMMIT {pending.transaction}", timeout
        )

    def abort(self, transaction: str) -> None:
        """ABORT a transaction (best effort)."""
        self._nagle(False)
        if self._conn is not None and self._conn.is_connected():
            with contextlib.suppress(StompException, OSError):
                self._conn.abort(transaction)

    def close(self) -> None:
        """Disconnect (best effort) and stop stomp.py's receiver thread."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._stop(conn)

    def _stop(self, conn: stomp.Connection12) -> None:
        with contextlib.suppress(StompException, OSError):
            if conn.is_connected():
                conn.disconnect()
        with contextlib.suppress(StompException, OSError, AttributeError):
            conn.transport.stop()
        # stomp.py 9 can leave its socket and its wake-up socket pair open when the
        # broker closed the connection first (a refused login): close them here.
        transport = conn.transport
        with contextlib.suppress(OSError, AttributeError):
            if getattr(transport, "send_queue", None) is not None:
                transport.send_queue.shutdown()
                transport.send_queue = None
        with contextlib.suppress(OSError, AttributeError):
            if getattr(transport, "socket", None) is not None:
                transport.socket.close()

    def __enter__(self) -> BrokerConnection:
        self.connect()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _connection(settings: Settings, user: str, password: str) -> BrokerConnection:
    return BrokerConnection(
        settings.broker_addresses, user=user, password=password, timeout=settings.broker_timeout
    )


def publisher_connection(settings: Settings) -> BrokerConnection:
    """A (not yet connected) connection with the service's publisher credentials."""
    return _connection(settings, settings.broker_user, settings.broker_password)


def consumer_connection(settings: Settings) -> BrokerConnection:
    """A (not yet connected) connection with the consumer credentials."""
    return _connection(settings, settings.consumer_user, settings.consumer_password)
