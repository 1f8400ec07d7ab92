"""``catalog.dones``: MARK_SET_DONE messages, recorded and retained (a thin view over
:mod:`hcat_notify.store.retention` and the fast path, :mod:`hcat_notify.store.fast_path`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime

from hcat_notify.errors import HcatNotifyError, InvalidInputError, TableNotFoundError
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import MAX_COVERING_KEYS, PartitionSpec
from hcat_notify.store import completeness, retention, sweep
from hcat_notify.store import tables as table_ops
from hcat_notify.store.fast_path import FastPath
from hcat_notify.store.records import RetainedDone, as_table_name
from hcat_notify.store.tx import Tx

__all__ = ["Dones"]

logger = logging.getLogger(__name__)

SpecLike = PartitionSpec | Mapping[str, str | None]
_BATCH_SPECS = 200  # specs a covering lookup of many takes per statement


def _lookup_spec(spec: SpecLike) -> PartitionSpec | None:
    """``spec`` for the fast path, or None (the session path raises what is wrong)."""
    try:
        given = spec if isinstance(spec, PartitionSpec) else PartitionSpec.from_mapping(spec)
    except HcatNotifyError:
        return None
    return given if len(given) <= MAX_COVERING_KEYS else None


class Dones:
    """The dones of one catalog (``catalog.dones``).

    Args:
        transaction: opens a :class:`Tx` of the catalog (``write=True`` for writers).
        fast: the catalog's fast path.
        clock: the catalog's clock.
        buckets: the catalog's bucket count (fixed when it was created).
        checkpoint: on SQLite, checkpoints the catalog's log between two batches of a
            sweep (:func:`hcat_notify.store.engine.checkpoint_passive`); None on
            PostgreSQL.
    """

    def __init__(
        self,
        transaction: Callable[..., AbstractContextManager[Tx]],
        fast: FastPath,
        clock: Callable[[], datetime],
        buckets: Callable[[], int],
        checkpoint: Callable[[], None] | None = None,
    ) -> None:
        self._transaction = transaction
        self._fast = fast
        self._clock = clock
        self._buckets = buckets
        self._checkpoint = checkpoint

    def mark(self, table: TableName | str, spec: SpecLike) -> int:
        """Record a MARK_SET_DONE: retention row and outbox event in one transaction
        (:meth:`hcat_notify.store.Catalog.mark_set_done`); the event id."""
        name = as_table_name(table)
        given = _lookup_spec(spec)
        fast: tuple[int, PartitionSpec] | None = None
        if given is not None:
            buckets = self._buckets()
            try:
                fast = self._fast.mark_set_done(name, given, self._clock(), buckets)
            except TableNotFoundError:
                self._why_absent(name)
                raise
        if fast is not None:
            event_id, canonical = fast
        else:  # the session path says what is wrong with the spec (after the table), and
            # keeps the set's state of a table with a completeness rule
            with self._transaction(write=True) as tx:
                row = tx.table_row(name)
                info = table_ops.info_of(row)
                event_id, canonical = completeness.mark_set_done(tx, row, info, spec)
        logger.info("mark-set-done %s %s as event %d", name, canonical, event_id)
        return event_id

    def retained(
        self,
        tables: Sequence[TableName | str],
        *,
        after_event_id: int = 0,
        limit: int | None = None,
    ) -> list[RetainedDone]:
        """Unexpired MARK_SET_DONE messages of the tables, in event-id order.

        Raises:
            TableNotFoundError: a table is not registered.
        """
        names = [as_table_name(table) for table in tables]
        with self._transaction() as tx:
            by_id = {tx.table_row(name).id: name for name in names}
            return retention.retained_dones(tx, by_id, after_event_id=after_event_id, limit=limit)

    def find_covering(
        self, table: TableName | str, spec: SpecLike, *, min_generation: int | None = None
    ) -> RetainedDone | None:
        """The oldest unexpired MARK_SET_DONE that covers ``spec`` (of set generation
        ``min_generation`` or later, if given), or None
        (:meth:`hcat_notify.store.Catalog.find_covering_done`)."""
        name = as_table_name(table)
        given = _lookup_spec(spec)
        if min_generation is not None:
            if isinstance(min_generation, bool) or not isinstance(min_generation, int):
                raise InvalidInputError(f"minimum generation {min_generation!r} is not a number")
            if min_generation < 1:
                raise InvalidInputError(
                    f"minimum generation must be at least 1, got {min_generation}"
                )
        if given is not None:
            try:
                return self._fast.covering_done(
                    name, given, self._clock(), min_generation=min_generation or 1
                )
            except TableNotFoundError:
                self._why_absent(name)
                raise
        # A spec that cannot be looked up: the session path raises what is wrong, and
        # the table's absence first, as it always has.
        with self._transaction() as tx:
            row = tx.table_row(name)
            wanted = table_ops.info_of(row).covering_spec(spec)
            return retention.find_covering_done(
                tx, row, name, wanted, min_generation=min_generation or 1
            )

    def find_covering_each(
        self, table: TableName | str, wanted: Sequence[tuple[PartitionSpec, int | None]]
    ) -> list[RetainedDone | HcatNotifyError | None]:
        """:meth:`find_covering` of each (spec, minimum generation) of one table, in one
        read: per item the done, None, or the error its lookup alone would raise
        (:meth:`hcat_notify.store.Catalog.find_covering_dones`).

        Raises:
            TableNotFoundError: no such table.
        """
        name = as_table_name(table)
        found: list[RetainedDone | HcatNotifyError | None] = []
        for start in range(0, len(wanted), _BATCH_SPECS):
            chunk = wanted[start : start + _BATCH_SPECS]
            fast = [
                (spec, minimum or 1)
                for spec, minimum in chunk
                if len(spec) <= MAX_COVERING_KEYS and (minimum is None or minimum >= 1)
            ]
            try:
                answers = iter(self._fast.covering_dones(name, fast, self._clock()))
            except TableNotFoundError:
                self._why_absent(name)
                raise
            for spec, minimum in chunk:
                if len(spec) <= MAX_COVERING_KEYS and (minimum is None or minimum >= 1):
                    found.append(next(answers))
                    continue
                try:  # what the lookup alone says is wrong
                    found.append(self.find_covering(name, spec, min_generation=minimum))
                except HcatNotifyError as exc:
                    found.append(exc)
        return found

    def sweep_expired(
        self,
        *,
        batch_size: int = 1000,
        max_duty: float | None = None,
        max_batches: int | None = None,
        progress: Callable[[int], None] | None = None,
        timer: Callable[[], float] = time.monotonic,
    ) -> int:
        """Delete expired retention rows in batches of about
        :data:`~hcat_notify.store.sweep.SWEEP_BATCH_SECONDS` each and at most
        ``batch_size`` rows, one transaction each, busy at most ``max_duty`` of the
        time (None: :data:`~hcat_notify.store.sweep.SWEEP_MAX_DUTY`); return how
        many (:func:`hcat_notify.store.sweep.sweep_expired` describes the arguments).

        Raises:
            InvalidInputError: ``batch_size`` is below 1, or ``max_duty`` not above 0
                and at most 1.
        """
        if self._checkpoint is None:
            batch = sweep.session_batch(self._transaction, timer)
        else:
            batch = sweep.driver_batch(self._fast.write, timer)
        return sweep.sweep_expired(
            batch,
            self._clock,
            self._checkpoint,
            batch_size=batch_size,
            max_duty=sweep.SWEEP_MAX_DUTY if max_duty is None else max_duty,
            max_batches=max_batches,
            progress=progress,
            timer=timer,
        )

    def _why_absent(self, name: TableName) -> None:
        """Raise :class:`TableDroppedError` when ``name`` was dropped (the fast path only
        sees that no table of that name exists)."""
        with self._transaction() as tx:
            tx.table_row(name)
