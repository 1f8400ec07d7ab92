"""The relay's broker side: send a batch of events, in one STOMP transaction when it can.

A batch goes out as one transaction with a receipt on its COMMIT. When the broker refuses
a frame (a topic the principal may not write, a header over its limit) or drops the
connection mid-batch, the batch is sent again one frame at a time on a fresh connection,
each with its own receipt, so that the culprit is found and the rest go out; per topic,
nothing after a refused event is sent in that pass.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from hcat_notify.broker.connection import BrokerConnection, error_for
from hcat_notify.broker.errors import BrokerFault, classify
from hcat_notify.broker.frames import PreparedSends
from hcat_notify.config import BrokerAddress, Settings
from hcat_notify.errors import (
    BrokerAuthError,
    BrokerError,
    BrokerRejectedError,
    BrokerUnavailableError,
)
from hcat_notify.model.topics import destination_for
from hcat_notify.store.records import OutboxEvent

__all__ = ["BatchSender", "SendResult"]

logger = logging.getLogger(__name__)

RefusalHandler = Callable[[OutboxEvent, str, bool], bool]
"""``(event, reason, topic_refused) -> parked``: records a refusal, says if it parked."""


@dataclass
class SendResult:
    """What became of a batch: sent (receipted) events, and the topics held back."""

    sent: list[OutboxEvent] = field(default_factory=list)
    held: dict[str, int] = field(default_factory=dict)  # topic -> first event not sent
    refused_topics: set[str] = field(default_factory=set)  # the broker refuses the topic
    broken_at: int | None = None  # the connection broke before this event: not tried


@dataclass(frozen=True)
class _Prepared:
    """A batch whose transaction was begun and sent ahead, not committed yet."""

    ids: list[int]  # its events, in order
    frames: PreparedSends
    connects: int  # the connection it was written on (the sender's connect count)
    errors_before: int = 0  # ERRORs on that connection not about it


def _refused_or_rolled_back(exc: BrokerError) -> bool:
    # ActiveMQ answers a COMMIT after a refused SEND with "COMMIT FAILED: Transaction
    # marked rollback only": nothing of the transaction was delivered. A SEND it cannot
    # even parse (a header over its limit) fails the transaction's COMMIT too.
    return isinstance(exc, BrokerAuthError | BrokerRejectedError) or (
        classify(str(exc)) is BrokerFault.ROLLED_BACK
    )


class BatchSender:
    """Owns the relay's broker connection and sends batches over it.

    Args:
        settings: the broker addresses and credentials.
        factory: builds the (unconnected) publisher connection.
        use_transactions: batch in STOMP transactions (else a receipt per event).
        on_refused: records a refusal by the broker of one event; says if it parked it.
    """

    def __init__(
        self,
        settings: Settings,
        factory: Callable[[Settings], BrokerConnection],
        *,
        use_transactions: bool,
        on_refused: RefusalHandler,
    ) -> None:
        self._settings = settings
        self._factory = factory
        self._use_transactions = use_transactions
        self._on_refused = on_refused
        self._connection: BrokerConnection | None = None
        self._prepared: _Prepared | None = None  # the next batch, sent ahead
        self.connects = 0

    def connected(self) -> BrokerConnection:
        """The connection, (re)connected if need be.

        One :class:`BrokerConnection` serves the sender's life, so that a reconnect after
        a lost connection starts with the broker after the lost one (the slave that is
        taking over, in a master/slave pair).

        Raises:
            BrokerCredentialsError: the broker refused the login.
            BrokerUnavailableError: no broker answered.
        """
        connection = self._connection
        if connection is not None and connection.is_connected:
            return connection
        if connection is None:
            connection = self._connection = self._factory(self._settings)
        address = connection.connect()
        self.connects += 1
        logger.info("relay connected broker=%s user=%s", address, self._settings.broker_user)
        return connection

    @property
    def address(self) -> BrokerAddress | None:
        """The broker of the current (or last) connection."""
        return None if self._connection is None else self._connection.address

    def close(self) -> None:
        """Drop the connection (the next send reconnects)."""
        if self._connection is not None:
            self._connection.close()

    def send_ahead(self, events: Sequence[OutboxEvent]) -> None:
        """Begin the transaction of the batch expected next and write its SENDs, while
        the broker stores the one before (called during that COMMIT's wait): the broker
        takes them in as soon as it has answered, instead of after our next round trip.

        Nothing of it is delivered before its COMMIT, which :meth:`send` writes only
        once the transaction before has its receipt, and only if it is given exactly
        these events (by id); otherwise the connection, and with it the open
        transaction, is dropped. Never raises: a failed write leaves nothing prepared.
        """
        connection = self._connection
        if connection is None or not self._use_transactions or not events:
            return
        ids = [event.event_id for event in events]
        frames = connection.prepare_sends(_messages(events))
        try:
            connection.begin(frames.transaction)
            connection.send_prepared(frames)
        except BrokerError as exc:  # the COMMIT being awaited fails the same way
            logger.debug("relay could not write the next batch ahead: %s", exc)
            return
        self._prepared = _Prepared(ids, frames, self.connects)

    def send(
        self,
        events: Sequence[OutboxEvent],
        *,
        meanwhile: Callable[[], None] | None = None,
        before_commit: Callable[[], bool] | None = None,
    ) -> SendResult:
        """Send ``events``; what has a receipt is in the result's ``sent``.

        Args:
            events: the batch, in event-id order.
            meanwhile: work to do while the broker stores a transaction, between writing
                its COMMIT and receiving the RECEIPT (not called without transactions);
                it must not raise.
            before_commit: called once the batch is written, just before its COMMIT
                (before its first SEND without transactions); False withdraws the batch:
                its transaction is aborted, nothing of it is sent, and the result's
                ``broken_at`` is its first event. It must not raise.

        Raises:
            BrokerError: the broker cannot be reached (nothing in this pass is known sent).
        """
        prepared, self._prepared = self._prepared, None
        if prepared is not None and not (
            prepared.connects == self.connects
            and self._connection is not None
            and self._connection.is_connected
        ):
            prepared = None  # its connection is gone, and the open transaction with it
        if prepared is not None and prepared.ids != [event.event_id for event in events]:
            # Not this batch (a topic refused or retried, a bucket lost): a fresh
            # connection drops the open transaction, and any ERROR about its frames.
            logger.debug("relay dropping a batch written ahead: the next batch differs")
            self.close()
            prepared = None
        connection = self.connected()
        if not self._use_transactions:
            if before_commit is not None and not before_commit():
                return SendResult(broken_at=events[0].event_id)
            return self._send_individually(connection, events)
        try:
            if not self._send_transaction(connection, events, prepared, meanwhile, before_commit):
                # Dropping the connection aborts the open transaction, and no ERROR
                # about the withdrawn frames can then be taken for one about the next.
                self.close()
                return SendResult(broken_at=events[0].event_id)
        except BrokerError as exc:
            if not (_refused_or_rolled_back(exc) or isinstance(exc, BrokerUnavailableError)):
                raise
            # The broker refused an event (or dropped the connection mid-batch, as it does
            # after a frame it cannot parse). Its ERROR may even arrive after the COMMIT's,
            # so go on with a fresh connection, where no stray ERROR can fail the next
            # waits, and find the event by sending one at a time.
            self.close()
            return self._send_individually(self.connected(), events)
        return SendResult(sent=list(events))

    def _send_transaction(
        self,
        connection: BrokerConnection,
        events: Sequence[OutboxEvent],
        prepared: _Prepared | None,
        meanwhile: Callable[[], None] | None,
        before_commit: Callable[[], bool] | None,
    ) -> bool:
        """Send and commit the batch; False when ``before_commit`` withdrew it."""
        if prepared is None:
            errors_before = len(connection.errors)
            transaction = connection.begin()
        else:  # begun and sent during the last COMMIT's wait
            errors_before = prepared.errors_before
            transaction = prepared.frames.transaction
        committing = False
        try:
            if prepared is None:
                connection.send_in_transaction(transaction, _messages(events))
            if before_commit is not None and not before_commit():
                return False  # the caller drops the connection, and the transaction with it
            committing = True
            errors_until = connection.commit(transaction, meanwhile=meanwhile)
        except BrokerError as exc:
            if not committing:
                connection.abort(transaction)
            # A refused SEND makes ActiveMQ roll the whole transaction back ("marked
            # rollback only"): nothing of it was delivered. Say why, most specific first.
            cause = error_for(connection.errors[errors_before:], "a batch was refused")
            if cause is not None and type(cause) is not BrokerError:
                raise cause from exc
            raise
        # The broker answers frames in order, so an ERROR for any SEND of this
        # transaction arrived before the COMMIT's receipt (later ones are about the
        # batch written ahead meanwhile): then the batch is not whole.
        cause = error_for(
            connection.errors[errors_before:errors_until], "broker reported errors in a batch"
        )
        if self._prepared is not None:  # written during this wait: its ERRORs come after
            self._prepared = dataclasses.replace(self._prepared, errors_before=errors_until)
        if cause is not None:
            raise cause
        return True

    def _send_individually(
        self, connection: BrokerConnection, events: Sequence[OutboxEvent]
    ) -> SendResult:
        result = SendResult()
        for event in events:
            if event.topic in result.held:
                continue  # keep per-topic order: nothing after a refused event
            try:
                connection.send(destination_for(event.topic), event.body, event.headers)
            except BrokerAuthError as exc:  # the topic is refused to our principal
                if not self._on_refused(event, str(exc), True):
                    result.held[event.topic] = event.event_id
                    result.refused_topics.add(event.topic)
                continue
            except BrokerRejectedError as exc:  # this very message cannot be accepted
                if not self._on_refused(event, str(exc), False):
                    result.held[event.topic] = event.event_id
                # The broker drops a connection whose frame it could not parse.
                self.close()
                connection = self.connected()
                continue
            except BrokerError:
                if result.sent:  # keep what has receipts; the caller retries the rest
                    result.broken_at = event.event_id
                    return result
                raise
            result.sent.append(event)
        return result


def _messages(events: Sequence[OutboxEvent]) -> Iterator[tuple[str, str, Mapping[str, str]]]:
    return ((destination_for(event.topic), event.body, event.headers) for event in events)
