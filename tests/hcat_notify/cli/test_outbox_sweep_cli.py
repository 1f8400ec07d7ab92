"""``hcat-notify sweep`` prunes the outbox too and says what held it back; ``status``
shows the outbox's span and holders; ``webhooks add|replay --from-event`` below what was
deleted is one line, nothing written (issue 31)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest

from hcat_notify.config import load_settings
from hcat_notify.store import Catalog
from tests.fixtures.published import publish

Run = Callable[..., tuple[int, str, str]]
TOPIC = "hcat.web.clicks"
URL = "https://hooks.example.com/in"


@pytest.fixture
def old_events(db_url: str, tmp_path) -> Iterator[list[int]]:
    """Four dones of web.clicks written on 2026-01-01, the first three published."""
    settings = load_settings(home=tmp_path / "home", db_url=db_url)
    with Catalog.open(settings) as opened:
        start = datetime(2026, 1, 1, tzinfo=UTC)
        past = Catalog(opened._engine, settings, clock=lambda: start)
        past.create_table("web.clicks", location="/data/c", partition_keys=["ds"])
        ids = [past.mark_set_done("web.clicks", {"ds": str(n)}) for n in range(4)]
        publish(past, TOPIC, ids[2])
        past.subscriptions.claim("etl", "host:1")
        # started at ids[0] (its floor, which every subscriber of this version stores)
        past.subscriptions.advance("etl", "host:1", {TOPIC: ids[0], "*": ids[0]})
        yield ids


def test_sweep_prunes_the_outbox_and_names_what_holds_it(run: Run, old_events: list[int]):
    code, out, err = run("-o", "json", "sweep", "--batch-size", "2")
    assert code == 0, err
    report = json.loads(out)["outbox"]
    assert report["deleted"] == 1  # ids[0]: published and handled by etl
    assert report["held_by"]["subscriber etl"] == 3
    assert report["held_by_kind"]["unpublished"] == 2  # ids[3], the CREATE_TABLE
    code, out, err = run("sweep")
    assert code == 0, err
    assert "held back 4 (subscriber 3, unpublished 2)" in out  # ids[3] held twice
    assert "subscriber etl holds 3 event(s)" in out
    code, out, err = run("status")
    assert code == 0, err
    assert f"deleted through event {old_events[0]}" in out
    assert "oldest event held by: unpublished" in out  # the CREATE_TABLE on hcat
    assert "last sweep held back: subscriber etl 3, unpublished 2" in out


def test_a_start_below_what_was_deleted_is_one_line_and_writes_nothing(
    run: Run, old_events: list[int]
):
    code, _, err = run("subscribers", "--remove", "gone")
    assert (code, err.count("\n")) == (2, 1)
    assert "no durable subscriber named 'gone'" in err
    code, out, err = run("subscribers", "--remove", "etl")  # it held the outbox back
    assert code == 0, err
    assert "removed durable subscriber(s) etl" in out
    assert run("sweep")[0] == 0
    assert run("webhooks", "add", "ops", URL, "--tables", "web.clicks")[0] == 0
    before = run("-o", "json", "webhooks", "list")[1]
    for args in (
        ("webhooks", "replay", "ops", "--from-event", str(old_events[1])),
        ("webhooks", "add", "new", URL, "--tables", "web.clicks", "--from-event", "1"),
    ):
        code, out, err = run(*args)
        assert code == 2
        assert out == ""
        assert err.count("\n") == 1
        assert f"the oldest event to deliver from is {old_events[2] + 1}" in err
    assert run("-o", "json", "webhooks", "list")[1] == before


def test_subscribers_show_the_topics_each_follows(
    run: Run, old_events: list[int], db_url: str, tmp_path
):
    code, out, err = run("-o", "json", "subscribers")
    assert code == 0, err
    (etl,) = json.loads(out)
    assert (etl["followed_count"], etl["followed_topics"]) == (None, [])  # claimed before 0022
    assert "follows every topic (claimed before 0022" in run("subscribers")[1]
    settings = load_settings(home=tmp_path / "home", db_url=db_url)
    with Catalog.open(settings) as catalog:
        catalog.subscriptions.claim(
            "etl", "host:1", tables={"web.views": "hcat.web.views", "web.clicks": TOPIC}
        )
    code, out, err = run("-o", "json", "subscribers")
    assert code == 0, err
    (etl,) = json.loads(out)
    assert (etl["followed_count"], etl["followed_topics"]) == (2, [TOPIC, "hcat.web.views"])
    assert etl["followed_tables"] == ["web.clicks", "web.views"]
    assert "follows 2 topic(s)" in run("subscribers")[1]


def test_subscribers_lag_counts_the_followed_topics_from_where_each_stands(
    run: Run, old_events: list[int], db_url: str, tmp_path
):
    def lags() -> dict[str, int]:
        code, out, err = run("-o", "json", "subscribers")
        assert code == 0, err
        return {item["subscriber"]: item["lag_total"] for item in json.loads(out)}

    # claimed before 0022: the topics it has watermarks of, after its watermark
    assert lags() == {"etl": 3}
    settings = load_settings(home=tmp_path / "home", db_url=db_url)
    with Catalog.open(settings) as catalog:
        # only a floor: every followed topic stands at it
        catalog.subscriptions.claim("late", "host:2", topics=[TOPIC])
        catalog.subscriptions.advance("late", "host:2", {"*": old_events[1]})
        # a watermark of a topic it no longer follows is not lag
        catalog.subscriptions.claim("etl", "host:1", takeover=True, topics=["hcat.web.views"])
    assert lags() == {"etl": 0, "late": 2}
    assert "late: host:2, heartbeat" in run("subscribers")[1]
    assert "2 event(s) behind" in run("subscribers")[1]
