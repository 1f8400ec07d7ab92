"""``catalog.sets``: completeness rules and the sets they judge (a thin view over
:mod:`hcat_notify.store.set_rules`, :mod:`hcat_notify.store.completeness` and
:mod:`hcat_notify.store.set_reports`; docs/completeness.md)."""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import select

from hcat_notify.errors import InvalidInputError, InvalidRuleError
from hcat_notify.model.completeness import SetRule
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store import completeness, set_reports, set_rules, set_timed
from hcat_notify.store.models import SetRuleRow
from hcat_notify.store.records import as_table_name, info_of
from hcat_notify.store.set_figures import SetFigures, set_figures
from hcat_notify.store.set_records import DuePass, RuleRecord, SetReport
from hcat_notify.store.tx import Tx

__all__ = ["Sets"]

logger = logging.getLogger(__name__)

SpecLike = PartitionSpec | Mapping[str, str | None]

MAX_DUE_LIMIT = 10_000


class Sets:
    """The completeness rules of one catalog's tables and their sets (``catalog.sets``).

    Args:
        transaction: opens a :class:`Tx` of the catalog (``write=True`` for writers).
    """

    def __init__(self, transaction: Callable[..., AbstractContextManager[Tx]]) -> None:
        self._transaction = transaction

    def expect(
        self,
        table: TableName | str,
        rule: SetRule | Mapping[str, Any],
        *,
        principal: str | None = None,
    ) -> int:
        """Make ``rule`` the table's completeness rule (a new version, announced with a
        ``SET_RULE``), and settle the sets not done yet under it, in one transaction.

        Args:
            table: the table.
            rule: a :class:`SetRule` (:func:`hcat_notify.model.completeness.parse_rule`)
                or its stored form (:meth:`SetRule.as_json`); checked against the
                table's keys.
            principal: who changes it (recorded; the HTTP API lets only writers).

        Returns:
            The rule's version.

        Raises:
            TableNotFoundError: no such table.
            InvalidRuleError: the rule does not fit the table (nothing is written).
        """
        name = as_table_name(table)
        with self._transaction(write=True) as tx:
            row = tx.table_row(name, lock=True)
            keys = info_of(row).partition_keys
            stored = rule.as_json() if isinstance(rule, SetRule) else rule
            checked = SetRule.from_json(stored, keys)
            version = set_rules.write_rule(tx, row, checked, principal=principal)
            completeness.reevaluate(tx, row)
        logger.info("rule of %s is version %d: %s", name, version, checked.describe())
        return version

    def remove(self, table: TableName | str, *, principal: str | None = None) -> int:
        """Remove the table's rule (a new version, announced); the version.

        Raises:
            TableNotFoundError: no such table.
            InvalidRuleError: the table has no rule (nothing is written).
        """
        name = as_table_name(table)
        with self._transaction(write=True) as tx:
            row = tx.table_row(name, lock=True)
            if row.rule_version is None:
                raise InvalidRuleError(f"table {name} has no completeness rule to remove")
            version = set_rules.write_rule(tx, row, None, principal=principal)
        logger.info("rule of %s removed (version %d)", name, version)
        return version

    def rule(self, table: TableName | str) -> RuleRecord | None:
        """The table's rule in force, or None.

        Raises:
            TableNotFoundError: no such table.
        """
        name = as_table_name(table)
        with self._transaction() as tx:
            row = tx.table_row(name)
            if row.rule_version is None:
                return None
            return set_rules.rule_record(tx, row, row.rule_version)

    def history(self, table: TableName | str) -> builtins.list[RuleRecord]:
        """Every version of the table's rule, oldest first (removals have no rule)."""
        name = as_table_name(table)
        with self._transaction() as tx:
            row = tx.table_row(name)
            versions = tx.session.scalars(
                select(SetRuleRow.version)
                .where(SetRuleRow.table_id == row.id)
                .order_by(SetRuleRow.version)
            ).all()
            found = [set_rules.rule_record(tx, row, version) for version in versions]
            return [record for record in found if record is not None]

    def state(self, table: TableName | str, spec: SpecLike) -> SetReport:
        """Where the set ``spec`` (exactly the rule's set keys) stands: expected, present
        and missing parts, its done or its deadline.

        Raises:
            TableNotFoundError: no such table.
            InvalidInputError: the table has no rule, or ``spec`` is not one of its sets.
        """
        name = as_table_name(table)
        with self._transaction() as tx:
            return set_reports.set_report(tx, tx.table_row(name), spec)

    def list(
        self, table: TableName | str, spec: SpecLike | None = None, *, limit: int = 100
    ) -> builtins.list[SetReport]:
        """The table's known sets, newest first, those ``spec`` covers, at most ``limit``
        (1 to 1,000)."""
        name = as_table_name(table)
        with self._transaction() as tx:
            return set_reports.list_sets(tx, tx.table_row(name), spec, limit=limit)

    def evaluate_due(
        self,
        member: str,
        buckets: Mapping[int, int],
        *,
        now: float | None = None,
        limit: int = 1000,
    ) -> DuePass:
        """The timed pass of the relay member that owns ``buckets`` (bucket: its epoch):
        dones after quiet periods and the deadlines' verdicts of the sets due, in one
        transaction fenced by the buckets' epochs (a bucket the member lost gets nothing).

        Args:
            member: the relay member's id.
            buckets: the buckets it owns, each with the epoch of its ownership.
            now: seconds since the epoch to judge by (default: the database's clock).
            limit: at most this many sets (``DuePass.more`` says whether more were due).
        """
        if not 1 <= limit <= MAX_DUE_LIMIT:
            raise InvalidInputError(f"limit must be between 1 and {MAX_DUE_LIMIT}")
        with self._transaction() as tx:  # usually nothing is due: no writer's lock
            idle = set_timed.nothing_due(tx, member, buckets, now=now)
        if idle is not None:
            return idle
        with self._transaction(write=True) as tx:
            return set_timed.evaluate_due(tx, member, buckets, now=now, limit=limit)

    def figures(self, latency_bounds: Sequence[float] = ()) -> SetFigures:
        """Sets late, parts missing and done latencies (counted at ``latency_bounds``)
        of the tables with a rule (for ``/metrics``)."""
        with self._transaction() as tx:
            return set_figures(tx, latency_bounds)
