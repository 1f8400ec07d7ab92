"""Airflow sensors that wait for hcat-notify notifications instead of polling.

Both check the catalog (or the HTTP API) once, at once. If the condition does not hold
yet, a deferrable sensor defers to a trigger and frees its worker slot; a non-deferrable
one subscribes in the worker and waits for the notification — no poke loop either way.
Bad input (an unknown table, a key that is not a partition key) fails the task at once
and is not retried; the sensor's ``timeout`` fails it with ``AirflowSensorTimeout``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, ClassVar

from airflow.sdk import BaseSensorOperator, Context
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
)

from hcat_notify.airflow.hooks import DEFAULT_CONN_ID, HcatNotifyHook
from hcat_notify.airflow.triggers import (
    STATUS_DONE,
    STATUS_TIMEOUT,
    HcatMarkSetDoneTrigger,
    HcatPartitionTrigger,
)
from hcat_notify.airflow.waiting import (
    Condition,
    Waiter,
    check,
    missing_lines,
    open_reader,
    resolve_target,
)
from hcat_notify.errors import (
    BrokerAuthError,
    ConfigError,
    HcatNotifyError,
    InvalidInputError,
    TableNotFoundError,
)

__all__ = ["HcatMarkSetDoneSensor", "HcatPartitionSensor"]


# Mistakes no retry can fix: the task fails at once, without its retries.
_PERMANENT = (InvalidInputError, TableNotFoundError, ConfigError, BrokerAuthError)


class _HcatSensor(BaseSensorOperator):
    condition: ClassVar[Condition]
    trigger_class: ClassVar[type[HcatMarkSetDoneTrigger] | type[HcatPartitionTrigger]]
    template_fields = ("table", "spec")
    ui_color = "#d9eef7"

    def __init__(
        self,
        *,
        table: str,
        spec: Mapping[str, Any],
        deferrable: bool = True,
        subscriber: str | None = None,
        conn_id: str | None = DEFAULT_CONN_ID,
        min_generation: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.spec = dict(spec)
        self.deferrable = deferrable
        self.subscriber = subscriber
        self.conn_id = conn_id
        if min_generation is not None and (
            isinstance(min_generation, bool)
            or not isinstance(min_generation, int)
            or min_generation < 1
        ):
            raise AirflowFailException(
                f"min_generation must be a whole number of at least 1, got {min_generation!r}"
            )
        self.min_generation = min_generation

    def execute(self, context: Context) -> Any:
        settings = self._fail_fast(HcatNotifyHook(self.conn_id).get_settings)
        deadline = time.time() + self.timeout
        found = self._fail_fast(lambda: self._check_once(settings))
        if found is not None:
            self.log.info("%s already holds: %s", self.condition.value, found)
            return found
        if self.deferrable:
            self.log.info(
                "deferring until %s of %s %s (timeout %ss)",
                self.condition.value,
                self.table,
                self.spec,
                self.timeout,
            )
            self.defer(
                trigger=self.trigger_class(
                    table=self.table,
                    spec=self.spec,
                    deadline=deadline,
                    conn_id=self.conn_id,
                    subscriber=self.subscriber,
                    **self._trigger_extra(),
                ),
                method_name="execute_complete",
                # The trigger fires "timeout" at the deadline itself; Airflow's own
                # deferral timeout is the backstop (a trigger that never ran).
                timeout=timedelta(seconds=self.timeout + 60),
            )
        waiter = Waiter(
            settings,
            self.condition,
            self.table,
            self.spec,
            deadline=deadline,
            subscriber=self.subscriber,
            min_generation=self.min_generation,
        )
        self.log.info(
            "waiting in the worker for %s of %s %s", self.condition.value, self.table, self.spec
        )
        return self._finish(self._fail_fast(waiter.wait))

    def _check_once(self, settings: Any) -> dict[str, Any] | None:
        reader = open_reader(settings, durable=self.subscriber is not None)
        try:
            target = resolve_target(
                reader, self.condition, self.table, self.spec, self.min_generation
            )
            return check(reader, target)
        finally:
            reader.close()

    def _fail_fast(self, call: Any) -> Any:
        try:
            return call()
        except _PERMANENT as exc:
            raise AirflowFailException(f"{self.task_id}: {exc}") from exc

    def execute_complete(self, context: Context, event: Mapping[str, Any] | None = None) -> Any:
        """Resumes the task when its trigger fired."""
        if event is None:
            raise AirflowException(f"{self.task_id}: the trigger fired without an event")
        status = event.get("status")
        if status == STATUS_DONE:
            self.log.info("%s holds: %s", self.condition.value, event)
            return {key: value for key, value in event.items() if key != "status"}
        if status == STATUS_TIMEOUT:
            return self._finish(None)
        raise AirflowFailException(f"{self.task_id}: {event.get('message', event)}")

    def _trigger_extra(self) -> dict[str, Any]:
        if self.min_generation is None:
            return {}
        return {"min_generation": self.min_generation}

    def _log_missing(self) -> None:
        """On a timeout of a wait for a done: what the table's completeness rule still
        misses, per set (nothing for a table without a rule). A failure to read it is
        logged, never raised: the timeout is what the task reports."""
        if self.condition is not Condition.DONE:
            return
        try:
            settings = HcatNotifyHook(self.conn_id).get_settings()
            reader = open_reader(settings)
            try:
                lines = missing_lines(reader, self.table, self.spec)
            finally:
                reader.close()
        except (HcatNotifyError, OSError) as exc:
            self.log.info("could not read what %s %s misses: %s", self.table, self.spec, exc)
            return
        for line in lines:
            self.log.warning("not done: %s", line)

    def _finish(self, found: dict[str, Any] | None) -> dict[str, Any]:
        if found is not None:
            return found
        self._log_missing()
        wanted = "" if self.min_generation is None else f" at generation >= {self.min_generation}"
        message = (
            f"Sensor has timed out: no {self.condition.value} of {self.table} "
            f"{self.spec}{wanted} within {self.timeout} s"
        )
        if self.soft_fail:
            raise AirflowSkipException(message)
        raise AirflowSensorTimeout(message)


class HcatMarkSetDoneSensor(_HcatSensor):
    """Succeeds once a MARK_SET_DONE covers ``spec`` of ``table``.

    A done for a broader spec covers a narrower one: ``datestamp=20110228`` covers
    ``{"datestamp": "20110228", "region": "us"}``. The task's return value (XCom) is the
    done: table, spec, event id (and its generation and reason). On a timeout, when the
    table has a completeness rule, the sensor logs each set's missing parts.

    Args:
        table: ``db.table`` (templated).
        spec: the (partial) spec, raw values (templated), e.g.
            ``{"datestamp": "{{ ds_nodash }}"}``.
        deferrable: defer to :class:`HcatMarkSetDoneTrigger` and free the worker slot
            (default); False waits in the worker, subscribed.
        subscriber: a durable subscriber name for the consumer (None: none needed).
        conn_id: the ``hcat_notify`` connection (None: the hcat-notify settings alone).
        min_generation: only a done of this set generation or a later one counts (a set
            that changed after its done is done again at the next generation;
            docs/completeness.md). None: any done.
        **kwargs: :class:`~airflow.sdk.BaseSensorOperator`'s (``timeout``, ``soft_fail``,
            ...; ``poke_interval`` and ``mode`` have no effect: nothing polls).
    """

    condition = Condition.DONE
    trigger_class = HcatMarkSetDoneTrigger


class HcatPartitionSensor(_HcatSensor):
    """Succeeds once a partition under ``spec`` of ``table`` is registered (already in
    the registry, or announced by ADD_PARTITION). Arguments as
    :class:`HcatMarkSetDoneSensor`; the return value carries the partition's location."""

    condition = Condition.PARTITION
    trigger_class = HcatPartitionTrigger
