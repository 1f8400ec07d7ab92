"""What writers call: announce that a set of partitions is complete."""

from __future__ import annotations

import atexit
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from hcat_notify.config import Settings, load_settings
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store.catalog import Catalog

__all__ = ["close_catalogs", "expect_sets", "send_mark_set_done"]

# One open catalog (engine and connection pool) per settings and process: opening one
# per call costs more than the call itself. The pid keeps a forked child from using its
# parent's connections.
_MAX_CATALOGS = 4
_catalogs: OrderedDict[tuple[Settings, int], Catalog] = OrderedDict()
_lock = threading.Lock()


def _catalog(settings: Settings) -> Catalog:
    key = (settings, os.getpid())
    with _lock:
        catalog = _catalogs.get(key)
        if catalog is not None:
            _catalogs.move_to_end(key)
            return catalog
    opened = Catalog.open(settings)  # outside the lock: it may take a while
    with _lock:
        kept = _catalogs.setdefault(key, opened)
        while len(_catalogs) > _MAX_CATALOGS:
            _, evicted = _catalogs.popitem(last=False)
            evicted.close()
    if kept is not opened:  # another thread's first call opened one meanwhile
        opened.close()
    return kept


def close_catalogs() -> None:
    """Close the catalogs :func:`send_mark_set_done` keeps open (also done at exit)."""
    with _lock:
        while _catalogs:
            _, catalog = _catalogs.popitem()
            catalog.close()


atexit.register(close_catalogs)


def send_mark_set_done(
    table: TableName | str,
    spec: PartitionSpec | Mapping[str, str | None],
    *,
    settings: Settings | None = None,
) -> int:
    """Announce that every partition matching ``spec`` is complete (HCatalog's sendMarkSetDone).

    Writes the retention row and the outbox event in one transaction; the relay
    publishes the MARK_SET_DONE message. Succeeds while the broker is down.

    Args:
        table: ``db.table``.
        spec: a non-empty prefix of the table's partition keys, in any order, e.g.
            ``{"datestamp": "20110228"}`` on keys ``datestamp, region`` (``region``
            alone would cover that region of every day, future ones too: refused).
        settings: deployment settings (default: :func:`load_settings`).

    Returns:
        The event id of the MARK_SET_DONE message.

    Raises:
        TableNotFoundError: the table is not registered.
        InvalidInputError: empty spec, a key that is not a partition key, or a spec
            that skips a leading key (the message names it).
        StoreUnavailableError: the catalog database cannot be reached.
    """
    return _catalog(settings or load_settings()).mark_set_done(table, spec)


def expect_sets(
    table: TableName | str,
    *,
    settings: Settings | None = None,
    **options: Any,
) -> int:
    """Give ``table`` a completeness rule (:meth:`hcat_notify.store.Catalog.expect`, whose
    keyword arguments ``options`` are: ``set_keys``, ``parts``, ``like_previous``,
    ``min_partitions``, ``quiet``, ``deadline``, ``deadline_after``, ``on_deadline``,
    ``principal``): the catalog then writes each set's MARK_SET_DONE in the transaction
    that brings its last expected part, so no writer has to know that the set is
    complete (docs/completeness.md).

    ``expect_sets("web.clicks", set_keys="datestamp", parts=["region=us,eu,apac",
    "hour=00..23"])`` expects 72 partitions per day.

    Returns:
        The rule's version.

    Raises:
        TableNotFoundError: the table is not registered.
        InvalidRuleError: the rule is malformed or does not fit the table (nothing is
            written).
        TypeError: an option :meth:`Catalog.expect` does not take.
    """
    return _catalog(settings or load_settings()).expect(table, **options)
