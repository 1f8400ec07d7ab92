"""Completeness rules in the store: the done of a set written by the transaction that
brings its last expected part, exactly once per generation; the timed pass (quiet
periods, deadlines) fenced by the bucket's epoch. SQLite and PostgreSQL."""

from __future__ import annotations

import random
from typing import Any

import pytest

from hcat_notify.model.completeness import SetState
from hcat_notify.model.events import EventType
from hcat_notify.store import Catalog, NewPartition
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
        TABLE, [NewPartition({"datestamp": day, "region": region, "hour": hour}, "/w")]
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
