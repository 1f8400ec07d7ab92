"""Waiting for a relay group's assignment to settle (relay_group.py, scale_relay.py)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from hcat_notify.store import Catalog

__all__ = ["owners", "wait_balanced"]


def owners(catalog: Catalog) -> dict[int, str | None]:
    """Bucket: the member that owns it (None: nobody)."""
    return {b.bucket: b.owner for b in catalog.group.buckets()}


def wait_balanced(
    catalog: Catalog,
    members: Callable[[], set[str]],
    *,
    stable_for: float,
    joined: bool = False,
    timeout: float = 120.0,
) -> float:
    """Seconds until every bucket is owned by one of ``members()`` (each of them owning
    some, counts within one of each other; with ``joined``, each of them also a joined
    member of the group), unchanged for ``stable_for`` seconds (not counted)."""
    started = time.monotonic()
    since: float | None = None
    last: dict[int, str | None] = {}
    while time.monotonic() - started < timeout:
        expected = members()
        current = owners(catalog)
        counts = Counter(current.values())
        settled = (
            set(counts) == expected
            and max(counts.values()) - min(counts.values()) <= 1
            and (not joined or expected <= {m.member_id for m in catalog.group.members()})
        )
        if settled and current == last and since is not None:
            if time.monotonic() - since >= stable_for:
                return since - started
        elif settled:
            since = time.monotonic()
        else:
            since = None
        last = current
        time.sleep(0.02)
    raise RuntimeError(f"not settled after {timeout:g}s: {Counter(owners(catalog).values())}")
