"""Completeness rules in the store: the done of a set written by the transaction that
brings its last expected part, exactly once per generation; the timed pass (quiet
periods, deadlines) fenced by the bucket's epoch. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select

from hcat_notify.config import load_settings
from hcat_notify.errors import InvalidInputError, InvalidRuleError
from hcat_notify.model.changes import AnnounceMode
from hcat_notify.model.completeness import SetState
from hcat_notify.model.events import EventType
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.topics import topic_bucket
from hcat_notify.store import Catalog, NewPartition, WriteMode, group, set_timed
from hcat_notify.store import engine as engines
from hcat_notify.store.group import MemberReport
from hcat_notify.store.models import SetRuleRow, SetStateRow, TableRow
from hcat_notify.store.tx import transaction
from tests.revisions import catalog_at
from tests.wire import validate_message

pytestmark = pytest.mark.integration

TABLE = "web.clicks"
REGIONS = ("us", "eu", "apac")
HOURS = tuple(f"{hour:02d}" for hour in range(24))
DAY = "20261126"


def _table(catalog: Catalog, keys: tuple[str, ...] = ("datestamp", "region", "hour")) -> None:
    catalog.create_table(TABLE, location="/w/clicks", partition_keys=list(keys))


def _expect_day(catalog: Catalog, **options: Any) -> int:
    return catalog.expect(
        TABLE, set_keys="datestamp", parts=["region=us,eu,apac", "hour=00..23"], **options
    )


def _add(catalog: Catalog, day: str, region: str, hour: str) -> None:
    catalog.add_partitions(
        TABLE, [NewPartition({"datestamp": day, "region": region, "hour": hour}, "/w/d")]
    )


def _events(catalog: Catalog, kind: EventType | None = None) -> list[Any]:
    events = catalog.outbox.catch_up([TABLE], cursor=0)
    return [event for event in events if kind is None or event.event_type is kind]


def _dones(catalog: Catalog) -> list[Any]:
    return _events(catalog, EventType.MARK_SET_DONE)


def _all_parts(day: str = DAY) -> list[tuple[str, str, str]]:
    return [(day, region, hour) for region in REGIONS for hour in HOURS]


def _validated(event: Any) -> dict[str, Any]:
    headers = {key: str(value) for key, value in event.headers.items()}
    return validate_message(headers, event.body)


def test_a_day_completed_in_random_order_is_done_once_after_its_last_part(catalog: Catalog):
    _table(catalog)
    version = _expect_day(catalog)
    parts = _all_parts()
    random.Random(7).shuffle(parts)
    for index, part in enumerate(parts):
        _add(catalog, *part)
        assert len(_dones(catalog)) == (1 if index == len(parts) - 1 else 0)
    (done,) = _dones(catalog)
    adds = _events(catalog, EventType.ADD_PARTITION)
    assert done.event_id > max(add.event_id for add in adds)
    body = _validated(done)
    assert body["spec"] == f"datestamp={DAY}"
    assert (body["generation"], body["reason"], body["ruleVersion"]) == (1, "rule", version)
    assert done.headers["HCAT_SET_GENERATION"] == "1"
    assert done.headers["HCAT_DONE_REASON"] == "rule"
    assert done.headers["HCAT_RULE_VERSION"] == str(version)
    covering = catalog.find_covering_done(TABLE, {"datestamp": DAY, "region": "us"})
    assert covering is not None
    assert (covering.event_id, covering.generation, covering.reason) == (done.event_id, 1, "rule")
    report = catalog.sets.state(TABLE, {"datestamp": DAY})
    assert report.state is SetState.DONE
    assert report.complete
    assert (report.expected, len(report.present), report.missing) == (72, 72, ())
    assert (report.done_generation, report.done_reason, report.done_event_id) == (
        1,
        "rule",
        done.event_id,
    )


def _own(catalog: Catalog, member: str = "relay-1") -> dict[int, int]:
    """Make ``member`` the owner of the table's bucket; {bucket: epoch}."""
    catalog.group.join(MemberReport(member, "here", 1), session_timeout=600)
    controller = catalog.group.claim_controller(member, ttl=600)
    assert controller is not None
    bucket = topic_bucket(catalog.get_table(TABLE).topic, len(catalog.group.buckets()))
    assert catalog.group.assign(member, controller, {bucket: member})
    return {bucket: catalog.group.owned(member)[bucket].epoch}


def _changed_at(catalog: Catalog, day: str = DAY) -> float:
    report = catalog.sets.state(TABLE, {"datestamp": day})
    assert report.last_change_at is not None
    return report.last_change_at.timestamp()


def _fill(catalog: Catalog, parts: list[tuple[str, str, str]]) -> None:
    for part in parts:
        _add(catalog, *part)


def test_like_previous_expects_the_partitions_of_the_set_before(catalog: Catalog):
    _table(catalog, ("datestamp", "region"))
    catalog.expect(TABLE, set_keys="datestamp", like_previous=True)
    regions = [NewPartition({"datestamp": "20261125", "region": r}, "/w/d") for r in REGIONS]
    catalog.add_partitions(TABLE, regions)
    assert _dones(catalog) == []  # the first set has no previous one
    for index, region in enumerate(REGIONS):
        catalog.add_partitions(
            TABLE, [NewPartition({"datestamp": "20261126", "region": region}, "/w/d")]
        )
        report = catalog.sets.state(TABLE, {"datestamp": "20261126"})
        assert report.expected == 3
        assert len(report.missing) == len(REGIONS) - index - 1
    (done,) = _dones(catalog)
    assert done.headers["HCAT_SPEC"] == "datestamp=20261126"


def test_min_partitions_is_done_at_the_nth_partition(catalog: Catalog):
    _table(catalog, ("datestamp", "region"))
    catalog.expect(TABLE, set_keys="datestamp", min_partitions=2)
    catalog.add_partitions(TABLE, [NewPartition({"datestamp": DAY, "region": "us"}, "/w/d")])
    assert _dones(catalog) == []
    catalog.add_partitions(TABLE, [NewPartition({"datestamp": DAY, "region": "eu"}, "/w/d")])
    (done,) = _dones(catalog)
    assert done.headers["HCAT_DONE_REASON"] == "rule"


def test_a_date_range_below_the_set_is_expected_day_by_day(catalog: Catalog):
    _table(catalog, ("month", "day"))
    catalog.expect(TABLE, set_keys="month", parts=["day=2026-02-26..2026-03-02"])
    days = ["2026-02-26", "2026-02-27", "2026-02-28", "2026-03-01", "2026-03-02"]
    report = None
    for day in days:
        catalog.add_partitions(TABLE, [NewPartition({"month": "202602", "day": day}, "/w/d")])
        report = catalog.sets.state(TABLE, {"month": "202602"})
    assert report is not None
    assert report.expected == 5
    assert report.complete
    assert len(_dones(catalog)) == 1


def test_one_write_of_the_whole_set_is_one_done_after_its_partitions(catalog: Catalog):
    _table(catalog)
    _expect_day(catalog)
    catalog.add_partitions(
        TABLE,
        [
            NewPartition({"datestamp": d, "region": r, "hour": h}, "/w/d")
            for d, r, h in _all_parts()
        ],
        announce=AnnounceMode.WRITE,
    )
    (done,) = _dones(catalog)
    assert done.event_id == max(event.event_id for event in _events(catalog))


def test_a_quiet_period_is_extended_by_a_trickle_and_then_done_once(catalog: Catalog):
    _table(catalog)
    _expect_day(catalog, quiet="10m")
    owned = _own(catalog)
    _fill(catalog, _all_parts())
    assert _dones(catalog) == []  # complete, but not quiet yet
    completed = _changed_at(catalog)
    report = catalog.sets.state(TABLE, {"datestamp": DAY})
    assert report.quiet_until is not None
    assert report.quiet_until.timestamp() == pytest.approx(completed + 600)
    assert catalog.sets.evaluate_due("relay-1", owned, now=completed + 599).dones == ()
    _add(catalog, DAY, "us", "24")  # a trickle: an extra partition restarts the quiet period
    trickled = _changed_at(catalog)
    assert trickled > completed
    assert catalog.sets.evaluate_due("relay-1", owned, now=completed + 600.001).dones == ()
    assert catalog.sets.evaluate_due("relay-1", owned, now=trickled + 599).dones == ()
    assert _dones(catalog) == []
    # (+ 1 ms: the report's times are datetimes, a microsecond coarser than the row's)
    passed = catalog.sets.evaluate_due("relay-1", owned, now=trickled + 600.001)
    (done,) = _dones(catalog)
    assert passed.dones == (done.event_id,)
    assert (done.headers["HCAT_SET_GENERATION"], done.headers["HCAT_DONE_REASON"]) == ("1", "rule")
    assert catalog.sets.evaluate_due("relay-1", owned, now=trickled + 6000).evaluated == 0
    assert len(_dones(catalog)) == 1


def test_a_deadline_sends_set_late_once_with_what_is_missing(catalog: Catalog):
    _table(catalog)
    _expect_day(catalog, deadline_after="1h")
    owned = _own(catalog)
    parts = _all_parts()
    _fill(catalog, parts[:70])
    report = catalog.sets.state(TABLE, {"datestamp": DAY})
    assert report.first_part_at is not None
    assert report.deadline is not None
    start = report.first_part_at.timestamp()
    assert report.deadline.timestamp() == pytest.approx(start + 3600)
    assert catalog.sets.evaluate_due("relay-1", owned, now=start + 3599).late == ()
    passed = catalog.sets.evaluate_due("relay-1", owned, now=start + 3601)
    (late,) = _events(catalog, EventType.SET_LATE)
    assert passed.late == (late.event_id,)
    body = _validated(late)
    missing = [f"datestamp={d}/region={r}/hour={h}" for d, r, h in parts[70:]]
    assert body["missing"] == missing
    assert (body["expected"], body["present"], body["missingCount"]) == (72, 70, 2)
    assert body["deadline"] == int(report.deadline.timestamp())
    assert late.headers["HCAT_SPEC"] == f"datestamp={DAY}"
    report = catalog.sets.state(TABLE, {"datestamp": DAY})
    assert report.state is SetState.LATE
    assert report.late_emitted
    assert report.late_by is None  # by the database's clock, the deadline is an hour away
    assert catalog.sets.evaluate_due("relay-1", owned, now=start + 7200).late == ()
    assert len(_events(catalog, EventType.SET_LATE)) == 1
    _fill(catalog, parts[70:])  # late parts still complete the set
    (done,) = _dones(catalog)
    assert done.headers["HCAT_DONE_REASON"] == "rule"


def test_a_deadline_with_on_deadline_done_sends_a_partial_done(catalog: Catalog):
    _table(catalog)
    _expect_day(catalog, deadline="datestamp+1d 06:00", on_deadline="done")
    owned = _own(catalog)
    _fill(catalog, _all_parts()[:10])
    deadline = datetime(2026, 11, 27, 6, 0, tzinfo=UTC).timestamp()
    report = catalog.sets.state(TABLE, {"datestamp": DAY})
    assert report.deadline is not None
    assert report.deadline.timestamp() == deadline
    catalog.sets.evaluate_due("relay-1", owned, now=deadline)
    (done,) = _dones(catalog)
    assert (done.headers["HCAT_DONE_REASON"], done.headers["HCAT_SET_GENERATION"]) == (
        "partial",
        "1",
    )
    assert _events(catalog, EventType.SET_LATE) == []
    # the rest arrives: the partial done's set reopens, then is done as generation 2
    _fill(catalog, _all_parts()[10:])
    assert len(_events(catalog, EventType.SET_REOPENED)) == 1
    assert [d.headers["HCAT_DONE_REASON"] for d in _dones(catalog)] == ["partial", "changed"]
    assert catalog.sets.evaluate_due("relay-1", owned, now=deadline + 86400).evaluated == 0


def test_a_set_reopened_after_its_deadline_gets_no_set_late(catalog: Catalog):
    _table(catalog)
    _expect_day(catalog, deadline="datestamp+1d")
    owned = _own(catalog)
    _fill(catalog, _all_parts())
    catalog.partitions.drop(TABLE, {"datestamp": DAY, "region": "us", "hour": "00"})
    deadline = datetime(2026, 11, 27, tzinfo=UTC).timestamp()
    assert catalog.sets.evaluate_due("relay-1", owned, now=deadline + 1).late == ()
    assert _events(catalog, EventType.SET_LATE) == []
    assert len(_events(catalog, EventType.SET_REOPENED)) == 1


def test_a_stale_epoch_writes_nothing(catalog: Catalog):
    _table(catalog)
    _expect_day(catalog, deadline_after="1h")
    owned = _own(catalog)
    _fill(catalog, _all_parts()[:1])
    before = _events(catalog)
    (bucket,) = owned
    controller = catalog.group.claim_controller("relay-1", ttl=600)
    assert controller is not None
    assert catalog.group.assign("relay-1", controller, {bucket: "relay-2"})
    passed = catalog.sets.evaluate_due("relay-1", owned, now=2e10)
    assert passed.lost == frozenset(owned)
    assert (passed.evaluated, passed.late) == (0, ())
    assert _events(catalog) == before
    assert catalog.sets.state(TABLE, {"datestamp": DAY}).state is SetState.OPEN


def test_a_late_part_after_the_done_opens_generation_two(catalog: Catalog):
    _table(catalog)
    _expect_day(catalog)
    _fill(catalog, _all_parts())
    _add(catalog, DAY, "us", "24")  # extra, after the done
    first, second = _dones(catalog)
    assert (first.headers["HCAT_SET_GENERATION"], second.headers["HCAT_SET_GENERATION"]) == (
        "1",
        "2",
    )
    assert second.headers["HCAT_DONE_REASON"] == "changed"
    assert _validated(second)["generation"] == 2
    spec = {"datestamp": DAY, "region": "eu"}
    covering = catalog.find_covering_done(TABLE, spec)
    assert covering is not None
    assert covering.event_id == first.event_id
    found = catalog.find_covering_done(TABLE, spec, min_generation=2)
    assert found is not None
    assert (found.event_id, found.generation, found.reason) == (second.event_id, 2, "changed")
    assert catalog.find_covering_done(TABLE, spec, min_generation=3) is None
    with pytest.raises(InvalidInputError, match="at least 1"):
        catalog.find_covering_done(TABLE, spec, min_generation=0)


def test_an_append_after_the_done_is_a_change(catalog: Catalog):
    _table(catalog)
    _expect_day(catalog)
    _fill(catalog, _all_parts())
    journal = catalog.commits
    entry = journal.begin(
        "job-1",
        TABLE,
        mode=WriteMode.APPEND,
        partitions=[f"datestamp={DAY}/region=us/hour=00"],
        plan={},
        started_at=catalog.now(),
    )
    journal.complete(
        entry.job_id,
        [NewPartition({"datestamp": DAY, "region": "us", "hour": "00"}, "/w/d", file_count=1)],
    )
    assert [done.headers["HCAT_SET_GENERATION"] for done in _dones(catalog)] == ["1", "2"]


def test_a_drop_under_a_done_set_reopens_it(catalog: Catalog):
    _table(catalog)
    _expect_day(catalog)
    _fill(catalog, _all_parts())
    catalog.partitions.drop(TABLE, {"datestamp": DAY, "region": "eu", "hour": "07"})
    (reopened,) = _events(catalog, EventType.SET_REOPENED)
    body = _validated(reopened)
    assert body["missing"] == [f"datestamp={DAY}/region=eu/hour=07"]
    assert (body["generation"], reopened.headers["HCAT_SET_GENERATION"]) == (2, "2")
    assert catalog.sets.state(TABLE, {"datestamp": DAY}).state is SetState.REOPENED
    _add(catalog, DAY, "eu", "07")
    assert [d.headers["HCAT_SET_GENERATION"] for d in _dones(catalog)] == ["1", "2"]
    assert _dones(catalog)[-1].headers["HCAT_DONE_REASON"] == "changed"


def test_a_rule_change_mid_set_judges_the_open_sets_again(catalog: Catalog):
    _table(catalog)
    first = _expect_day(catalog)
    _fill(catalog, [(DAY, region, hour) for region in ("us", "eu") for hour in HOURS])
    assert _dones(catalog) == []
    second = catalog.expect(TABLE, set_keys="datestamp", parts=["region=us,eu", "hour=00..23"])
    assert second == first + 1
    (done,) = _dones(catalog)
    assert done.headers["HCAT_RULE_VERSION"] == str(second)
    (*_, announced) = _events(catalog, EventType.SET_RULE)
    body = _validated(announced)
    assert body["rule"]["parts"] == {"region": "us,eu", "hour": "00..23"}
    current = catalog.sets.rule(TABLE)
    assert current is not None
    assert current.version == second
    assert [record.version for record in catalog.sets.history(TABLE)] == [first, second]


def test_a_removed_rule_sends_nothing_more(catalog: Catalog):
    _table(catalog)
    _expect_day(catalog)
    removed = catalog.sets.remove(TABLE, principal="etl")
    assert catalog.sets.rule(TABLE) is None
    assert catalog.get_table(TABLE).rule_version is None
    _fill(catalog, _all_parts())
    assert _dones(catalog) == []
    (*_, announced) = _events(catalog, EventType.SET_RULE)
    assert _validated(announced)["rule"] is None
    assert announced.headers["HCAT_RULE_VERSION"] == str(removed)
    with pytest.raises(InvalidRuleError, match="no completeness rule"):
        catalog.sets.remove(TABLE)


def test_a_done_sent_by_hand_counts_for_its_generation(catalog: Catalog):
    _table(catalog)
    _expect_day(catalog)
    _fill(catalog, _all_parts()[:5])
    by_hand = catalog.mark_set_done(TABLE, {"datestamp": DAY})
    _fill(catalog, _all_parts()[5:])
    # the rest of the parts are changes after the hand-sent done: generation 2
    dones = _dones(catalog)
    assert [(d.event_id == by_hand, d.headers["HCAT_DONE_REASON"]) for d in dones] == [
        (True, "writer"),
        (False, "changed"),
    ]
    assert dones[0].headers["HCAT_SET_GENERATION"] == "1"
    assert "HCAT_RULE_VERSION" not in dones[0].headers
    report = catalog.sets.state(TABLE, {"datestamp": DAY})
    assert (report.generation, report.done_reason) == (2, "changed")


def test_a_done_by_hand_in_the_completing_write_is_the_only_done(catalog: Catalog):
    _table(catalog)
    _expect_day(catalog)
    parts = _all_parts()
    _fill(catalog, parts[:-1])
    day, region, hour = parts[-1]
    catalog.partitions.register(
        TABLE,
        [NewPartition({"datestamp": day, "region": region, "hour": hour}, "/w/d", file_count=1)],
        mark_set_done={"datestamp": DAY},
    )
    (done,) = _dones(catalog)
    assert (done.headers["HCAT_DONE_REASON"], done.headers["HCAT_SET_GENERATION"]) == (
        "writer",
        "1",
    )


def test_a_done_by_hand_of_a_table_without_a_rule_is_generation_one(catalog: Catalog):
    _table(catalog)
    event_id = catalog.mark_set_done(TABLE, {"datestamp": DAY})
    (done,) = _dones(catalog)
    assert done.event_id == event_id
    body = _validated(done)
    assert (body["generation"], body["reason"]) == (1, "writer")
    assert "ruleVersion" not in body


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"set_keys": "region"}, "not the table's leading keys"),
        ({"set_keys": "nope"}, "not a partition key"),
        ({"set_keys": "datestamp,region,hour", "min_partitions": 1}, "one partition"),
        ({"set_keys": "datestamp", "parts": ["region=us"]}, "hour missing"),
        ({"set_keys": "datestamp", "parts": ["region=us", "hour=23..00"]}, "is empty"),
        ({"set_keys": "datestamp", "parts": ["region=us", "hour=a..z"]}, "neither integers"),
        (
            {"set_keys": "datestamp", "parts": ["region=us", "hour=20260230..20260301"]},
            "range 20260230..20260301 of hour: 20260230 is not a date",
        ),
        (
            {"set_keys": "datestamp", "parts": ["region=us", "hour=2026-01-01..2026-13-01"]},
            "2026-13-01 is not a date",
        ),
        ({"set_keys": "datestamp", "parts": ["region=us", "hour=0..99999", "x=1"]}, "not a"),
        ({"set_keys": "datestamp", "parts": ["region=0..999", "hour=0..999"]}, "100,000"),
        ({"set_keys": "datestamp", "min_partitions": 3, "like_previous": True}, "exactly one"),
        ({"set_keys": "datestamp"}, "exactly one"),
        ({"set_keys": "datestamp", "min_partitions": 0}, "between 1"),
        (
            {"set_keys": "datestamp", "min_partitions": "-3"},
            "min-partitions must be between 1 and 100,000, not -3",
        ),
        (
            {"set_keys": "datestamp", "min_partitions": 3, "deadline": "garbage"},
            r"not a key of the set \(datestamp\): a deadline is KEY",
        ),
        ({"set_keys": "datestamp", "min_partitions": 3, "quiet": "10 minutes"}, "duration"),
        (
            {"set_keys": "datestamp", "min_partitions": 3, "deadline": "x", "deadline_after": 3},
            "not both",
        ),
        ({"set_keys": "datestamp", "min_partitions": 3, "deadline": "region+1d"}, "not a key"),
        ({"set_keys": "datestamp", "min_partitions": 3, "deadline": "datestamp 25:00"}, "time"),
        ({"set_keys": "datestamp", "min_partitions": 3, "on_deadline": "done"}, "needs"),
        ({"set_keys": "datestamp", "min_partitions": 3, "on_deadline": "maybe"}, "late, done"),
    ],
)
def test_a_bad_rule_is_refused_with_one_line_and_nothing_written(
    catalog: Catalog, options: dict[str, Any], problem: str
):
    _table(catalog)
    before = _events(catalog)
    with pytest.raises(InvalidRuleError, match=problem) as refused:
        catalog.expect(TABLE, **options)
    assert "\n" not in str(refused.value)
    assert _events(catalog) == before
    assert catalog.sets.rule(TABLE) is None
    assert catalog.sets.history(TABLE) == []


def test_a_dropped_table_takes_its_rule_and_sets_with_it(catalog: Catalog, settings):
    _table(catalog)
    _expect_day(catalog)
    _fill(catalog, _all_parts()[:3])
    catalog.tables.drop(TABLE)
    engine = create_engine(settings.database_url)
    try:
        with engine.connect() as connection:
            for model in (SetRuleRow, SetStateRow):
                assert connection.execute(select(func.count()).select_from(model)).scalar() == 0
    finally:
        engine.dispose()
    _table(catalog)
    assert catalog.sets.rule(TABLE) is None


def test_the_sets_are_listed_newest_first_with_what_each_misses(catalog: Catalog):
    _table(catalog, ("datestamp", "region"))
    with pytest.raises(InvalidInputError, match="has no completeness rule"):
        catalog.sets.state(TABLE, {"datestamp": DAY})
    catalog.expect(TABLE, set_keys="datestamp", parts=["region=us,eu"])
    for day, regions in (("20261124", ["us", "eu"]), ("20261125", ["us"]), (DAY, ["eu"])):
        catalog.add_partitions(
            TABLE, [NewPartition({"datestamp": day, "region": r}, "/w/d") for r in regions]
        )
    listed = catalog.sets.list(TABLE)
    assert [str(report.spec) for report in listed] == [
        f"datestamp={DAY}",
        "datestamp=20261125",
        "datestamp=20261124",
    ]
    assert [report.missing for report in listed] == [
        (f"datestamp={DAY}/region=us",),
        ("datestamp=20261125/region=eu",),
        (),
    ]
    assert [report.state for report in listed] == [SetState.OPEN, SetState.OPEN, SetState.DONE]
    assert len(catalog.sets.list(TABLE, limit=1)) == 1
    (only,) = catalog.sets.list(TABLE, {"datestamp": "20261125"})
    assert only.present == ("datestamp=20261125/region=us",)
    never = catalog.sets.state(TABLE, {"datestamp": "20261231"})
    assert (never.state, never.expected, never.complete) == (None, 2, False)
    with pytest.raises(InvalidInputError, match="not a set"):
        catalog.sets.state(TABLE, {"datestamp": DAY, "region": "us"})
    with pytest.raises(InvalidInputError, match="between 1 and"):
        catalog.sets.list(TABLE, limit=0)


def test_dones_retained_before_migration_0012_are_generation_one(empty_db_url: str, tmp_path):
    catalog_at(
        empty_db_url,
        "0011",
        "INSERT INTO hcat_tables (db_name, table_name, location, storage_format,"
        " partition_keys, table_type, properties, retention_seconds, topic, created_at,"
        " updated_at, version) VALUES ('web', 'clicks', '/c', 'parquet',"
        " '[\"datestamp\", \"region\"]', 'MANAGED_TABLE', '{}', 86400000, 'hcat.web.clicks',"
        " '2026-01-01 00:00:00', '2026-01-01 00:00:00', 1)",
        "INSERT INTO hcat_mark_set_done (event_id, table_id, spec, spec_json, created_at,"
        " expires_at) SELECT 5, id, 'datestamp=1', '{\"datestamp\": \"1\"}',"
        " '2026-01-01 00:00:00', '2999-01-01 00:00:00' FROM hcat_tables",
    )
    settings = load_settings(home=tmp_path, db_url=empty_db_url)
    with Catalog.open(settings, upgrade=True) as catalog:
        old = catalog.find_covering_done(TABLE, {"datestamp": "1", "region": "us"})
        assert old is not None
        assert (old.event_id, old.generation, old.reason) == (5, 1, None)
        assert catalog.find_covering_done(TABLE, {"datestamp": "1"}, min_generation=2) is None
        assert catalog.get_table(TABLE).rule_version is None
        catalog.expect(TABLE, set_keys="datestamp", min_partitions=1)
        catalog.add_partitions(TABLE, [NewPartition({"datestamp": "2", "region": "us"}, "/w/d")])
        assert [d.headers["HCAT_SPEC"] for d in _dones(catalog)] == ["datestamp=2"]


def test_a_pass_takes_at_most_its_limit_and_says_more_are_due(catalog: Catalog):
    _table(catalog)
    _expect_day(catalog, deadline="datestamp+1d")
    owned = _own(catalog)
    for day in ("20261124", "20261125"):
        _add(catalog, day, "us", "00")
    now = datetime(2026, 11, 27, tzinfo=UTC).timestamp()
    first = catalog.sets.evaluate_due("relay-1", owned, now=now, limit=1)
    assert (first.evaluated, len(first.late), first.more) == (1, 1, True)
    second = catalog.sets.evaluate_due("relay-1", owned, now=now, limit=1)
    assert (second.evaluated, len(second.late), second.more) == (1, 1, False)
    late = _events(catalog, EventType.SET_LATE)
    assert [event.headers["HCAT_SPEC"] for event in late] == [
        "datestamp=20261124",
        "datestamp=20261125",
    ]
    with pytest.raises(InvalidInputError, match="between 1 and"):
        catalog.sets.evaluate_due("relay-1", owned, limit=0)


def test_a_write_that_completes_two_sets_writes_both_dones_after_its_partitions(
    catalog: Catalog,
):
    _table(catalog, ("datestamp", "region"))
    catalog.expect(TABLE, set_keys="datestamp", parts=["region=us,eu"])
    catalog.partitions.register(
        TABLE,
        [
            NewPartition({"datestamp": day, "region": region}, "/w/d", file_count=1)
            for day in ("20261126", "20261125")
            for region in ("us", "eu")
        ],
    )
    dones = _dones(catalog)
    assert [done.headers["HCAT_SPEC"] for done in dones] == [
        "datestamp=20261125",
        "datestamp=20261126",
    ]
    adds = _events(catalog, EventType.ADD_PARTITION)
    assert min(done.event_id for done in dones) > max(add.event_id for add in adds)


def test_the_writing_pass_is_fenced_too(catalog: Catalog, settings):
    """A bucket lost between the pass's read and its write gets nothing written."""
    _table(catalog)
    _expect_day(catalog, deadline_after="1h")
    owned = _own(catalog)
    _fill(catalog, _all_parts()[:1])
    before = _events(catalog)
    (bucket,) = owned
    controller = catalog.group.claim_controller("relay-1", ttl=600)
    assert controller is not None
    assert catalog.group.assign("relay-1", controller, {bucket: "relay-2"})
    engine = engines.open_engine(settings.database_url).execution_options(hcat_write=True)
    try:
        with transaction(engine, settings, catalog.now, catalog.url, group.bucket_count) as tx:
            passed = set_timed.evaluate_due(tx, "relay-1", owned, now=2e10, limit=10)
    finally:
        engine.dispose()
    assert (passed.lost, passed.evaluated) == (frozenset(owned), 0)
    assert _events(catalog) == before


def _table_0012(name: str, keys: str, rule: str) -> list[str]:
    """A table with a rule (version 1) as a catalog at revision 0012 holds it."""
    return [
        "INSERT INTO hcat_tables (db_name, table_name, location, storage_format,"
        " partition_keys, table_type, properties, retention_seconds, topic, created_at,"
        f" updated_at, version, rule_version, set_rule) VALUES ('web', '{name}', '/w/{name}',"
        f" 'parquet', '{keys}', 'MANAGED_TABLE', '{{}}', 86400000, 'hcat.web.{name}',"
        f" '2026-01-01 00:00:00', '2026-01-01 00:00:00', 1, 1, '{rule}')",
        "INSERT INTO hcat_set_rules (table_id, version, rule, principal, created_at)"
        f" SELECT id, 1, '{rule}', NULL, '2026-01-01 00:00:00' FROM hcat_tables"
        f" WHERE table_name = '{name}'",
    ]


def _rows_0012(name: str, partitions: list[str], sets: list[str]) -> list[str]:
    statements = [
        "INSERT INTO hcat_partitions (table_id, partition_values, path_spec, location, job_id,"
        " file_count, total_bytes, archived, event_id, created_at, updated_at, version)"
        f" SELECT id, '{json.dumps([part.split('=')[1] for part in path.split('/')])}',"
        f" '{path}', '/w', NULL, 1, 1, FALSE, NULL, '2026-01-01 00:00:00',"
        f" '2026-01-01 00:00:00', 1 FROM hcat_tables WHERE table_name = '{name}'"
        for path in partitions
    ]
    statements += [
        "INSERT INTO hcat_set_states (table_id, set_spec, bucket, generation, state,"
        " rule_version, first_part_at, last_change_at, late_emitted)"
        f" SELECT id, '{spec}', 0, 1, 'open', 1, 1.0, 1.0, FALSE FROM hcat_tables"
        f" WHERE table_name = '{name}'"
        for spec in sets
    ]
    return statements


def _counts(url: str) -> dict[tuple[str, str], tuple[int, int | None]]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                select(
                    TableRow.table_name,
                    SetStateRow.set_spec,
                    SetStateRow.part_count,
                    SetStateRow.expected_present,
                ).join(TableRow, TableRow.id == SetStateRow.table_id)
            )
            return {(row[0], row[1]): (row[2], row[3]) for row in rows}
    finally:
        engine.dispose()


def test_migration_0013_counts_the_parts_of_existing_sets(empty_db_url: str, tmp_path):
    """Sets from before 0013 get their partition counts; their expected parts are
    counted by the next write, which completes the set exactly once."""
    parts_rule = json.dumps(
        {"set": ["datestamp"], "parts": {"region": "us,eu,apac"}, "onDeadline": "late"}
    )
    least_rule = json.dumps({"set": ["region", "day"], "minPartitions": 3, "onDeadline": "late"})
    catalog_at(
        empty_db_url,
        "0012",
        *_table_0012("clicks", '["datestamp", "region"]', parts_rule),
        *_rows_0012(
            "clicks",
            [
                *("datestamp=1/region=us", "datestamp=1/region=eu", "datestamp=1/region=xx"),
                *("datestamp=2/region=us", "datestamp=10/region=us"),
            ],
            ["datestamp=1", "datestamp=2"],
        ),
        # set keys out of lexical order: the sorted set spec is not the path prefix
        *_table_0012("views", '["region", "day", "hour"]', least_rule),
        *_rows_0012(
            "views",
            ["region=us/day=1/hour=00", "region=us/day=1/hour=01", "region=eu/day=1/hour=00"],
            ["day=1/region=us", "day=1/region=eu"],
        ),
    )
    settings = load_settings(home=tmp_path, db_url=empty_db_url)
    with Catalog.open(settings, upgrade=True):
        pass
    assert _counts(empty_db_url) == {
        ("clicks", "datestamp=1"): (3, None),
        ("clicks", "datestamp=2"): (1, None),
        ("views", "day=1/region=us"): (2, None),
        ("views", "day=1/region=eu"): (1, None),
    }
    with Catalog.open(settings) as catalog:
        # inside the table: the other table's partitions stored at /w (outside it,
        # around both tables) are let be there; at /w/d they would be refused around it
        catalog.add_partitions(
            TABLE, [NewPartition({"datestamp": "2", "region": "eu"}, "/w/clicks/d")]
        )
        assert _dones(catalog) == []
        catalog.add_partitions(
            TABLE, [NewPartition({"datestamp": "1", "region": "apac"}, "/w/clicks/d")]
        )
        (done,) = _dones(catalog)
        assert done.headers["HCAT_SPEC"] == "datestamp=1"
        views = [NewPartition({"region": "us", "day": "1", "hour": "02"}, "/w/views/d")]
        catalog.add_partitions("web.views", views)
        (done,) = _events_of(catalog, "web.views", EventType.MARK_SET_DONE)
        assert done.headers["HCAT_SPEC"] == "day=1/region=us"
    assert _counts(empty_db_url) == {
        ("clicks", "datestamp=1"): (4, 3),
        ("clicks", "datestamp=2"): (2, 2),
        ("views", "day=1/region=us"): (3, None),
        ("views", "day=1/region=eu"): (1, None),
    }


def _events_of(catalog: Catalog, table: str, kind: EventType) -> list[Any]:
    return [e for e in catalog.outbox.catch_up([table], cursor=0) if e.event_type is kind]


def test_the_counts_kept_on_a_set_row_match_a_fresh_count_through_every_kind_of_change(
    catalog: Catalog, settings
):
    """Adds (expected and extra), drops, appends, hand-sent dones and rule changes move
    the row's counts exactly as a fresh count of the set's partitions says."""
    _table(catalog, ("datestamp", "region", "hour"))
    catalog.expect(TABLE, set_keys="datestamp", parts=["region=us,eu", "hour=00..02"])
    rng = random.Random(13)
    present: set[tuple[str, str, str]] = set()
    universe = [(d, r, h) for d in ("1", "2") for r in ("us", "eu", "xx") for h in HOURS[:4]]
    for step in range(60):
        choice = rng.random()
        if step == 30:
            catalog.expect(TABLE, set_keys="datestamp", parts=["region=us,xx", "hour=00..03"])
        elif choice < 0.55 or not present:
            part = rng.choice([p for p in universe if p not in present])
            _add(catalog, *part)
            present.add(part)
        elif choice < 0.75:
            part = rng.choice(sorted(present))
            catalog.partitions.drop(
                TABLE, dict(zip(("datestamp", "region", "hour"), part, strict=True))
            )
            present.discard(part)
        elif choice < 0.9:
            day = rng.choice(sorted(present))[0]
            catalog.mark_set_done(TABLE, {"datestamp": day})
        else:
            day, region, hour = rng.choice(sorted(present))
            job = f"job-{step}"
            path = f"datestamp={day}/region={region}/hour={hour}"
            catalog.commits.begin(
                job,
                TABLE,
                mode=WriteMode.APPEND,
                partitions=[path],
                plan={},
                started_at=catalog.now(),
            )
            catalog.commits.complete(
                job,
                [NewPartition({"datestamp": day, "region": region, "hour": hour}, "/w/d", 1)],
            )
        counts = _counts(settings.database_url)
        for (_, set_spec), (part_count, expected_present) in counts.items():
            report = catalog.sets.state(TABLE, PartitionSpec.parse(set_spec).as_dict())
            assert part_count == len(report.present), (step, set_spec)
            if expected_present is not None and report.expected is not None:
                assert expected_present == report.expected - len(report.missing), (step, set_spec)


def _commit(
    catalog: Catalog, job: str, days: tuple[str, ...], regions: str = "us,eu", **options: Any
) -> Any:
    parts = [(day, region) for day in days for region in regions.split(",")]
    catalog.commits.begin(
        job,
        TABLE,
        mode=WriteMode.APPEND,
        partitions=[f"datestamp={day}/region={region}" for day, region in parts],
        plan={},
        started_at=catalog.now(),
    )
    return catalog.commits.complete(
        job,
        [NewPartition({"datestamp": d, "region": r}, f"/w/{d}{r}", 1) for d, r in parts],
        **options,
    )


def test_a_commit_record_names_the_dones_its_rule_wrote(catalog: Catalog):
    _table(catalog, ("datestamp", "region"))
    catalog.expect(TABLE, set_keys="datestamp", parts=["region=us,eu"])
    record = _commit(catalog, "job-1", ("20261125", "20261126"))
    dones = _dones(catalog)
    assert [done.headers["HCAT_SPEC"] for done in dones] == [
        "datestamp=20261125",
        "datestamp=20261126",
    ]
    assert record.set_done_event_ids == tuple(done.event_id for done in dones)
    assert record.done_event_id == dones[-1].event_id
    entry = catalog.commits.get("job-1")
    assert entry is not None
    assert entry.result == record.as_dict()
    # a done asked for stays the record's done; the rule's are listed beside it
    asked = _commit(catalog, "job-2", ("20261127",), mark_set_done={"datestamp": "20261124"})
    (*_, by_hand, by_rule) = _dones(catalog)
    assert (asked.done_event_id, asked.set_done_event_ids) == (
        by_hand.event_id,
        (by_rule.event_id,),
    )
    nothing = _commit(catalog, "job-3", ("20261128",), regions="us")
    assert (nothing.done_event_id, nothing.set_done_event_ids) == (None, ())


def test_sets_whose_values_differ_only_in_case_are_counted_apart(catalog: Catalog):
    _table(catalog, ("datestamp", "region"))
    catalog.expect(TABLE, set_keys="datestamp", min_partitions=2)
    for day in ("A", "a"):
        catalog.add_partitions(TABLE, [NewPartition({"datestamp": day, "region": "us"}, "/w/d")])
    assert _dones(catalog) == []
    assert [len(catalog.sets.state(TABLE, {"datestamp": day}).present) for day in "Aa"] == [1, 1]
