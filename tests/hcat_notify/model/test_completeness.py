"""Completeness rules as values: parsed from the command line's strings, stored as JSON,
their expected parts and deadlines; the messages they send, against schemas/."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hcat_notify.errors import InvalidInputError, InvalidRuleError
from hcat_notify.model.completeness import (
    OnDeadline,
    SetRule,
    deadline_at,
    expected_parts,
    parse_duration,
    parse_rule,
)
from hcat_notify.model.events import EventType
from hcat_notify.model.names import TableName
from hcat_notify.model.set_events import SetVerdict, build_set_event, build_set_rule
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.wire import build_mark_set_done
from tests.wire import validate_message

KEYS = ("datestamp", "region", "hour")
CLICKS = TableName("web", "clicks")


def _parts(*args: str, keys: tuple[str, ...] = KEYS, set_keys: str = "datestamp") -> list[str]:
    rule = parse_rule(keys, set_keys=set_keys, parts=list(args))
    parts = expected_parts(rule)
    assert parts is not None
    return list(parts)


def test_enumerated_values_and_zero_padded_hours_make_72_parts():
    parts = _parts("region=us,eu,apac", "hour=00..23")
    assert len(parts) == 72
    assert parts[:2] == ["region=us/hour=00", "region=us/hour=01"]
    assert parts[-1] == "region=apac/hour=23"


def test_parts_are_given_in_any_order_and_kept_in_the_tables():
    rule = parse_rule(KEYS, set_keys=["datestamp"], parts={"hour": "0..2", "region": "us"})
    assert rule.part_keys == ("region", "hour")
    assert expected_parts(rule) == ("region=us/hour=0", "region=us/hour=1", "region=us/hour=2")


@pytest.mark.parametrize(
    ("expression", "values"),
    [
        ("20260227..20260302", ["20260227", "20260228", "20260301", "20260302"]),
        ("2024-02-28..2024-03-01", ["2024-02-28", "2024-02-29", "2024-03-01"]),
        ("8..11", ["8", "9", "10", "11"]),
        # eight digits, neither end a date: integers, as before
        ("10000000..10000002", ["10000000", "10000001", "10000002"]),
        ("08..11", ["08", "09", "10", "11"]),
        ("00..02,12,20..21", ["00", "01", "02", "12", "20", "21"]),
        ("a, b ,c", ["a", "b", "c"]),
        ("us%2Feast", ["us%2Feast"]),
    ],
)
def test_ranges_and_lists(expression: str, values: list[str]):
    parts = _parts(f"day={expression}", keys=("month", "day"), set_keys="month")
    escaped = [PartitionSpec((("day", value),)).to_path() for value in values]
    assert parts == escaped


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("10m", 600), ("4h", 14400), ("1d", 86400), ("1h30m", 5400)],
)
def test_durations(text: str, seconds: int):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "ten minutes", "10x", "-5", "1.5h", "m"])
def test_a_bad_duration_names_itself(text: str):
    with pytest.raises(InvalidRuleError, match="duration"):
        parse_duration(text)


def test_the_stored_form_round_trips():
    rule = parse_rule(
        KEYS,
        set_keys="datestamp",
        parts=["region=us,eu", "hour=00..23"],
        quiet="10m",
        deadline="datestamp+1d  06:00",
        on_deadline="done",
    )
    assert SetRule.from_json(rule.as_json(), KEYS) == rule
    assert rule.as_json()["deadline"] == "datestamp+1d 06:00"
    assert (rule.quiet_seconds, rule.on_deadline, rule.expected_count) == (600, OnDeadline.DONE, 48)
    assert rule.describe() == (
        "--set datestamp --parts region=us,eu hour=00..23 --quiet 600s "
        "--deadline 'datestamp+1d 06:00' --on-deadline done"
    )
    previous = parse_rule(KEYS, set_keys="datestamp", like_previous=True, deadline_after="4h")
    assert SetRule.from_json(previous.as_json(), KEYS) == previous
    assert expected_parts(previous) is None
    assert previous.expected_count is None


def test_a_stored_rule_that_no_longer_fits_is_refused():
    rule = parse_rule(KEYS, set_keys="datestamp", min_partitions=3)
    with pytest.raises(InvalidRuleError, match="not a partition key"):
        SetRule.from_json(rule.as_json(), ("ds", "region"))
    with pytest.raises(InvalidRuleError, match="object"):
        SetRule.from_json({"parts": {}}, KEYS)
    assert issubclass(InvalidRuleError, InvalidInputError)


def test_deadlines_relative_to_the_set_and_after_its_first_part():
    rule = parse_rule(KEYS, set_keys="datestamp", min_partitions=1, deadline="datestamp+1d 06:30")
    day = PartitionSpec.from_mapping({"datestamp": "20261231"})
    assert deadline_at(rule, day, None) == datetime(2027, 1, 1, 6, 30, tzinfo=UTC).timestamp()
    dashed = PartitionSpec.from_mapping({"datestamp": "2026-12-31"})
    assert deadline_at(rule, dashed, None) == deadline_at(rule, day, None)
    assert deadline_at(rule, PartitionSpec.from_mapping({"datestamp": "latest"}), None) is None
    plain = parse_rule(KEYS, set_keys="datestamp", min_partitions=1, deadline="datestamp")
    assert deadline_at(plain, day, None) == datetime(2026, 12, 31, tzinfo=UTC).timestamp()
    after = parse_rule(KEYS, set_keys="datestamp", min_partitions=1, deadline_after="4h")
    assert deadline_at(after, day, 1000.0) == 1000.0 + 4 * 3600
    assert deadline_at(after, day, None) is None


def test_the_set_messages_match_their_schemas():
    spec = PartitionSpec.from_mapping({"datestamp": "20261126"})
    verdict = SetVerdict(
        spec=spec,
        generation=2,
        rule_version=3,
        expected=72,
        present=70,
        missing=["datestamp=20261126/region=us/hour=00", "datestamp=20261126/region=eu/hour=01"],
        deadline=1795766400.0,
    )
    for kind in (EventType.SET_LATE, EventType.SET_REOPENED):
        message = build_set_event(
            kind, verdict, event_id=9, table=CLICKS, topic="hcat.web.clicks", timestamp=1
        )
        body = validate_message(message.headers, message.body)
        assert (body["missingCount"], body["generation"]) == (2, 2)
        assert message.headers["HCAT_SET_GENERATION"] == "2"
        assert message.headers["HCAT_RULE_VERSION"] == "3"
        assert message.headers["HCAT_SPEC"] == "datestamp=20261126"
    with pytest.raises(InvalidInputError):
        build_set_event(
            EventType.MARK_SET_DONE, verdict, event_id=9, table=CLICKS, topic="t", timestamp=1
        )
    rule = parse_rule(KEYS, set_keys="datestamp", parts=["region=us", "hour=00..23"])
    for stored in (rule.as_json(), None):
        message = build_set_rule(
            event_id=10,
            table=CLICKS,
            topic="hcat.web.clicks",
            timestamp=1,
            version=4,
            rule=stored,
            principal="etl",
        )
        body = validate_message(message.headers, message.body)
        assert (body["rule"], message.headers["HCAT_SPEC"]) == (stored, "")
    done = build_mark_set_done(
        event_id=11,
        table=CLICKS,
        topic="hcat.web.clicks",
        spec=spec,
        timestamp=1,
        generation=3,
        reason="changed",
        rule_version=4,
    )
    body = validate_message(done.headers, done.body)
    assert (body["generation"], body["reason"], body["ruleVersion"]) == (3, "changed", 4)
    assert done.headers["HCAT_DONE_REASON"] == "changed"
