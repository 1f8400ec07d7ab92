"""Which member owns which bucket: the controller's assignment, as a pure function.

Helix's lesson (constraint-based rebalancing): start from the current assignment and
move as few buckets as possible. Hedwig's: balance by load, not only by count. So:

1. Buckets without a live owner (dead member, released, new) go to the least loaded
   members at once.
2. Then, while a member is overloaded (more than its share of the load by a margin, or,
   when load does not tell members apart, two buckets more than another), it sheds the
   bucket whose move evens things out best, to the least loaded member. A bucket moved
   less than ``min_move_interval`` ago stays where it is: ownership must not flap.
   The controller also sheds load at most once per ``min_move_interval`` (the load is a
   rate over a past window, and chasing each reading of it would keep buckets moving).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "BucketState",
    "bucket_loads",
    "group_forming",
    "members_arriving",
    "plan_assignment",
]

LOAD_TOLERANCE = 0.10
"""A member is overloaded above its share of the load by this fraction..."""
LOAD_SLACK = 1.0
"""... and by at least this many events/s (idle noise must not move buckets)."""


@dataclass(frozen=True)
class BucketState:
    """What the controller knows of a bucket."""

    bucket: int
    owner: str | None
    moved_at: float  # its last balancing move: it stays put min_move_interval after it
    load: float = 0.0  # events/s, summed over the members' reports (bucket_loads)


def bucket_loads(reports: Iterable[Mapping[int, float]]) -> dict[int, float]:
    """Each bucket's load: the sum of what every member reports for it.

    A member reports every bucket it published in its window, owned or not, so a bucket
    that just moved is still counted at its old owner's rate until the window has passed
    (and its new owner's rate grows in as the old one's fades). Reading only the current
    owner's report would show a moved bucket as idle: the controller would keep sending
    more buckets to the member that just received some.
    """
    loads: dict[int, float] = {}
    for report in reports:
        for bucket, load in report.items():
            loads[bucket] = loads.get(bucket, 0.0) + load
    return loads


def group_forming(
    anything_owned: bool, joined_at: Sequence[float], *, now: float, grace: float, limit: float
) -> bool:
    """Whether a new group's first assignment waits for more members (Kafka's initial
    rebalance delay).

    It waits while nobody owns anything yet and a member joined less than ``grace``
    seconds ago (more may be starting), but never once the first of them joined ``limit``
    seconds ago. Otherwise the first member to arrive takes every bucket, and the move
    that evens it out pins half of them (``min_move_interval``) before the members
    starting just after it arrive.

    Args:
        anything_owned: whether any bucket has an owner (then the group is not new).
        joined_at: the live members' join times (database clock).
        now: the database clock.
        grace: seconds to wait after the latest join.
        limit: seconds after the first join beyond which nothing waits.
    """
    if anything_owned or not joined_at:
        return False
    return now - max(joined_at) < grace and now - min(joined_at) < limit


def members_arriving(joined_at: Sequence[float], *, now: float, grace: float) -> bool:
    """Whether a running group's rebalance waits for more members: one joined less
    than ``grace`` seconds ago (members started together join one after another, and
    balancing for each in turn moves a bucket given to an early one again when the
    next arrives). The controller waits so at most a session timeout, and never with
    buckets to place (a member gone)."""
    return any(now - t < grace for t in joined_at)


def plan_assignment(
    buckets: Sequence[BucketState],
    members: Sequence[str],
    *,
    now: float,
    min_move_interval: float,
    max_moves: int | None = None,
    balance_load: bool = True,
) -> dict[int, str]:
    """The buckets to move and their new owners.

    Args:
        buckets: every bucket, with its owner (None, or a member that is not in
            ``members``, means it needs one) and load.
        members: the live members that may own buckets.
        now: the database clock, to judge ``moved_at``.
        min_move_interval: seconds a bucket stays put after a move (unless its owner
            is gone).
        max_moves: a bound on the balancing moves of one round (None: as many as it
            takes).
        balance_load: whether an overloaded member sheds load this round (False: only
            orphans are placed and counts evened out, within the load margin).

    Returns:
        bucket -> new owner, only for buckets that change hands.
    """
    if not members:
        return {}
    live = sorted(set(members))
    owned: dict[str, list[BucketState]] = {member: [] for member in live}
    orphans: list[BucketState] = []
    for state in buckets:
        if state.owner in owned:
            owned[state.owner].append(state)
        else:
            orphans.append(state)
    load = {member: sum(item.load for item in items) for member, items in owned.items()}
    changes: dict[int, str] = {}

    def least_loaded() -> str:
        return min(live, key=lambda m: (load[m], len(owned[m]), m))

    def move(state: BucketState, to: str) -> None:
        owned[to].append(state)
        load[to] += state.load
        changes[state.bucket] = to

    # 1. every bucket gets a live owner, heaviest first
    for state in sorted(orphans, key=lambda s: (-s.load, s.bucket)):
        move(state, least_loaded())

    # 2. even out, moving only buckets that have stayed put long enough
    total = sum(load.values())
    share = total / len(live)
    margin = max(share * LOAD_TOLERANCE, LOAD_SLACK)
    budget = len(buckets) if max_moves is None else max_moves

    def movable(member: str) -> list[BucketState]:
        return [
            s
            for s in owned[member]
            if s.bucket not in changes and now - s.moved_at >= min_move_interval
        ]

    def shed_load() -> tuple[str, str, BucketState] | None:
        """The overloaded member's bucket that brings it and the least loaded closest
        together without overshooting (the heaviest member that has one to give)."""
        target = least_loaded()
        for heavy in sorted(live, key=lambda m: (-load[m], -len(owned[m]), m)):
            if load[heavy] <= share + margin or heavy == target:
                return None
            gap = load[heavy] - load[target]
            candidates = [s for s in movable(heavy) if 0 < s.load < gap]
            if candidates:
                best = min(candidates, key=lambda s: (abs(gap / 2 - s.load), s.bucket))
                return heavy, target, best
        return None

    def even_counts() -> tuple[str, str, BucketState] | None:
        """Load does not tell them apart: the lightest bucket of the most crowded member
        that has one it may give, to the member with the fewest."""
        fewest = min(live, key=lambda m: (len(owned[m]), load[m], m))
        for crowded in sorted(live, key=lambda m: (-len(owned[m]), -load[m], m)):
            if len(owned[crowded]) <= len(owned[fewest]) + 1:
                return None
            candidates = [s for s in movable(crowded) if load[fewest] + s.load <= share + margin]
            if candidates:
                return crowded, fewest, min(candidates, key=lambda s: (s.load, s.bucket))
        return None

    while budget > 0:
        choice = (shed_load() if balance_load else None) or even_counts()
        if choice is None:
            break
        source, to, state = choice
        owned[source].remove(state)
        load[source] -= state.load
        move(state, to)
        budget -= 1
    before = {state.bucket: state.owner for state in buckets}
    return {bucket: owner for bucket, owner in changes.items() if owner != before[bucket]}
