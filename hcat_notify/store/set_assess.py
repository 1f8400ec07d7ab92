"""What a set has against its rule, read from its partitions: the present parts and
what is missing (the reports, the timed pass, a set counted afresh; docs/completeness.md)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from sqlalchemy import ColumnElement, select

from hcat_notify.model.completeness import SetRule, expected_parts
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store.models import PartitionRow
from hcat_notify.store.tx import Tx

__all__ = ["Assessment", "assess", "expected_of", "paths_under"]


@functools.lru_cache(maxsize=64)
def _expected(rule: SetRule) -> frozenset[str] | None:
    parts = expected_parts(rule)
    return None if parts is None else frozenset(parts)


_BY_IDENTITY: dict[int, tuple[SetRule, frozenset[str] | None]] = {}
""":func:`expected_of` by the rule object (the catalog hands out one object per stored
rule): found without hashing the rule, several times on every write with a rule."""


def expected_of(rule: SetRule) -> frozenset[str] | None:
    """The parts (paths below the set) ``rule`` expects, for membership; None: the rule
    names none."""
    known = _BY_IDENTITY.get(id(rule))
    if known is not None and known[0] is rule:
        return known[1]
    if len(_BY_IDENTITY) >= 256:
        _BY_IDENTITY.clear()
    expected = _expected(rule)
    _BY_IDENTITY[id(rule)] = (rule, expected)
    return expected


@dataclass(frozen=True)
class Assessment:
    """A set's parts against its rule."""

    expected: int | None
    present: tuple[str, ...]
    """Full path forms, path order."""
    missing: tuple[str, ...]
    complete: bool


def _where_under(tx: Tx, table_id: int, prefix: str) -> list[ColumnElement[bool]]:
    """The partitions of the table under ``prefix`` (``k=v/``), as conditions."""
    if tx.dialect == "sqlite":
        # SQLite's LIKE ignores case and uses no index; its text compares bytewise
        # (BINARY), so the paths under "k=v/" are exactly those in ["k=v/", "k=v0").
        return [
            PartitionRow.table_id == table_id,
            PartitionRow.path_spec >= prefix,
            PartitionRow.path_spec < prefix[:-1] + "0",
        ]
    return [
        PartitionRow.table_id == table_id,
        PartitionRow.path_spec.startswith(prefix, autoescape=True),
    ]


def paths_under(tx: Tx, table_id: int, prefix: str) -> list[str]:
    """The paths of the table's partitions under ``prefix`` (``k=v/``), in path order."""
    return sorted(
        tx.session.scalars(
            select(PartitionRow.path_spec).where(*_where_under(tx, table_id, prefix))
        )
    )


def _previous_set(tx: Tx, table_id: int, prefix: str, depth: int) -> str | None:
    """The path prefix of the set before ``prefix`` in path order (the database's, as
    :func:`hcat_notify.store.partitions.list_partitions` orders), or None."""
    last = tx.session.scalars(
        select(PartitionRow.path_spec)
        .where(PartitionRow.table_id == table_id, PartitionRow.path_spec < prefix)
        .order_by(PartitionRow.path_spec.desc())
        .limit(1)
    ).first()
    if last is None:
        return None
    return "/".join(last.split("/")[:depth]) + "/"


def assess(tx: Tx, table_id: int, rule: SetRule, spec: PartitionSpec) -> Assessment:
    """What the set ``spec`` (keys in the table's order) has against ``rule``."""
    prefix = spec.to_path() + "/"
    present = tuple(paths_under(tx, table_id, prefix))
    have = {path[len(prefix) :] for path in present}
    expected = expected_parts(rule)
    if expected is None and rule.like_previous:
        previous = _previous_set(tx, table_id, prefix, len(rule.set_keys))
        if previous is not None:
            expected = tuple(path[len(previous) :] for path in paths_under(tx, table_id, previous))
    if expected is not None:
        missing = tuple(prefix + part for part in expected if part not in have)
        complete = bool(expected) and not missing
        return Assessment(len(expected), present, missing, complete)
    minimum = rule.min_partitions
    complete = minimum is not None and len(present) >= minimum
    return Assessment(minimum, present, (), complete)
