"""The relay's timed pass: run at once again while more is due, lost buckets handed
back, nothing without buckets; ``relay --once`` publishes the verdicts due."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from hcat_notify.config import Settings
from hcat_notify.model.events import EventType
from hcat_notify.relay import Relay
from hcat_notify.relay.member import Membership
from hcat_notify.relay.timed import PASS_LIMIT, TimedPass
from hcat_notify.store import Catalog, NewPartition
from hcat_notify.store.group import Ownership
from hcat_notify.store.set_records import DuePass
from tests.fakes.broker import FakeBroker


class ScriptedSets:
    """Stands in for ``catalog.sets``: answers each pass from a script, records calls."""

    def __init__(self, answers: list[DuePass]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, dict[int, int]]] = []

    def evaluate_due(self, member: str, buckets: dict[int, int], *, limit: int) -> DuePass:
        assert limit == PASS_LIMIT
        self.calls.append((member, dict(buckets)))
        return self.answers.pop(0)


class FakeCatalog:
    def __init__(self, sets: ScriptedSets) -> None:
        self.sets = sets


class FakeMember:
    member_id = "m1"

    def __init__(self, owned: dict[int, int]) -> None:
        self._owned = owned

    def owned(self) -> dict[int, Ownership]:
        return {bucket: Ownership(bucket, epoch, 0) for bucket, epoch in self._owned.items()}


def _timed(sets: ScriptedSets, owned: dict[int, int]) -> tuple[TimedPass, list[Mapping[int, int]]]:
    lost: list[Mapping[int, int]] = []
    member = cast(Membership, FakeMember(owned))
    return TimedPass(cast(Catalog, FakeCatalog(sets)), member, 1.0, lost.append), lost


def test_a_pass_runs_again_at_once_while_more_is_due_and_hands_back_lost_buckets() -> None:
    sets = ScriptedSets(
        [
            DuePass(PASS_LIMIT, (1,), (2, 3), frozenset({7}), more=True),
            DuePass(4, (), (4,), frozenset()),
        ]
    )
    timed, lost = _timed(sets, {3: 5, 7: 2})
    assert timed.run_once() == 4
    assert sets.calls == [("m1", {3: 5, 7: 2}), ("m1", {3: 5, 7: 2})]
    assert lost == [{7: 2}]  # fenced at the epoch the pass held
    assert (timed.stats.passes, timed.stats.evaluated, timed.stats.dones) == (2, PASS_LIMIT + 4, 1)
    assert timed.stats.late == 3


def test_a_member_without_buckets_runs_no_pass() -> None:
    sets = ScriptedSets([])
    timed, lost = _timed(sets, {})
    assert timed.run_once() == 0
    assert sets.calls == []
    assert lost == []


def test_relay_once_publishes_a_deadline_passed(
    settings: Settings, catalog: Catalog, broker: FakeBroker
) -> None:
    catalog.create_table("web.days", location="/w/days", partition_keys=["datestamp", "region"])
    catalog.expect(
        "web.days", set_keys="datestamp", parts=["region=us,eu"], deadline="datestamp+1d"
    )
    catalog.add_partitions(
        "web.days", [NewPartition({"datestamp": "20200101", "region": "us"}, "/w")]
    )
    with Relay(settings, catalog=catalog, connection_factory=broker.connection) as relay:
        relay.drain()
        assert relay.timed.stats.late == 1
    (late,) = [m for m in broker.delivered if m.headers["HCAT_EVENT"] == EventType.SET_LATE.value]
    body: dict[str, Any] = json.loads(late.body)
    assert (body["spec"], body["missing"]) == (
        "datestamp=20200101",
        ["datestamp=20200101/region=eu"],
    )
    with Relay(settings, catalog=catalog, connection_factory=broker.connection) as relay:
        assert relay.drain() == 0  # given once
