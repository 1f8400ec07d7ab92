"""The lag of every durable subscriber (``/metrics``, ``hcat-notify subscribers``) is read
in a few statements whatever their number: it was one transaction per subscriber and one
COUNT per topic each, 10,000 statements a scrape at 1,000 subscribers of 10 topics
(issue 31)."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from hcat_notify.cli import main as cli_main
from hcat_notify.config import Settings
from hcat_notify.store import Catalog

TABLES = ("web.a", "web.b", "web.c")


@contextlib.contextmanager
def statements() -> Iterator[list[str]]:
    """The SQL statements any engine runs meanwhile."""
    seen: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    event.listen(Engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", note)


def listed(settings: Settings) -> tuple[dict[str, dict[str, int]], int]:
    """``hcat-notify -o json subscribers``: each subscriber's lag per topic; the
    statements it ran that read the outbox."""
    out = io.StringIO()
    with statements() as seen, contextlib.redirect_stdout(out):
        code = cli_main(["--db-url", settings.database_url, "-o", "json", "subscribers"])
    assert code == 0
    lags = {item["subscriber"]: item["lag"] for item in json.loads(out.getvalue())}
    return lags, sum("hcat_outbox" in statement for statement in seen)


@pytest.fixture
def topics(catalog: Catalog) -> dict[str, list[int]]:
    """Three tables, each on its own topic, with 5 dones each: the topic's event ids."""
    found: dict[str, list[int]] = {}
    for name in TABLES:
        info = catalog.create_table(name, location=f"/data/{name}", partition_keys=["ds"])
        found[info.topic] = [catalog.mark_set_done(name, {"ds": str(n)}) for n in range(5)]
    return found


def test_the_lag_of_many_subscribers_is_read_in_as_many_statements_as_of_few(
    catalog: Catalog, settings: Settings, topics: dict[str, list[int]]
):
    names = sorted(topics)
    expected: dict[str, dict[str, int]] = {}
    for n in range(24):
        name = f"s{n:02d}"
        followed = names[: 1 + n % 3]
        catalog.subscriptions.claim(name, "host:1", topics=followed)
        # each stands somewhere else on its first topic; a floor on the others
        first = topics[followed[0]]
        floor = topics[names[0]][n % 5] if n % 2 else 0
        marks = {followed[0]: first[n % 5], "*": floor} if floor else {followed[0]: first[n % 5]}
        catalog.subscriptions.advance(name, "host:1", marks)
        expected[name] = {
            topic: sum(1 for event_id in ids if event_id > max(marks.get(topic, 0), floor))
            for topic, ids in topics.items()
            if topic in followed
        }
        if n == 1:
            few_lags, few = listed(settings)
            assert few_lags == expected
    many_lags, many = listed(settings)
    assert many_lags == expected
    assert any(lag for lags in many_lags.values() for lag in lags.values())
    assert many <= few, (few, many)


def test_a_subscriber_claimed_before_0022_counts_the_topics_it_has_watermarks_of(
    catalog: Catalog, settings: Settings, topics: dict[str, list[int]]
):
    names = sorted(topics)
    catalog.subscriptions.claim("old", "host:1")  # no topics: as a library before 0022
    catalog.subscriptions.advance("old", "host:1", {names[1]: topics[names[1]][3]})
    catalog.subscriptions.claim("new", "host:2", topics=[names[2]])
    lags, _ = listed(settings)
    assert lags == {"old": {names[1]: 1}, "new": {names[2]: 5}}
