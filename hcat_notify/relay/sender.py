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
from dataclasses import dataclass

from hcat_notify.broker.connection import BrokerConnection, PendingCommit
from hcat_notify.broker.errors import BrokerFault, classify, error_for
from hcat_notify.broker.frames import PreparedSends
from hcat_notify.config import BrokerAddress, Settings
from hcat_notify.errors import (
    BrokerAuthError,
    BrokerError,
    BrokerRejectedError,
    BrokerUnavailableError,
)
from hcat_notify.model.topics import destination_for
from hcat_notify.relay.pipeline import SendResult
from hcat_notify.store.records import OutboxEvent

__all__ = ["BatchSender"]

logger = logging.getLogger(__name__)

RefusalHandler = Callable[[OutboxEvent, str, bool], bool]
"""``(event, reason, topic_refused) -> parked``: records a refusal, says if it parked."""


@dataclass(frozen=True)
class _Prepared:
    """A batch whose transaction was begun and sent ahead, not committed yet."""

    ids: list[int]  # its events, in order
    frames: PreparedSends
    connects: int  # the connection it was written on (the sender's connect count)
    errors_before: int = 0  # ERRORs on that connection not about it


@dataclass
class _Batch:
    """The batch between :meth:`BatchSender.write` and :meth:`BatchSender.settle`."""

    events: list[OutboxEvent]
    connection: BrokerConnection
    transaction: str | None = None
    errors_before: int = 0  # ERRORs on the connection before its first frame
    pending: PendingCommit | None = None  # its COMMIT, written
    failure: BrokerError | None = None  # what went wrong, found out by settle
    result: SendResult | None = None  # sent without transactions


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
        self._batch: _Batch | None = None  # the batch between write and settle
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

    def write_ahead(self, events: Sequence[OutboxEvent]) -> None:
        """Begin the transaction of the batch expected next and write its SENDs, while
        the broker stores the one before (between that batch's :meth:`commit` and
        :meth:`settle`): the broker takes them in as soon as it has answered, instead of
        after our next round trip.

        Nothing of it is delivered before its COMMIT, which is written only once the
        transaction before has its receipt, and only if the next :meth:`write` is given
        exactly these events (by id); otherwise the connection, and with it the open
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

    def send(self, events: Sequence[OutboxEvent]) -> SendResult:
        """Send ``events`` at once: :meth:`write`, :meth:`commit`, :meth:`settle`."""
        if self.write(events):
            self.commit()
        return self.settle()

    def write(self, events: Sequence[OutboxEvent]) -> bool:
        """Write the batch ``events`` (in event-id order), not committed yet: begin its
        transaction and write its SENDs, unless :meth:`write_ahead` wrote exactly these.

        Returns:
            Whether the batch waits for its :meth:`commit` (or :meth:`withdraw`); False
            when writing failed: :meth:`settle` then finds out what can be sent.

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
        batch = self._batch = _Batch(list(events), connection)
        if not self._use_transactions:
            return True
        if prepared is not None:  # begun and sent during the last COMMIT's wait
            batch.errors_before = prepared.errors_before
            batch.transaction = prepared.frames.transaction
            return True
        batch.errors_before = len(connection.errors)
        try:
            batch.transaction = connection.begin()
            connection.send_in_transaction(batch.transaction, _messages(events))
        except BrokerError as exc:
            if batch.transaction is not None:
                connection.abort(batch.transaction)
            batch.failure = self._cause(batch, exc)
            return False
        return True

    def withdraw(self) -> SendResult:
        """Send nothing of the written batch: its transaction is aborted (the connection
        dropped, so that no ERROR about its frames can be taken for one about the next)
        and the result's ``broken_at`` is its first event."""
        batch = self._current()
        if self._use_transactions:
            self.close()
        return SendResult(broken_at=batch.events[0].event_id)

    def commit(self) -> bool:
        """Write the COMMIT of the written batch (without transactions: send its events
        one by one, each with a receipt); :meth:`settle` waits for the outcome.

        Returns:
            Whether the COMMIT went out (the broker is storing the batch meanwhile).
        """
        batch = self._current()
        if not self._use_transactions:
            batch.result = self._send_individually(batch.connection, batch.events)
            return False
        if batch.transaction is None or batch.failure is not None:
            return False
        try:
            batch.pending = batch.connection.write_commit(batch.transaction)
        except BrokerError as exc:
            batch.failure = self._cause(batch, exc)
            return False
        return True

    def settle(self) -> SendResult:
        """The outcome of the committed batch: what has a receipt is in ``sent``.

        A batch the broker refused (or dropped the connection in the middle of) is sent
        again one event at a time on a fresh connection, to find the culprit.

        Raises:
            BrokerError: the broker cannot be reached (nothing in this pass is known sent).
        """
        batch = self._current()
        self._batch = None
        if batch.result is not None:
            return batch.result
        if batch.failure is None and batch.pending is not None:
            try:
                errors_until = batch.connection.await_commit(batch.pending)
            except BrokerError as exc:
                batch.failure = self._cause(batch, exc)
            else:
                # The broker answers frames in order, so an ERROR for any SEND of this
                # transaction arrived before the COMMIT's receipt (later ones are about
                # the batch written ahead meanwhile): then the batch is not whole.
                batch.failure = error_for(
                    batch.connection.errors[batch.errors_before : errors_until],
                    "broker reported errors in a batch",
                )
                if self._prepared is not None:  # written during this wait: ERRORs come after
                    self._prepared = dataclasses.replace(self._prepared, errors_before=errors_until)
        failure = batch.failure
        if failure is None:
            return SendResult(sent=list(batch.events))
        if not (_refused_or_rolled_back(failure) or isinstance(failure, BrokerUnavailableError)):
            raise failure
        # The broker refused an event (or dropped the connection mid-batch, as it does
        # after a frame it cannot parse). Its ERROR may even arrive after the COMMIT's,
        # so go on with a fresh connection, where no stray ERROR can fail the next
        # waits, and find the event by sending one at a time.
        self.close()
        return self._send_individually(self.connected(), batch.events)

    def _current(self) -> _Batch:
        if self._batch is None:
            raise RuntimeError("no batch written")  # a bug in the caller's order of steps
        return self._batch

    @staticmethod
    def _cause(batch: _Batch, exc: BrokerError) -> BrokerError:
        """Why the transaction failed, most specific first: a refused SEND makes
        ActiveMQ roll the whole transaction back ("marked rollback only")."""
        cause = error_for(batch.connection.errors[batch.errors_before :], "a batch was refused")
        if cause is not None and type(cause) is not BrokerError:
            cause.__cause__ = exc
            return cause
        return exc

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
