"""Leases: ownership of a named resource, taken and renewed by compare-and-set."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import delete, update
from sqlalchemy.exc import IntegrityError

from hcat_notify.store.models import RelayLeaseRow
from hcat_notify.store.records import Lease
from hcat_notify.store.tx import Tx

__all__ = ["acquire_lease", "get_lease", "release_lease"]


def acquire_lease(tx: Tx, name: str, owner: str, ttl: timedelta) -> Lease | None:
    """Take or renew the lease ``name`` for ``owner``; None if another owner holds it.

    Compare-and-set on the lease row's version: of two processes racing for an expired
    lease, exactly one wins.
    """
    now = tx.now
    session = tx.session
    row = session.get(RelayLeaseRow, name)
    if row is None:
        row = RelayLeaseRow(
            name=name, owner=owner, acquired_at=now, renewed_at=now, expires_at=now + ttl
        )
        session.add(row)
        try:
            session.flush()
        except IntegrityError:
            return None
        return Lease(name, owner, now, row.expires_at, row.version)
    if row.owner != owner and row.expires_at > now:
        return None
    acquired = row.acquired_at if row.owner == owner else now
    result = session.execute(
        update(RelayLeaseRow)
        .where(RelayLeaseRow.name == name, RelayLeaseRow.version == row.version)
        .values(
            owner=owner,
            acquired_at=acquired,
            renewed_at=now,
            expires_at=now + ttl,
            version=row.version + 1,
        )
        .execution_options(synchronize_session=False)
    )
    if result.rowcount < 1:  # type: ignore[attr-defined]
        return None
    return Lease(name, owner, acquired, now + ttl, row.version + 1)


def release_lease(tx: Tx, name: str, owner: str) -> bool:
    """Give the lease up if ``owner`` holds it; return whether it did."""
    result = tx.session.execute(
        delete(RelayLeaseRow).where(RelayLeaseRow.name == name, RelayLeaseRow.owner == owner)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def get_lease(tx: Tx, name: str) -> Lease | None:
    """The current holder of the lease ``name`` (possibly expired), or None."""
    row = tx.session.get(RelayLeaseRow, name)
    if row is None:
        return None
    return Lease(row.name, row.owner, row.acquired_at, row.expires_at, row.version)
