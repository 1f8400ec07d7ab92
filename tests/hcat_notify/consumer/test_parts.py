"""The consumer's parts without a broker or a catalog: watermarks and dedupe, the paged
catch-up, the broker subscriptions and the one rule of what satisfies a wait."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hcat_notify.consumer import Condition, Notification, Source, Target, matches
from hcat_notify.consumer import catchup as catchup_module
from hcat_notify.consumer.catchup import CatchUp
from hcat_notify.consumer.topics import plan_subscriptions
from hcat_notify.consumer.watermarks import Watermarks
from hcat_notify.errors import TableDroppedError
from hcat_notify.model.cursor import Cursor
from hcat_notify.model.events import EventType
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store.records import OutboxEvent

CLICKS = TableName.parse("web.clicks")


def test_an_event_is_accepted_once_above_its_topics_watermark():
    marks = Watermarks(Cursor({"hcat.web.clicks": 5}, default=2), ["web.clicks"])
    assert not marks.accept("web.clicks", "hcat.web.clicks", 5)  # at the watermark
    assert not marks.accept("web.views", "hcat.web", 9)  # not followed
    assert marks.accept("web.clicks", "hcat.web.clicks", 7)
    assert not marks.accept("web.clicks", "hcat.web.clicks", 6)  # below it now
    assert not marks.accept("web.clicks", "hcat.web", 2)  # other topics: the default
    assert marks.accept("web.clicks", "hcat.web", 3)
    assert not marks.accept("web.clicks", "hcat.web", 3)  # a repeat
    assert marks.cursor == Cursor({"hcat.web.clicks": 7, "hcat.web": 3}, default=2)


def test_a_consumer_without_a_past_stands_at_its_floor():
    marks = Watermarks(Cursor(), ["web.clicks"])
    assert not marks.cursor
    marks.floor = 40
    assert marks.cursor == Cursor(default=40)
    marks.resume({"hcat.web.clicks": 50}, 45, pending=False)
    assert marks.cursor == Cursor({"hcat.web.clicks": 50}, default=45)


def _event(event_id: int) -> OutboxEvent:
    return OutboxEvent(
        event_id=event_id,
        topic="hcat.web.clicks",
        event_type=EventType.MARK_SET_DONE,
        table="web.clicks",
        headers={},
        body="{}",
        created_at=datetime(2026, 11, 23, tzinfo=UTC),
    )


class _PagedReader:
    def __init__(self, ids: list[int]) -> None:
        self.ids = ids
        self.calls: list[tuple[Cursor | None, int, int | None]] = []

    def catch_up(self, tables, *, cursor=None, page_after=0, limit=None):
        self.calls.append((cursor, page_after, limit))
        found = [_event(i) for i in self.ids if i > page_after]
        return found if limit is None else found[:limit]


def test_the_catch_up_is_read_a_page_at_a_time(monkeypatch):
    monkeypatch.setattr(catchup_module, "CATCH_UP_PAGE", 2)
    reader = _PagedReader([1, 2, 3, 4, 5])
    catch_up = CatchUp(reader, [CLICKS])  # type: ignore[arg-type]
    catch_up.begin(Cursor(default=0))
    got = [event.event_id for event in catch_up.page]
    while catch_up.next_page():
        got += [event.event_id for event in catch_up.page]
    assert got == [1, 2, 3, 4, 5]
    assert [after for _, after, _ in reader.calls] == [0, 2, 4]
    assert not catch_up.next_page()
    catch_up.begin(None)  # again (a reconnect), from the start
    assert [event.event_id for event in catch_up.page] == [1, 2]


def test_a_topic_carrying_other_tables_is_filtered_on_the_broker():
    views = TableName.parse("web.views")
    own, shared = plan_subscriptions({CLICKS: "hcat.web.clicks", views: "hcat.web"}, [])
    assert (own.topic, own.selector()) == ("hcat.web.clicks", None)
    assert shared.selector() == "HCAT_TABLE IN ('web.views')"


def _notification(event: EventType, spec: str | None, table: TableName = CLICKS) -> Notification:
    return Notification(
        event_id=7,
        event_type=event,
        table=table,
        spec=None if spec is None else PartitionSpec.parse(spec),
        body={},
        headers={},
        topic="hcat.web.clicks",
        source=Source.LIVE,
    )


def test_one_rule_decides_what_satisfies_a_wait():
    done = Target(Condition.DONE, CLICKS, PartitionSpec.parse("datestamp=1/region=us"))
    broader = _notification(EventType.MARK_SET_DONE, "datestamp=1")
    assert matches(done, broader) == done.match(broader) == PartitionSpec.parse("datestamp=1")
    assert matches(done, _notification(EventType.ADD_PARTITION, "datestamp=1/region=us")) is None
    with pytest.raises(TableDroppedError, match="while waiting for"):
        matches(done, _notification(EventType.DROP_TABLE, None))
    other = _notification(EventType.DROP_TABLE, None, TableName.parse("web.views"))
    assert matches(done, other) is None
