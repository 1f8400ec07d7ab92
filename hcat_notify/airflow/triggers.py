"""Airflow triggers: a deferred sensor's wait, and an asset watcher's event stream.

Each trigger runs its blocking wait (:mod:`hcat_notify.airflow.waiting`,
:mod:`hcat_notify.airflow.stream`) in a thread of its own, so the triggerer's event loop
is never blocked. Not in the loop's default executor: its few threads (CPUs + 4) would
be taken by a handful of long waits, starving every other trigger. When the triggerer
cancels a trigger (task timeout, shutdown, reassignment) the wait is stopped and its
subscription closed. A trigger's serialized form holds names, the spec, the connection
id and the deadline — never a credential: the triggerer resolves the connection (or the
hcat-notify settings) when the trigger runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, TypeVar

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from hcat_notify.airflow.hooks import DEFAULT_CONN_ID, HcatNotifyHook
from hcat_notify.airflow.stream import EventStream, parse_event_types
from hcat_notify.airflow.waiting import Condition, Waiter
from hcat_notify.errors import HcatNotifyError
from hcat_notify.model.events import EventType
from hcat_notify.model.names import TableName

__all__ = [
    "STATUS_DONE",
    "STATUS_ERROR",
    "STATUS_TIMEOUT",
    "HcatEventTrigger",
    "HcatMarkSetDoneTrigger",
    "HcatPartitionTrigger",
    "in_thread",
]

logger = logging.getLogger(__name__)

STATUS_DONE = "done"
STATUS_TIMEOUT = "timeout"
STATUS_ERROR = "error"

T = TypeVar("T")


async def in_thread(call: Callable[[], T], name: str) -> T:
    """The result of a blocking ``call`` run in a new daemon thread.

    Cancelling the await does not stop the call: the caller stops it (``cancel()``).
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():  # cancelled meanwhile
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def target() -> None:
        try:
            result = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            outcome: tuple[T | None, BaseException | None] = (None, exc)
        else:
            outcome = (result, None)
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=target, name=name, daemon=True).start()
    return await future


class _WaitTrigger(BaseTrigger):
    """Fires once: when the condition holds, at the deadline, or on a permanent error."""

    condition: Condition

    def __init__(
        self,
        *,
        table: str,
        spec: Mapping[str, Any],
        deadline: float,
        conn_id: str | None = DEFAULT_CONN_ID,
        subscriber: str | None = None,
        min_generation: int | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow: unannotated
        self.table = table
        self.spec = {str(key): value for key, value in spec.items()}
        self.deadline = deadline
        self.conn_id = conn_id
        self.subscriber = subscriber
        self.min_generation = min_generation

    def serialize(self) -> tuple[str, dict[str, Any]]:
        kwargs: dict[str, Any] = {
            "table": self.table,
            "spec": dict(self.spec),
            "deadline": self.deadline,
            "conn_id": self.conn_id,
            "subscriber": self.subscriber,
        }
        if self.min_generation is not None:
            kwargs["min_generation"] = self.min_generation
        return f"{type(self).__module__}.{type(self).__qualname__}", kwargs

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            settings = await HcatNotifyHook(self.conn_id).aget_settings()
            waiter = Waiter(
                settings,
                self.condition,
                self.table,
                self.spec,
                deadline=self.deadline,
                subscriber=self.subscriber,
                min_generation=self.min_generation,
            )
        except HcatNotifyError as exc:
            yield self._event(STATUS_ERROR, message=str(exc))
            return
        try:
            payload = await in_thread(waiter.wait, f"hcat-wait-{self.table}")
        except asyncio.CancelledError:
            waiter.cancel()
            raise
        except HcatNotifyError as exc:
            yield self._event(STATUS_ERROR, message=str(exc))
            return
        if payload is None:
            yield self._event(
                STATUS_TIMEOUT, message=f"no {self.condition.value} before the deadline"
            )
            return
        logger.info("hcat trigger fired table=%s payload=%s", self.table, payload)
        yield self._event(STATUS_DONE, **payload)

    def _event(self, status: str, **fields: Any) -> TriggerEvent:
        return TriggerEvent({"status": status, "table": self.table, **fields})


class HcatMarkSetDoneTrigger(_WaitTrigger):
    """Fires when a MARK_SET_DONE covers ``spec`` of ``table`` (retained or live).

    Args:
        table: ``db.table``.
        spec: the (partial) spec to be covered, raw values.
        deadline: wall-clock time (epoch seconds) at which it fires ``timeout``.
        conn_id: the ``hcat_notify`` connection (None: the hcat-notify settings alone).
        subscriber: a durable subscriber name for its consumer (None: none needed).
        min_generation: a done counts only at this set generation or a later one
            (docs/completeness.md); a SET_LATE or SET_REOPENED never fires it.
    """

    condition = Condition.DONE


class HcatPartitionTrigger(_WaitTrigger):
    """Fires when a partition under ``spec`` of ``table`` is registered (already, or
    announced by ADD_PARTITION). Arguments as :class:`HcatMarkSetDoneTrigger`."""

    condition = Condition.PARTITION


class HcatEventTrigger(BaseEventTrigger):
    """An asset watcher's trigger: one event per notification of ``tables`` whose type is
    in ``event_types``, with the notification's facts (table, spec, event id, location;
    for a verdict on a set its generation, reason or missing parts; for a SET_RULE the
    rule) as the payload (the asset event's ``extra``).

    Args:
        tables: ``db.table`` names.
        subscriber: the durable subscriber name: the catalog keeps its watermarks, so a
            triggerer restart neither loses nor repeats an event. One name per watcher.
        event_types: event type names (default: ``["MARK_SET_DONE"]``); the filter on
            kinds: ``["SET_LATE"]`` for a watcher of late sets, ``["MARK_SET_DONE",
            "SET_REOPENED"]`` to re-run on a set's new generation or reopening.
        conn_id: the ``hcat_notify`` connection (None: the hcat-notify settings alone).

    Raises:
        InvalidInputError: a malformed table name, subscriber or event type.
    """

    def __init__(
        self,
        *,
        tables: Sequence[str],
        subscriber: str,
        event_types: Sequence[str] = (EventType.MARK_SET_DONE.value,),
        conn_id: str | None = DEFAULT_CONN_ID,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow: unannotated
        self.tables = [str(TableName.parse(table)) for table in tables]
        self.event_types = sorted(kind.value for kind in parse_event_types(event_types))
        self.subscriber = subscriber
        self.conn_id = conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "tables": list(self.tables),
                "subscriber": self.subscriber,
                "event_types": list(self.event_types),
                "conn_id": self.conn_id,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        settings = await HcatNotifyHook(self.conn_id).aget_settings()
        stream = EventStream(settings, self.tables, self.event_types, self.subscriber)
        try:
            while True:
                payload = await in_thread(stream.next, f"hcat-events-{self.subscriber}")
                if payload is None:
                    return
                yield TriggerEvent(payload)
        finally:
            stream.stop()
            # Wait for the worker thread, then record what was handled and release the
            # subscriber name, off the event loop.
            await asyncio.shield(in_thread(stream.close, f"hcat-close-{self.subscriber}"))
