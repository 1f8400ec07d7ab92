"""Completeness rules in the catalog: every version of a table's rule, the current one
(its version is on the table row), and the ``SET_RULE`` event that announces a change
(docs/completeness.md)."""

from __future__ import annotations

import copy
import functools
import json

from sqlalchemy import func, select, update

from hcat_notify.model.completeness import SetRule
from hcat_notify.model.names import TableName
from hcat_notify.model.set_events import build_set_rule
from hcat_notify.store.models import SetRuleRow, TableRow
from hcat_notify.store.outbox import add_outbox_rows
from hcat_notify.store.records import info_of
from hcat_notify.store.set_records import RuleRecord
from hcat_notify.store.tx import Tx

__all__ = ["current_rule", "rule_record", "write_rule"]


def _record(name: TableName, keys: tuple[str, ...], row: SetRuleRow) -> RuleRecord:
    return RuleRecord(
        table=name,
        version=row.version,
        rule=None if row.rule is None else SetRule.from_json(row.rule, keys),
        principal=row.principal,
        created_at=row.created_at,
    )


def rule_record(tx: Tx, row: TableRow, version: int | None = None) -> RuleRecord | None:
    """The table's rule at ``version`` (default: its newest version, even a removal), or
    None when it never had one."""
    info = info_of(row)
    query = select(SetRuleRow).where(SetRuleRow.table_id == row.id)
    if version is not None:
        query = query.where(SetRuleRow.version == version)
    found = tx.session.scalars(query.order_by(SetRuleRow.version.desc()).limit(1)).first()
    return None if found is None else _record(info.name, info.partition_keys, found)


@functools.lru_cache(maxsize=256)
def _parsed(stored: str, keys: tuple[str, ...]) -> SetRule:
    """The rule whose stored form is the JSON text ``stored`` (the same object for the
    same text and keys: found again by the text, on every write to a table with a rule)."""
    return SetRule.from_json(json.loads(stored), keys)


_RECENT: dict[tuple[int, int, tuple[str, ...]], tuple[dict[str, object], SetRule]] = {}
"""The rules :func:`current_rule` parsed last from a decoded stored form (PostgreSQL),
by (table id, version, keys), with that form: found again by comparing it (a dict
comparison, no serialisation)."""


def current_rule(row: TableRow) -> tuple[SetRule, int] | None:
    """The table's rule in force and its version, or None (read with the table row)."""
    stored, version = row.set_rule, row.rule_version
    if version is None or stored is None:
        return None
    if isinstance(stored, str):  # SQLite: the stored text (models.StoredRule)
        return _parsed(stored, tuple(row.partition_keys)), version
    keys = tuple(row.partition_keys)
    key = (row.id, version, keys)
    known = _RECENT.get(key)
    if known is not None and known[0] == stored:
        return known[1], version
    rule = _parsed(json.dumps(stored, sort_keys=True), keys)
    if len(_RECENT) >= 256:
        _RECENT.clear()
    _RECENT[key] = (copy.deepcopy(stored), rule)
    return rule, version


def write_rule(tx: Tx, row: TableRow, rule: SetRule | None, *, principal: str | None) -> int:
    """Record ``rule`` (None: remove the rule) as the table's next version, make it the
    one in force and announce it (``SET_RULE`` on the table's topic); the version.

    ``rule`` must have been checked against the table's keys (:func:`parse_rule`).
    """
    latest = tx.session.execute(
        select(func.max(SetRuleRow.version)).where(SetRuleRow.table_id == row.id)
    ).scalar_one()
    version = (latest or 0) + 1
    stored = None if rule is None else rule.as_json()
    tx.session.add(
        SetRuleRow(
            table_id=row.id, version=version, rule=stored, principal=principal, created_at=tx.now
        )
    )
    tx.session.execute(
        update(TableRow)
        .where(TableRow.id == row.id)
        .values(rule_version=None if rule is None else version, set_rule=stored, updated_at=tx.now)
        .execution_options(synchronize_session=False)
    )
    tx.session.flush()
    tx.session.expire(row)
    tx.session.refresh(row)
    info = info_of(row)
    (event_id,) = tx.allocate_event_ids(1)
    message = build_set_rule(
        event_id=event_id,
        table=info.name,
        topic=info.topic,
        timestamp=int(tx.now.timestamp()),
        version=version,
        rule=stored,
        principal=principal,
    )
    add_outbox_rows(tx, [message], info.name)
    return version
