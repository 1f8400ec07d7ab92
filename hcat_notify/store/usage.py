"""Which registered tables and partitions use a place: what a purge must not delete."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import or_, select

from hcat_notify.store.models import PartitionRow, TableRow
from hcat_notify.store.tx import Tx

__all__ = ["LocationUse", "locations_mentioning"]

_CHUNK = 50
"""Fragments per statement (each is one ``LIKE``)."""


@dataclass(frozen=True)
class LocationUse:
    """A registered location: a table's (``partition`` None) or one partition's."""

    table: str
    partition: str | None
    location: str

    def __str__(self) -> str:
        if self.partition is None:
            return f"table {self.table} ({self.location})"
        return f"partition {self.partition} of {self.table} ({self.location})"


def _like(fragment: str) -> str:
    escaped = fragment.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def locations_mentioning(tx: Tx, fragments: Sequence[str]) -> list[LocationUse]:
    """Every table and partition whose location's text contains one of ``fragments``.

    A text match over every spelling (``/w/t``, ``file:///w/t``, ``har://file-/w/t/…``):
    the caller decides with :func:`hcat_notify.warehouse.location_key` which really are
    the same directory. Reads every location of the catalog once per 50 fragments.
    """
    found: list[LocationUse] = []
    unique = sorted(set(fragments))
    for start in range(0, len(unique), _CHUNK):
        likes = [_like(fragment) for fragment in unique[start : start + _CHUNK]]
        tables = select(TableRow.db_name, TableRow.table_name, TableRow.location).where(
            or_(*(TableRow.location.like(like, escape="\\") for like in likes))
        )
        for db, name, location in tx.session.execute(tables):
            found.append(LocationUse(f"{db}.{name}", None, location))
        partitions = (
            select(
                TableRow.db_name, TableRow.table_name, PartitionRow.path_spec, PartitionRow.location
            )
            .join(TableRow, TableRow.id == PartitionRow.table_id)
            .where(or_(*(PartitionRow.location.like(like, escape="\\") for like in likes)))
        )
        for db, name, path, location in tx.session.execute(partitions):
            found.append(LocationUse(f"{db}.{name}", path, location))
    return list(dict.fromkeys(found))
