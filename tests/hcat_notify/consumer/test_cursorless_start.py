"""A consumer that started without a cursor (the retained dones) was owed nothing else
at or below its floor: a later catch-up (a reconnect, a durable restart) starts at the
floor for every topic, so it neither hands out events it was never owed nor meets what
the outbox's retention deleted below the floor. A consumer started with a cursor keeps it
exact. Dones kept 30 days (the tables' retention), the outbox 2 days."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from hcat_notify.config import Settings
from hcat_notify.consumer.catchup import CatchUp
from hcat_notify.consumer.consumer import NotificationConsumer
from hcat_notify.model.cursor import Cursor
from hcat_notify.model.names import TableName
from hcat_notify.store import Catalog, NewPartition
from tests.fakes.broker import FakeBroker
from tests.fixtures.clock import HandClock
from tests.fixtures.published import publish

CLICKS = "hcat.web.clicks"
VIEWS = "hcat.web.views"
DAY = timedelta(days=1)


@pytest.fixture
def clock() -> HandClock:
    return HandClock()


@pytest.fixture
def cat(settings: Settings, clock: HandClock) -> Iterator[Catalog]:
    with Catalog.open(settings) as opened:
        catalog = Catalog(opened._engine, settings, clock=clock)  # on the test's time
        for name in ("web.clicks", "web.views"):
            catalog.create_table(
                name, location=f"/data/{name}", partition_keys=["ds"], retention=30 * DAY
            )
        yield catalog


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    fake = FakeBroker()
    yield fake
    fake.close()


def _add(catalog: Catalog, table: str, ds: str) -> int:
    catalog.add_partitions(table, [NewPartition({"ds": ds}, f"/data/{table}/ds={ds}", 1, 1)])
    return catalog.last_event_id()


def _consumer(
    catalog: Catalog,
    settings: Settings,
    broker: FakeBroker,
    tables: list[str],
    *,
    cursor: str | None = None,
    subscriber: str | None = None,
) -> NotificationConsumer:
    return NotificationConsumer(
        tables,
        settings=settings,
        catalog=catalog,
        connection_factory=broker.connection,
        cursor=cursor,
        subscriber=subscriber,
    )


def _handed(consumer: NotificationConsumer) -> list[int]:
    return [n.event_id for n in consumer.notifications(timeout=0.3)]


def _old_history(catalog: Catalog, clock: HandClock, *, swept: bool) -> tuple[int, int]:
    """A done of web.clicks, then an added partition (not a done, never owed to a
    consumer without a past), both published; ten days pass; the sweep (if ``swept``)
    deletes the partition's event, keeping the done."""
    done = catalog.mark_set_done("web.clicks", {"ds": "a"})
    added = _add(catalog, "web.clicks", "b")
    publish(catalog, CLICKS, added)
    clock.now += 10 * DAY
    if swept:
        assert catalog.outbox.sweep(2 * DAY).deleted == 1
    return done, added


@pytest.mark.parametrize("swept", [False, True], ids=["kept", "swept"])
def test_a_reconnect_after_a_start_without_a_cursor_catches_up_from_the_floor(
    cat: Catalog, clock: HandClock, settings: Settings, broker: FakeBroker, swept: bool
):
    done, floor = _old_history(cat, clock, swept=swept)
    with _consumer(cat, settings, broker, ["web.clicks"]) as consumer:
        assert _handed(consumer) == [done]
        assert consumer.cursor == Cursor({CLICKS: floor}, floor)
        broker.drop()
        later = _add(cat, "web.clicks", "c")  # committed while the connection was down
        # Not the added partition below the floor (never owed), and no HistoryGoneError.
        assert _handed(consumer) == [later]
        assert consumer.cursor == Cursor({CLICKS: later}, floor)


def test_b_a_consumer_started_with_a_cursor_keeps_it_exact(
    cat: Catalog, clock: HandClock, settings: Settings, broker: FakeBroker
):
    done, added = _old_history(cat, clock, swept=False)
    with _consumer(cat, settings, broker, ["web.clicks"], cursor=f"{CLICKS}:{done}") as consumer:
        assert _handed(consumer) == [added]  # every event after the watermark
        assert str(consumer.cursor) == f"{CLICKS}:{added}"
        broker.drop()
        later = _add(cat, "web.clicks", "c")
        assert _handed(consumer) == [later]
        assert str(consumer.cursor) == f"{CLICKS}:{later}"


def test_c_a_durable_subscriber_restarts_after_a_start_without_a_cursor(
    cat: Catalog, clock: HandClock, settings: Settings, broker: FakeBroker
):
    done, floor = _old_history(cat, clock, swept=True)
    with _consumer(cat, settings, broker, ["web.clicks"], subscriber="etl") as first:
        assert _handed(first) == [done]
    (stored,) = cat.subscriptions.every()
    # The watermark below the floor is raised to it: the sweep need not keep what lies
    # between them for this subscriber.
    assert dict(stored.watermarks) == {CLICKS: floor, "*": floor, "*retained": floor}
    later = _add(cat, "web.clicks", "c")
    with _consumer(cat, settings, broker, ["web.clicks"], subscriber="etl") as again:
        assert _handed(again) == [later]


def test_d_a_durable_subscriber_stopped_in_its_first_catch_up_starts_it_again(
    cat: Catalog, clock: HandClock, settings: Settings, broker: FakeBroker
):
    """It handled the done of web.clicks and stopped before it handed out the rest of the
    retained dones; the sweep then deleted web.views' added partition (below the floor:
    never owed), and web.views got a partition while it was away. Its restart hands out
    the rest of the retained dones, once, then every event after its floor, then what
    comes live."""
    clicks_done = cat.mark_set_done("web.clicks", {"ds": "a"})
    views_done = cat.mark_set_done("web.views", {"ds": "a"})
    added = _add(cat, "web.views", "x")
    publish(cat, CLICKS, added)
    publish(cat, VIEWS, added)
    tables = ["web.clicks", "web.views"]
    first = _consumer(cat, settings, broker, tables, subscriber="etl")
    with first:
        assert first.run(lambda _: None, max_messages=1) == 1
    (stored,) = cat.subscriptions.every()
    assert dict(stored.watermarks) == {CLICKS: clicks_done, "*": added, "*retained": 0}
    clock.now += 10 * DAY
    assert cat.outbox.sweep(2 * DAY).deleted == 1
    away = _add(cat, "web.views", "z")
    with _consumer(cat, settings, broker, tables, subscriber="etl") as again:
        assert str(again.cursor) == f"*:{clicks_done}"  # at the last done handed
        assert _handed(again) == [views_done, away]
        later = _add(cat, "web.views", "y")
        broker.drop()
        assert _handed(again) == [later]
    (stored,) = cat.subscriptions.every()
    assert (stored.watermarks["*"], stored.watermarks["*retained"]) == (added, added)
    assert stored.cursor == Cursor({CLICKS: added, VIEWS: later}, added)


def test_e_the_retained_dones_stop_at_the_floor(catalog: Catalog):
    """A done committed after the floor was read comes live, in order with its topic's
    other events, not ahead of them in the catch-up."""
    catalog.create_table("web.clicks", location="/c", partition_keys=["ds"])
    ids = [catalog.mark_set_done("web.clicks", {"ds": str(n)}) for n in range(3)]
    catch_up = CatchUp(catalog, [TableName.parse("web.clicks")])
    catch_up.begin(None, through=ids[1])
    assert [event.event_id for event in catch_up.page] == ids[:2]
    assert not catch_up.next_page()


def test_f_the_cursor_during_the_retained_dones_skips_none_of_them(
    cat: Catalog, settings: Settings, broker: FakeBroker
):
    """Handed out in id order across topics: a cursor at the last one handed, for every
    topic, resumes with the rest (a topic's own watermark would skip the other topics'
    dones below the floor)."""
    tables = ["web.clicks", "web.views"]
    clicks = cat.mark_set_done("web.clicks", {"ds": "a"})
    views = cat.mark_set_done("web.views", {"ds": "a"})
    again = cat.mark_set_done("web.clicks", {"ds": "b"})
    with _consumer(cat, settings, broker, tables) as first:
        assert first.run(lambda _: None, max_messages=1) == 1
        cursor = str(first.cursor)
    assert cursor == f"*:{clicks}"
    with _consumer(cat, settings, broker, tables, cursor=cursor) as resumed:
        assert _handed(resumed) == [views, again]


def test_g_a_subscriber_stored_by_an_earlier_version_resumes_by_its_watermarks(
    cat: Catalog, clock: HandClock, settings: Settings, broker: FakeBroker
):
    """Stored by an earlier version: watermarks, no floor (stopped in its first catch-up,
    or restarted so and run live since). The sweep holds every topic of it from its start
    (it would resume there); the restart resumes by the watermarks, as that version did,
    then stores its floor, and the sweep goes by it from then on."""
    clicks_done = cat.mark_set_done("web.clicks", {"ds": "a"})
    views_done = cat.mark_set_done("web.views", {"ds": "a"})
    added = _add(cat, "web.views", "x")
    publish(cat, VIEWS, added)
    cat.subscriptions.claim("etl", "old:1")
    cat.subscriptions.advance("etl", "old:1", {CLICKS: clicks_done})
    cat.subscriptions.release("etl", "old:1")
    clock.now += 10 * DAY
    swept = cat.outbox.sweep(2 * DAY)
    assert swept.deleted == 0  # added is held for etl (so are the CREATE_TABLEs)
    assert swept.held["subscriber etl"] >= 1
    away = _add(cat, "web.clicks", "b")  # committed while it is stopped for the upgrade
    tables = ["web.clicks", "web.views"]
    with _consumer(cat, settings, broker, tables, subscriber="etl") as again:
        assert _handed(again) == [views_done, added, away]
    (stored,) = cat.subscriptions.every()
    assert stored.cursor == Cursor({CLICKS: away, VIEWS: away}, away)
    publish(cat, CLICKS, away)
    clock.now += 10 * DAY
    assert cat.outbox.sweep(2 * DAY).held.get("subscriber etl") is None


def test_h_a_subscriber_an_earlier_version_ran_live_without_a_floor_misses_nothing(
    cat: Catalog, clock: HandClock, settings: Settings, broker: FakeBroker
):
    """Review finding: the earlier version resumed a subscriber stopped in its first
    catch-up by its watermarks and never stored a floor; it then ran live. Stopped for the
    upgrade, the events committed meanwhile come when the new version starts it."""
    cat.mark_set_done("web.clicks", {"ds": "a"})
    live = _add(cat, "web.clicks", "b")  # handled live by the earlier version
    publish(cat, CLICKS, live)
    cat.subscriptions.claim("etl", "old:1")
    cat.subscriptions.advance("etl", "old:1", {CLICKS: live})
    cat.subscriptions.release("etl", "old:1")
    away = _add(cat, "web.clicks", "c")
    with _consumer(cat, settings, broker, ["web.clicks"], subscriber="etl") as again:
        assert _handed(again) == [away]


def test_i_the_cursor_shown_of_a_subscriber_handing_out_its_retained_dones_skips_none(
    cat: Catalog, clock: HandClock, settings: Settings, broker: FakeBroker
):
    """Review finding: ``subscribers`` showed its watermarks with its floor as the
    default, which claimed the topics it had not handed a done of yet."""
    cat.mark_set_done("web.clicks", {"ds": "a"})
    views_done = cat.mark_set_done("web.views", {"ds": "a"})
    tables = ["web.clicks", "web.views"]
    with _consumer(cat, settings, broker, tables, subscriber="etl") as first:
        assert first.run(lambda _: None, max_messages=1) == 1
    (stored,) = cat.subscriptions.every()
    with _consumer(cat, settings, broker, tables, cursor=str(stored.cursor)) as resumed:
        assert views_done in _handed(resumed)


def test_j_a_table_followed_anew_after_its_events_were_swept_starts_after_them(
    cat: Catalog,
    clock: HandClock,
    settings: Settings,
    broker: FakeBroker,
    caplog: pytest.LogCaptureFixture,
):
    """etl followed web.clicks only: the sweep held web.clicks' events for it and deleted
    web.views'. Started following both tables, it hands out every web.clicks event it
    missed and the web.views events the outbox still has; it starts (and restarts)
    without HistoryGoneError."""
    done = cat.mark_set_done("web.clicks", {"ds": "a"})
    with _consumer(cat, settings, broker, ["web.clicks"], subscriber="etl") as first:
        assert _handed(first) == [done]
    missed = [_add(cat, "web.clicks", "b"), _add(cat, "web.clicks", "c")]
    gone = [_add(cat, "web.views", "x"), _add(cat, "web.views", "y")]
    for topic in (CLICKS, VIEWS, "hcat"):
        publish(cat, topic, gone[-1])
    clock.now += 10 * DAY
    swept = cat.outbox.sweep(2 * DAY)
    assert swept.held == {"subscriber etl": 2, "retained done": 1}
    assert cat.outbox.pruned_through() == gone[-1]
    kept = _add(cat, "web.views", "z")
    tables = ["web.clicks", "web.views"]
    with caplog.at_level("INFO", logger="hcat_notify.store.subscriptions"):
        with _consumer(cat, settings, broker, tables, subscriber="etl") as again:
            assert _handed(again) == [*missed, kept]
    assert f"follows topic {VIEWS} anew" in caplog.text
    assert f"through {gone[-1]}" in caplog.text
    later = _add(cat, "web.views", "w")
    with _consumer(cat, settings, broker, tables, subscriber="etl") as restarted:
        assert _handed(restarted) == [later]
    (stored,) = cat.subscriptions.every()
    assert stored.followed == 2
    assert stored.cursor.get(VIEWS) == later


def test_k_a_followed_table_re_created_under_another_topic_keeps_its_events(
    cat: Catalog, clock: HandClock, settings: Settings, broker: FakeBroker
):
    """etl follows web.views; while it is stopped, web.views is dropped and re-created
    under another topic (an override), which etl never followed. The sweep holds the
    re-created table's events for it all the same (it follows the table), and its next
    start neither raises that topic past them nor misses any: the catch-up is complete."""
    first = cat.mark_set_done("web.views", {"ds": "a"})
    with _consumer(cat, settings, broker, ["web.views"], subscriber="etl") as run:
        assert _handed(run) == [first]
    cat.tables.drop(cat.get_table("web.views").name)
    cat.create_table(
        "web.views",
        location="/data/views2",
        partition_keys=["ds"],
        retention=30 * DAY,
        topic="custom.views",
    )
    created = cat.last_event_id()
    added = [_add(cat, "web.views", ds) for ds in ("b", "c", "d")]
    for topic in (VIEWS, "custom.views", "hcat"):
        publish(cat, topic, added[-1])
    clock.now += 10 * DAY
    swept = cat.outbox.sweep(2 * DAY)
    assert swept.held["subscriber etl"] >= len(added)
    with _consumer(cat, settings, broker, ["web.views"], subscriber="etl") as again:
        handed = _handed(again)
    assert [event for event in handed if event > created] == added
