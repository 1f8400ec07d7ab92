"""The controller's assignment: every bucket owned, sticky, balanced by load and count."""

from __future__ import annotations

import math
import random

from hypothesis import given
from hypothesis import strategies as st

from hcat_notify.relay.assignment import BucketState, bucket_loads, group_forming, plan_assignment

B = 256


def _apply(buckets: list[BucketState], changes: dict[int, str], now: float) -> list[BucketState]:
    return [
        BucketState(s.bucket, changes[s.bucket], now, s.load) if s.bucket in changes else s
        for s in buckets
    ]


def _counts(buckets: list[BucketState]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for state in buckets:
        assert state.owner is not None
        counts[state.owner] = counts.get(state.owner, 0) + 1
    return counts


def test_a_new_group_gets_every_bucket_evenly():
    buckets = [BucketState(b, None, 0.0) for b in range(B)]
    changes = plan_assignment(buckets, ["a", "b", "c", "d"], now=100.0, min_move_interval=30)
    assert len(changes) == B
    assert sorted(_counts(_apply(buckets, changes, 100.0)).values()) == [64, 64, 64, 64]


def test_a_fifth_member_takes_about_a_fifth_and_nothing_else_moves():
    buckets = [BucketState(b, "abcd"[b % 4], 0.0) for b in range(B)]
    changes = plan_assignment(buckets, ["a", "b", "c", "d", "e"], now=100.0, min_move_interval=30)
    assert set(changes.values()) == {"e"}  # only to the newcomer
    assert len(changes) <= math.ceil(B / 5) + math.ceil(0.05 * B)
    counts = _counts(_apply(buckets, changes, 100.0))
    assert max(counts.values()) - min(counts.values()) <= 1


def test_a_dead_members_buckets_move_at_once_even_if_just_moved():
    buckets = [BucketState(b, "abc"[b % 3], 99.0) for b in range(30)]
    changes = plan_assignment(buckets, ["a", "b"], now=100.0, min_move_interval=30)
    assert sorted(changes) == [b for b in range(30) if b % 3 == 2]
    assert set(changes.values()) <= {"a", "b"}


def test_nothing_moves_when_balanced_or_recently_moved():
    balanced = [BucketState(b, "ab"[b % 2], 0.0) for b in range(B)]
    assert plan_assignment(balanced, ["a", "b"], now=100.0, min_move_interval=30) == {}
    lopsided = [BucketState(b, "a", 90.0) for b in range(10)]
    assert plan_assignment(lopsided, ["a", "b"], now=100.0, min_move_interval=30) == {}


def test_an_overloaded_member_sheds_load_not_just_buckets():
    # a owns 4 hot buckets, b owns 4 idle ones: counts are even, load is not
    buckets = [BucketState(b, "a", 0.0, 100.0) for b in range(4)]
    buckets += [BucketState(b, "b", 0.0, 0.0) for b in range(4, 8)]
    changes = plan_assignment(buckets, ["a", "b"], now=100.0, min_move_interval=30)
    after = _apply(buckets, changes, 100.0)
    loads = {m: sum(s.load for s in after if s.owner == m) for m in "ab"}
    assert loads == {"a": 200.0, "b": 200.0}
    assert sorted(_counts(after).values()) == [4, 4]
    hot_moved = [b for b in changes if b < 4]
    assert len(hot_moved) == 2  # the fewest hot moves; idle ones may even the counts
    assert len(changes) <= 4


def test_a_moved_bucket_keeps_its_load_until_its_new_owner_reports_it():
    """The controller's next round, before the new owner has published anything: the
    moved buckets still count at the old owner's rate, so nothing else moves."""
    hot = {b: 100.0 for b in range(4)}
    buckets = [BucketState(b, "a", 0.0, hot.get(b, 0.0)) for b in range(4)]
    buckets += [BucketState(b, "b", 0.0) for b in range(4, 8)]
    first = plan_assignment(buckets, ["a", "b"], now=100.0, min_move_interval=0)
    assert len([b for b in first if b < 4]) == 2
    loads = bucket_loads([hot, {}])  # a's window still holds all four; b has sent nothing
    after = [
        BucketState(b, first.get(b, s.owner), 100.0 if b in first else 0.0, loads.get(b, 0.0))
        for b, s in enumerate(buckets)
    ]
    assert plan_assignment(after, ["a", "b"], now=101.0, min_move_interval=0) == {}


def test_members_joining_one_by_one_get_buckets_from_whoever_may_give_them():
    """a took every bucket, then gave half to b (those stay put for a while); c and d
    join: they get a's buckets at once instead of waiting for b's to become movable."""
    buckets = [BucketState(b, "a", 0.0) for b in range(0, B, 2)]
    buckets += [BucketState(b, "b", 100.0) for b in range(1, B, 2)]  # just moved
    changes = plan_assignment(buckets, ["a", "b", "c", "d"], now=101.0, min_move_interval=5)
    assert {bucket % 2 for bucket in changes} == {0}  # only a's
    counts = _counts(_apply(buckets, changes, 101.0))
    assert counts["b"] == B // 2
    assert sorted([counts["a"], counts["c"], counts["d"]]) == [42, 43, 43]


def test_bucket_loads_sum_every_members_report():
    assert bucket_loads([{1: 2.0, 2: 1.0}, {2: 0.5}, {}]) == {1: 2.0, 2: 1.5}


def test_without_load_balancing_orphans_still_find_owners_and_counts_even_out():
    buckets = [BucketState(b, "a", 0.0, 100.0) for b in range(4)]  # a: all the load
    buckets += [BucketState(b, "b", 0.0) for b in range(4, 6)]
    buckets += [BucketState(b, None, 0.0) for b in range(6, 8)]
    changes = plan_assignment(
        buckets, ["a", "b"], now=100.0, min_move_interval=30, balance_load=False
    )
    assert not any(b < 4 for b in changes)  # a keeps its load this round
    assert sorted(b for b in changes if b >= 6) == [6, 7]
    shedding = plan_assignment(buckets, ["a", "b"], now=100.0, min_move_interval=30)
    assert shedding.keys() & {0, 1, 2, 3}  # with it, a sheds


@given(
    members=st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=8, unique=True),
    seed=st.integers(0, 10_000),
)
def test_any_state_converges_to_every_bucket_owned_by_a_live_member(members, seed):
    rng = random.Random(seed)
    owners = [*members, "dead", None]
    buckets = [
        BucketState(b, rng.choice(owners), rng.uniform(0, 100), rng.choice([0.0, 0.0, 5.0, 50.0]))
        for b in range(64)
    ]
    changes = plan_assignment(buckets, members, now=1000.0, min_move_interval=30)
    after = _apply(buckets, changes, 1000.0)
    assert all(state.owner in members for state in after)
    # a second round right after changes nothing: no flapping
    assert plan_assignment(after, members, now=1000.0, min_move_interval=30) == {}


def test_a_new_group_waits_for_members_still_joining_but_not_for_long():
    def forming(owned: bool, joined: list[float], now: float) -> bool:
        return group_forming(owned, joined, now=now, grace=1.0, limit=3.0)

    assert forming(False, [100.0, 100.4], now=101.0)  # the second joined 0.6 s ago
    assert not forming(False, [100.0, 100.4], now=101.5)  # a quiet second: assign
    assert not forming(False, [100.0, 100.9, 101.8, 102.7], now=103.2)  # joins keep coming
    assert not forming(True, [100.9], now=101.0)  # buckets have owners: not a new group
    assert not forming(False, [], now=101.0)
