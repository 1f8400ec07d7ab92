"""Members that join a running group one after another within a heartbeat get one
rebalance, not one each: no bucket handed to an early one moves again to a later one
(issue 31: 8 members joining 8 moved up to 20 buckets more than the 128 that must)."""

from __future__ import annotations

import os
import time
from collections import Counter

from hcat_notify.config import Settings
from hcat_notify.relay.config import RelayConfig
from hcat_notify.relay.member import Membership
from hcat_notify.store import Catalog
from hcat_notify.store.group import MemberReport

CONFIG = RelayConfig(heartbeat_interval=1.0, session_timeout=3.0, min_move_interval=0.5)


def _owners(catalog: Catalog) -> dict[int, str | None]:
    return {b.bucket: b.owner for b in catalog.group.buckets()}


def _balanced(catalog: Catalog, members: set[str], timeout: float = 30.0) -> dict[int, str | None]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        owners = _owners(catalog)
        counts = Counter(owners.values())
        if set(counts) == members and max(counts.values()) - min(counts.values()) <= 1:
            return owners
        time.sleep(0.02)
    raise AssertionError(f"not balanced over {members}: {Counter(_owners(catalog).values())}")


def test_members_joining_one_after_another_move_only_the_buckets_they_must(
    settings: Settings, catalog: Catalog
):
    joined: list[tuple[Membership, Catalog]] = []

    def join(member_id: str) -> None:
        own = Catalog.open(settings)
        membership = Membership(
            own, CONFIG, member_id, lambda: MemberReport(member_id, "test", os.getpid())
        )
        membership.join()
        joined.append((membership, own))

    try:
        join("m1")
        join("m2")
        before = _balanced(catalog, {"m1", "m2"})
        time.sleep(CONFIG.min_move_interval)  # the first split's moves may move again
        join("m3")
        time.sleep(0.3)  # the controller has had rounds meanwhile (its rounds follow joins)
        join("m4")
        after = _balanced(catalog, {"m1", "m2", "m3", "m4"})
        # stable: the next rounds move nothing more
        time.sleep(CONFIG.heartbeat_interval * 1.5)
        assert _owners(catalog) == after
    finally:
        for membership, own in reversed(joined):
            membership.leave()
            own.close()
    moved = sum(1 for bucket in after if after[bucket] != before[bucket])
    assert moved == len(after) // 2, f"{moved} buckets moved, {len(after) // 2} must"
