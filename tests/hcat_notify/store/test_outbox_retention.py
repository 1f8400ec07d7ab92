"""The outbox's retention (issue 31): old events nobody needs go, in bounded batches;
whatever a consumer path still needs stays; a read of deleted history is an error."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from hcat_notify.config import Settings
from hcat_notify.errors import HistoryGoneError
from hcat_notify.model.topics import topic_bucket
from hcat_notify.store import Catalog, NewPartition, outbox_retention
from hcat_notify.store.webhooks import LanePosition
from tests.fixtures.published import publish

CLICKS = "hcat.web.clicks"
VIEWS = "hcat.web.views"
URL = "https://hooks.example/in"
DAY = timedelta(days=1)


class _Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> _Clock:
    return _Clock()


@pytest.fixture
def cat(settings: Settings, clock: _Clock) -> Iterator[Catalog]:
    """A catalog on a clock of its own (in the past: the database's clock is later), with
    web.clicks and web.views whose dones expire after an hour."""
    with Catalog.open(settings) as opened:
        catalog = Catalog(opened._engine, settings, clock=clock)
        for name in ("web.clicks", "web.views"):
            catalog.create_table(
                name, location=f"/data/{name}", partition_keys=["ds"], retention=timedelta(hours=1)
            )
        yield catalog


def _events(catalog: Catalog, table: str, count: int) -> list[int]:
    return [catalog.mark_set_done(table, {"ds": f"d{n}"}) for n in range(count)]


def _kept(catalog: Catalog, topic: str) -> list[int]:
    return [e.event_id for e in catalog.outbox.events(limit=10_000) if e.topic == topic]


def test_old_published_events_go_young_and_unpublished_ones_stay(cat: Catalog, clock: _Clock):
    old = _events(cat, "web.clicks", 4)
    publish(cat, CLICKS, old[2])
    clock.now += 2 * DAY
    young = _events(cat, "web.clicks", 1)
    publish(cat, CLICKS, young[0])  # published, but younger than the retention
    done = cat.outbox.sweep(DAY)
    # old[3] is below the topic's progress now: published, it goes too
    assert _kept(cat, CLICKS) == young
    assert done.deleted >= 4
    assert cat.outbox.pruned_through() >= old[3]
    # the prefix topic's CREATE_TABLEs were never published: they stay
    assert done.held.get("unpublished", 0) == 2
    assert [e.event_type.value for e in cat.outbox.events() if e.topic == "hcat"] == [
        "CREATE_TABLE",
        "CREATE_TABLE",
    ]


def test_an_unpublished_event_is_kept(cat: Catalog, clock: _Clock):
    old = _events(cat, "web.clicks", 3)
    publish(cat, CLICKS, old[0])
    clock.now += 2 * DAY
    done = cat.outbox.sweep(DAY)
    assert _kept(cat, CLICKS) == old[1:]
    assert done.by_kind()["unpublished"] == 2 + 2  # and the two CREATE_TABLEs


def test_a_parked_event_is_kept_a_dropped_one_goes(cat: Catalog, clock: _Clock):
    old = _events(cat, "web.clicks", 3)
    for event_id in old[:2]:
        assert cat.outbox.record_refusal(event_id, "too big", limit=1, actor="a")
    cat.outbox.drop_parked([old[1]], actor="ops")
    publish(cat, CLICKS, old[2])  # the relay went on past the parked ones
    clock.now += 2 * DAY
    cat.outbox.sweep(DAY)
    assert _kept(cat, CLICKS) == [old[0]]


def test_nothing_goes_before_its_time_or_with_forever(cat: Catalog, clock: _Clock):
    old = _events(cat, "web.clicks", 2)
    publish(cat, CLICKS, old[1])
    clock.now += 2 * DAY
    assert cat.outbox.sweep(3 * DAY).deleted == 0
    assert cat.outbox.sweep(None).deleted == 0
    assert _kept(cat, CLICKS) == old


def _lane(catalog: Catalog, name: str, topic: str, through: int) -> None:
    """``name`` has had ``topic`` delivered through ``through`` (member ``a``)."""
    info = catalog.webhooks.get(name)
    bucket = topic_bucket(topic, catalog.group.info().bucket_count)
    epoch = catalog.group.owned("a")[bucket].epoch
    at = LanePosition(info.id, info.version, topic, bucket, epoch, through, info.created_at)
    assert catalog.webhooks.record_delivered("a", at) == "ok"


def test_a_webhook_behind_holds_exactly_its_undelivered_events(cat: Catalog, clock: _Clock):
    cat.webhooks.add("behind", URL, "web.clicks", from_event=1)
    old = _events(cat, "web.clicks", 4)
    views = _events(cat, "web.views", 2)
    publish(cat, CLICKS, old[3])
    publish(cat, VIEWS, views[1])
    _lane(cat, "behind", CLICKS, old[1])
    clock.now += 2 * DAY
    done = cat.outbox.sweep(DAY)
    assert _kept(cat, CLICKS) == old[2:]
    assert _kept(cat, VIEWS) == []  # not a table it wants
    # and web.clicks's CREATE_TABLE, on the prefix topic, whose lane it never opened
    assert done.held["webhook behind"] == 2 + 1


def test_a_paused_or_disabled_webhook_holds_its_lanes_never_opened_a_removed_one_nothing(
    cat: Catalog, clock: _Clock
):
    old = _events(cat, "web.clicks", 2)
    views = _events(cat, "web.views", 2)
    cat.webhooks.add("paused", URL, "web.views", from_event=1)
    cat.webhooks.pause("paused")
    cat.webhooks.add("kinds", URL, "web.*", events="ADD_PARTITION", from_event=1)
    gone, _ = cat.webhooks.add("gone", URL, "web.views", from_event=1)
    assert cat.webhooks.disable(gone.id, gone.version, gone.created_at, "410 Gone")
    cat.webhooks.add("removed", URL, "web.*", from_event=1)
    cat.webhooks.remove("removed")
    publish(cat, CLICKS, old[1])
    publish(cat, VIEWS, views[1])
    clock.now += 2 * DAY
    done = cat.outbox.sweep(DAY)
    assert _kept(cat, CLICKS) == []
    assert _kept(cat, VIEWS) == views
    assert {h for h in done.held if h.startswith("webhook")} == {"webhook paused", "webhook gone"}


def test_a_durable_subscriber_behind_holds_its_topics(cat: Catalog, clock: _Clock):
    old = _events(cat, "web.clicks", 3)
    views = _events(cat, "web.views", 2)
    cat.subscriptions.claim("etl", "me", takeover=False)
    # behind on clicks; its floor (where it started) after every views event
    cat.subscriptions.advance("etl", "me", {CLICKS: old[0], "*": views[-1]})
    cat.subscriptions.claim("late", "me", takeover=False)
    cat.subscriptions.advance("late", "me", {"*": views[0]})  # its floor: every topic
    publish(cat, CLICKS, old[2])
    publish(cat, VIEWS, views[1])
    clock.now += 2 * DAY
    done = cat.outbox.sweep(DAY)
    assert _kept(cat, CLICKS) == old[1:]
    assert _kept(cat, VIEWS) == views[1:]
    assert done.held["subscriber etl"] == 2
    assert done.held["subscriber late"] == 1  # views[1]: every clicks event is older


def _published_and_old(cat: Catalog, clock: _Clock) -> tuple[list[int], list[int]]:
    """Three dones of web.clicks and two of web.views, every topic published (the prefix
    topic's CREATE_TABLEs too), then two days pass."""
    clicks = _events(cat, "web.clicks", 3)
    views = _events(cat, "web.views", 2)
    for topic in (CLICKS, VIEWS, "hcat"):
        publish(cat, topic, views[-1])
    clock.now += 2 * DAY
    return clicks, views


def test_a_durable_subscriber_holds_only_the_topics_it_follows(cat: Catalog, clock: _Clock):
    """Its floor is below every event, but it follows web.clicks only: web.views' expired
    events go, web.clicks' above its watermark stay, and only those name it."""
    clicks, views = _published_and_old(cat, clock)
    cat.subscriptions.claim("etl", "me", topics=[CLICKS])
    cat.subscriptions.advance("etl", "me", {CLICKS: clicks[0], "*": 1})
    done = cat.outbox.sweep(DAY)
    assert _kept(cat, CLICKS) == clicks[1:]
    assert _kept(cat, VIEWS) == []
    assert done.held == {"subscriber etl": 2}
    status = cat.outbox.retention(DAY)
    assert (status.oldest_event_id, status.oldest_held_by) == (clicks[1], ("subscriber etl",))
    assert status.last_sweep_held == {"subscriber etl": 2}
    assert views[-1] <= cat.outbox.pruned_through()


def test_a_subscriber_stored_before_its_topics_holds_every_topic_until_its_next_claim(
    cat: Catalog, clock: _Clock
):
    """Claimed without topics (as a version before 0022 left it): every topic from its
    floor, as before; its next claim stores its topics, and it holds only those."""
    clicks, views = _published_and_old(cat, clock)
    cat.subscriptions.claim("etl", "old:1")
    cat.subscriptions.advance("etl", "old:1", {CLICKS: clicks[0], "*": clicks[1]})
    (stored,) = cat.subscriptions.every()
    assert stored.followed is None
    done = cat.outbox.sweep(DAY)
    assert (_kept(cat, CLICKS), _kept(cat, VIEWS)) == (clicks[1:], views)
    assert done.held == {"subscriber etl": 2 + 2}
    assert cat.outbox.retention(DAY).oldest_held_by == ("subscriber etl",)
    cat.subscriptions.claim("etl", "new:1", topics=[CLICKS], takeover=True)
    assert [item.followed for item in cat.subscriptions.every()] == [1]
    assert cat.subscriptions.followed("etl") == [CLICKS]
    done = cat.outbox.sweep(DAY)
    assert (_kept(cat, CLICKS), _kept(cat, VIEWS)) == (clicks[1:], [])
    assert done.held == {"subscriber etl": 2}


def test_a_claim_by_an_older_library_makes_the_subscriber_hold_every_topic_again(
    cat: Catalog, clock: _Clock
):
    """An application on the library before 0022 (it opens a newer catalog) claims etl,
    following both tables, with the SQL its claim runs: it bumps the row's version and
    leaves the stored topics (web.clicks) stale. The sweep holds every topic for it from
    then on; the next claim by this library stores its topics again, raising none of
    them (nothing was deleted past it), and the sweep holds only those."""
    clicks, views = _published_and_old(cat, clock)
    cat.subscriptions.claim("etl", "new:1", topics=[CLICKS])
    cat.subscriptions.advance("etl", "new:1", {CLICKS: clicks[0], "*": 1})
    cat.subscriptions.release("etl", "new:1")
    with cat._engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE hcat_subscribers SET owner = 'old:1', version = version + 1"
                " WHERE name = 'etl'"
            )
        )
    (stored,) = cat.subscriptions.every()
    assert stored.followed is None
    done = cat.outbox.sweep(DAY)
    assert (_kept(cat, CLICKS), _kept(cat, VIEWS)) == (clicks[1:], views)
    assert done.held == {"subscriber etl": 2 + 2 + 1}  # and web.views' CREATE_TABLE
    info = cat.subscriptions.claim("etl", "new:2", topics=[CLICKS], takeover=True)
    assert dict(info.watermarks) == {CLICKS: clicks[0], "*": 1}
    assert [item.followed for item in cat.subscriptions.every()] == [1]
    done = cat.outbox.sweep(DAY)
    assert (_kept(cat, CLICKS), _kept(cat, VIEWS)) == (clicks[1:], [])
    assert done.held == {"subscriber etl": 2}


def test_a_table_re_created_under_another_topic_is_held_at_the_topics_position(
    cat: Catalog, clock: _Clock, caplog: pytest.LogCaptureFixture
):
    """etl follows web.views (its topic then: hcat.web.views); web.views is re-created
    under custom.views, which etl never followed and which carries web.other too. The
    sweep holds, from etl's floor (its position on custom.views), web.views' events on
    every topic and every event of custom.views (web.views' topic now: its catch-up
    reads it, and would meet HistoryGoneError past a deleted one); its claim following
    custom.views for web.views is not a topic followed anew (no raise), and its catch-up
    is complete."""
    first = _events(cat, "web.views", 1)
    cat.subscriptions.claim("etl", "me", tables={"web.views": VIEWS})
    cat.subscriptions.advance("etl", "me", {VIEWS: first[-1], "*": first[-1]})
    cat.tables.drop(cat.get_table("web.views").name)
    cat.create_table(
        "web.views",
        location="/data/views2",
        partition_keys=["ds"],
        retention=timedelta(hours=1),
        topic="custom.views",
    )
    cat.create_table(
        "web.other",
        location="/data/other",
        partition_keys=["ds"],
        retention=timedelta(hours=1),
        topic="custom.views",
    )
    views = _events(cat, "web.views", 3)
    other = _events(cat, "web.other", 1)
    for topic in (VIEWS, CLICKS, "custom.views", "hcat"):
        publish(cat, topic, other[-1])
    clock.now += 2 * DAY
    done = cat.outbox.sweep(DAY)
    assert _kept(cat, "custom.views") == [*views, *other]
    # and web.views' drop (on both topics) and re-creation; not web.other's creation
    assert done.held["subscriber etl"] == 3 + len(views) + len(other)
    with caplog.at_level("INFO", logger="hcat_notify.store.subscriptions"):
        info = cat.subscriptions.claim("etl", "me", tables={"web.views": "custom.views"})
    assert "anew" not in caplog.text
    assert dict(info.watermarks) == {VIEWS: first[-1], "*": first[-1]}
    got = cat.outbox.catch_up(["web.views"], cursor=info.cursor)
    assert [e.event_id for e in got if e.event_id in views] == views
    assert cat.subscriptions.followed("etl") == ["custom.views"]


def test_a_table_re_created_on_a_topic_swept_meanwhile_skips_only_other_tables_events(
    cat: Catalog, clock: _Clock, caplog: pytest.LogCaptureFixture
):
    """etl follows web.views; web.views is dropped, web.other's events on custom.views
    go (nobody holds them), then web.views is re-created under custom.views. etl's claim
    raises custom.views past web.other's deleted events, not past web.views' own: its
    catch-up is complete, without HistoryGoneError."""
    first = _events(cat, "web.views", 1)
    cat.subscriptions.claim("etl", "me", tables={"web.views": VIEWS})
    cat.subscriptions.advance("etl", "me", {VIEWS: first[-1], "*": first[-1]})
    cat.create_table(
        "web.other",
        location="/data/other",
        partition_keys=["ds"],
        retention=timedelta(hours=1),
        topic="custom.views",
    )
    cat.tables.drop(cat.get_table("web.views").name)
    other = _events(cat, "web.other", 2)
    for topic in (VIEWS, "custom.views", "hcat"):
        publish(cat, topic, other[-1])
    clock.now += 2 * DAY
    cat.outbox.sweep(DAY)
    assert _kept(cat, "custom.views") == []
    cat.create_table(
        "web.views",
        location="/data/views2",
        partition_keys=["ds"],
        retention=timedelta(hours=1),
        topic="custom.views",
    )
    views = _events(cat, "web.views", 2)
    publish(cat, "custom.views", views[-1])
    clock.now += 2 * DAY
    cat.outbox.sweep(DAY)
    assert _kept(cat, "custom.views") == views
    with caplog.at_level("INFO", logger="hcat_notify.store.subscriptions"):
        info = cat.subscriptions.claim("etl", "me", tables={"web.views": "custom.views"})
    assert "follows topic custom.views anew" in caplog.text
    assert info.cursor.get("custom.views") == other[-1]
    got = cat.outbox.catch_up(["web.views"], cursor=info.cursor)
    assert [e.event_id for e in got if e.event_id in views] == views


def test_a_claim_raises_a_topic_followed_anew_above_what_was_deleted_of_it(
    cat: Catalog, clock: _Clock, caplog: pytest.LogCaptureFixture
):
    """web.views' events went while the subscriber followed web.clicks only; following
    web.views too, it resumes that topic after them (no HistoryGoneError), the rest of
    its history complete; a topic it still follows keeps its watermark."""
    clicks, views = _published_and_old(cat, clock)
    cat.subscriptions.claim("etl", "me", topics=[CLICKS])
    cat.subscriptions.advance("etl", "me", {CLICKS: clicks[0], "*": 1})
    cat.outbox.sweep(DAY)
    kept = _events(cat, "web.views", 1)
    with pytest.raises(HistoryGoneError):
        cat.outbox.catch_up(["web.views"], cursor=f"*:1,{CLICKS}:{clicks[0]}")
    with caplog.at_level("INFO", logger="hcat_notify.store.subscriptions"):
        info = cat.subscriptions.claim("etl", "me", topics=[CLICKS, VIEWS])
    assert dict(info.watermarks) == {CLICKS: clicks[0], VIEWS: views[-1], "*": 1}
    assert f"follows topic {VIEWS} anew" in caplog.text
    assert f"through {views[-1]}" in caplog.text
    assert info.cursor.get(VIEWS) == views[-1]
    got = cat.outbox.catch_up(["web.clicks", "web.views"], cursor=info.cursor)
    assert [e.event_id for e in got] == [*clicks[1:], *kept]
    caplog.clear()
    with caplog.at_level("INFO", logger="hcat_notify.store.subscriptions"):
        again = cat.subscriptions.claim("etl", "me", topics=[VIEWS, CLICKS])
    assert again.watermarks == info.watermarks
    assert "anew" not in caplog.text


def test_an_unexpired_retained_done_is_kept(settings: Settings, cat: Catalog, clock: _Clock):
    cat.create_table("web.kept", location="/data/kept", partition_keys=["ds"], retention=3 * DAY)
    kept = _events(cat, "web.kept", 2)
    publish(cat, "hcat.web.kept", kept[1])
    clock.now += 2 * DAY
    done = cat.outbox.sweep(DAY)
    assert _kept(cat, "hcat.web.kept") == kept
    assert done.held["retained done"] == 2
    clock.now += 2 * DAY  # expired now
    cat.outbox.sweep(DAY)
    assert _kept(cat, "hcat.web.kept") == []


def test_a_held_event_does_not_stop_later_ones_and_batches_are_bounded(cat: Catalog, clock: _Clock):
    old = _events(cat, "web.clicks", 9)
    assert cat.outbox.record_refusal(old[0], "too big", limit=1, actor="a")  # held for good
    publish(cat, CLICKS, old[-1])
    clock.now += 2 * DAY
    removed: list[int] = []
    done = cat.outbox.sweep(DAY, batch_size=2, progress=removed.append)
    assert _kept(cat, CLICKS) == [old[0]]
    assert done.deleted == 8
    steps = [after - before for before, after in zip([0, *removed], removed, strict=False)]
    assert max(steps) <= 2  # no batch deleted more than it may look at
    assert len(steps) >= 8 // 2 + 1


def test_a_cursor_below_what_was_deleted_is_refused_an_idle_topics_is_not(
    cat: Catalog, clock: _Clock
):
    old = _events(cat, "web.clicks", 3)
    views = _events(cat, "web.views", 1)
    publish(cat, CLICKS, old[2])
    clock.now += 2 * DAY
    fresh = _events(cat, "web.clicks", 1)
    cat.outbox.sweep(DAY)
    with pytest.raises(HistoryGoneError, match=f"oldest complete cursor is .*{CLICKS}:{old[2]}"):
        cat.outbox.catch_up(["web.clicks"], cursor=f"{CLICKS}:{old[0]}")
    got = cat.outbox.catch_up(["web.clicks"], cursor=f"{CLICKS}:{old[2]}")
    assert [e.event_id for e in got] == fresh
    # views[0] was never published: nothing of web.views is gone, an old cursor reads on
    assert [e.event_id for e in cat.outbox.catch_up(["web.views"], cursor=f"{VIEWS}:0")] == views


def test_a_webhook_replay_or_add_from_deleted_history_is_refused_and_changes_nothing(
    cat: Catalog, clock: _Clock
):
    old = _events(cat, "web.clicks", 3)
    publish(cat, CLICKS, old[2])
    clock.now += 2 * DAY
    cat.outbox.sweep(DAY)
    cat.webhooks.add("ops", URL, "web.clicks")
    before = cat.webhooks.get("ops")
    with pytest.raises(HistoryGoneError, match=f"oldest event to deliver from is {old[2] + 1}"):
        cat.webhooks.replay("ops", old[1])
    assert cat.webhooks.get("ops") == before
    with pytest.raises(HistoryGoneError):
        cat.webhooks.add("new", URL, "web.clicks", from_event=old[0])
    assert [h.name for h in cat.webhooks.every()] == ["ops"]
    assert cat.webhooks.replay("ops", old[2] + 1).start_after == old[2]


def test_a_replay_between_a_batchs_judging_and_its_delete_sends_it_back_to_judge(
    cat: Catalog, clock: _Clock
):
    old = _events(cat, "web.clicks", 3)
    publish(cat, CLICKS, old[-1])
    cat.webhooks.add("ops", URL, "web.clicks")  # after the events: it wants none of them
    clock.now += 2 * DAY
    with cat._transaction() as tx:
        judged = outbox_retention.judge_batch(tx, after=0, limit=100, now=clock.now, retention=DAY)
    assert {event_id for event_id, _ in judged.going} >= set(old)
    cat.webhooks.replay("ops", old[0])  # it wants them again
    with cat._transaction(write=True) as tx:
        assert outbox_retention.delete_judged(tx, judged) is False
    assert _kept(cat, CLICKS) == old
    done = cat.outbox.sweep(DAY)  # judged again: the webhook holds them
    assert _kept(cat, CLICKS) == old
    assert done.held["webhook ops"] == len(old)


def test_a_claim_between_a_batchs_judging_and_its_delete_sends_it_back_to_judge(
    cat: Catalog, clock: _Clock
):
    """A claim that follows web.views anew raises its watermark to the mark it reads: a
    batch judged before it must not then delete web.views' events past that mark."""
    clicks, views = _published_and_old(cat, clock)
    cat.subscriptions.claim("etl", "me", topics=[CLICKS])
    cat.subscriptions.advance("etl", "me", {CLICKS: clicks[-1], "*": 1})
    with cat._transaction() as tx:
        judged = outbox_retention.judge_batch(tx, after=0, limit=100, now=clock.now, retention=DAY)
    assert {event_id for event_id, _ in judged.going} >= set(views)
    cat.subscriptions.claim("etl", "me", topics=[CLICKS, VIEWS])  # nothing deleted yet
    with cat._transaction(write=True) as tx:
        assert outbox_retention.delete_judged(tx, judged) is False
    done = cat.outbox.sweep(DAY)  # judged again: it holds web.views from its floor
    assert _kept(cat, VIEWS) == views
    assert done.held["subscriber etl"] == len(views)


def test_an_event_parked_after_it_was_judged_free_is_not_deleted(
    cat: Catalog, clock: _Clock, monkeypatch: pytest.MonkeyPatch
):
    """On PostgreSQL each statement of the judging reads its own snapshot: a relay that
    parks an old event and moves its topic's progress past it between two of them makes
    the event look published. Whatever the judging concluded, the delete keeps it."""
    old = _events(cat, "web.clicks", 3)
    victim = old[1]
    assert cat.outbox.record_refusal(victim, "too big", limit=1, actor="relay")
    publish(cat, CLICKS, old[2])  # the relay went on past it
    clock.now += 2 * DAY
    judge = outbox_retention.judge_batch

    def judged_on_two_snapshots(tx, **options):
        judged = judge(tx, **options)
        judged.going = sorted({*judged.going, (victim, CLICKS)})
        return judged

    monkeypatch.setattr(outbox_retention, "judge_batch", judged_on_two_snapshots)
    done = cat.outbox.sweep(DAY)
    assert victim in [event.event_id for event in cat.outbox.refused()]
    assert _kept(cat, CLICKS) == [victim]
    assert cat.outbox.pruned_through() == old[2]
    assert done.held.get("unpublished", 0) >= 1


def test_a_retention_longer_than_the_calendar_keeps_everything(cat: Catalog, clock: _Clock):
    old = _events(cat, "web.clicks", 2)
    publish(cat, CLICKS, old[-1])
    clock.now += 2 * DAY
    done = cat.outbox.sweep(timedelta(weeks=1_000_000))
    assert (done.deleted, _kept(cat, CLICKS)) == (0, old)


def test_a_batch_larger_than_an_in_list_deletes_all_of_it(cat: Catalog, clock: _Clock):
    cat.add_partitions(
        "web.clicks",
        [NewPartition({"ds": f"p{n}"}, f"/data/web.clicks/ds=p{n}", 1, 1) for n in range(600)],
    )
    newest = cat.last_event_id()
    publish(cat, CLICKS, newest)
    clock.now += 2 * DAY
    done = cat.outbox.sweep(DAY, batch_size=5_000)
    assert done.deleted == 600
    assert _kept(cat, CLICKS) == []
    assert cat.outbox.pruned_through() == newest
