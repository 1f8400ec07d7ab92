"""What the webhooks' overviews cost does not grow with the topics they deliver (issue 31):
``/metrics``'s figures per webhook, ``status``'s parked pairs and ``webhooks show``'s
first page. Measured as rows read into Python (both backends), as SQLite's
virtual-machine steps, and on PostgreSQL as the plan of each statement, never as time."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import event

from hcat_notify.api.metrics import CatalogCollector
from hcat_notify.cli import main
from hcat_notify.store import Catalog
from hcat_notify.store.models import WebhookProgressRow
from tests.fixtures.catalog_rows import insert_webhook_progress
from tests.fixtures.plans import plans_without_seqscan
from tests.fixtures.sqlite_work import sqlite_work

SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
POSTGRES = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
FLAT = 1.5  # the bound: at most 1.5 x the work at the small size
URL = "https://hooks.example.com/in"
HOOKS = ("alpha", "beta", "gamma")


def _hooks(catalog: Catalog) -> dict[str, int]:
    catalog.create_table("web.t", location="/w/t", partition_keys=["ds"])
    for name in HOOKS:
        catalog.webhooks.add(name, URL, "web.*", from_event=2)  # the next event
    return {info.name: info.id for info in catalog.webhooks.every()}


def _topics(db_url: str, ids: dict[str, int], first: int, count: int) -> None:
    """``count`` more delivered topics per webhook; every 500th fails, every 1000th is
    parked (as the relay records them), so that a few of each are among many; and each
    webhook's highest delivered event id moved to theirs, as the recorder's fence does."""
    rows = []
    for name, hook in ids.items():
        for n in range(first, first + count):
            failing = n % 500 == 250
            parked = n % 1000 == 999
            rows.append(
                {
                    "webhook_id": hook,
                    "topic": f"hcat.web.t{n:06d}",
                    "bucket": n % 256,
                    "last_event_id": 10 + n + (7 if name == "beta" else 0),
                    "epoch": 1,
                    "updated_at": 1.0,
                    "attempts": 3 if failing or parked else 0,
                    "retry_at": 2.0 if failing or parked else None,
                    "failing_since": 1.0 if failing or parked else None,
                    "last_error": "HTTP 500" if failing or parked else None,
                    "parked_at": 1.5 if parked else None,
                }
            )
    insert_webhook_progress(db_url, rows)


def _rows_read(run: Callable[[], object]) -> int:
    """Webhook progress rows read into Python while ``run`` runs."""
    loaded = [0]

    def count(*_: Any) -> None:
        loaded[0] += 1

    event.listen(WebhookProgressRow, "load", count)
    try:
        run()
    finally:
        event.remove(WebhookProgressRow, "load", count)
    return loaded[0]


def _webhook_samples(catalog: Catalog) -> dict[tuple[str, str], float]:
    return {
        (sample.name, sample.labels["webhook"]): sample.value
        for family in CatalogCollector(lambda: catalog).collect()
        if family.name.startswith("hcat_notify_webhook_")
        and family.name != "hcat_notify_webhook_state"
        for sample in family.samples
    }


def _status(db_url: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["--db-url", db_url, "-o", "json", "status"]) == 0
    found: dict[str, Any] = json.loads(capsys.readouterr().out)
    return found


def _show(db_url: str, capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["--db-url", db_url, "-o", "json", "webhooks", "show", *args]) == 0
    found: dict[str, Any] = json.loads(capsys.readouterr().out)
    return found


def test_metrics_status_and_show_read_no_topic_row_they_do_not_show(
    catalog: Catalog, db_url: str, capsys: pytest.CaptureFixture[str]
):
    ids = _hooks(catalog)
    _topics(db_url, ids, 0, 3000)
    # /metrics: the figures from indexes, no progress row read (was: every row, per webhook)
    assert _rows_read(lambda: _webhook_samples(catalog)) == 0
    samples = _webhook_samples(catalog)
    for name in HOOKS:
        assert samples[("hcat_notify_webhook_failing_topics", name)] == 6  # 250, 750, ...
        assert samples[("hcat_notify_webhook_parked_topics", name)] == 3  # 999, 1999, 2999
    assert samples[("hcat_notify_webhook_delivered_event_id", "alpha")] == 10 + 2999
    assert samples[("hcat_notify_webhook_delivered_event_id", "beta")] == 10 + 2999 + 7
    # status: the parked pairs it shows (all 9 here), counted
    shown = _rows_read(lambda: _status(db_url, capsys))
    assert shown == 9
    status = _status(db_url, capsys)
    assert status["webhooks_parked_count"] == 9
    assert [(p["webhook"], p["topic"]) for p in status["webhooks_parked"]][:2] == [
        ("alpha", "hcat.web.t000999"),
        ("alpha", "hcat.web.t001999"),
    ]
    # webhooks show: its page (and one more, to know there is a next), not 3,000 topics
    assert _rows_read(lambda: _show(db_url, capsys, "beta", "--limit", "20")) == 21
    page = _show(db_url, capsys, "beta", "--limit", "20")
    assert [t["topic"] for t in page["topics"]] == [f"hcat.web.t{n:06d}" for n in range(20)]
    assert (page["failing_topics"], page["parked_topics"]) == (6, 3)
    assert page["delivered_through"] == 10 + 2999 + 7
    assert page["next"] == "hcat.web.t000019"


def test_webhooks_show_pages_through_every_topic_and_status_shows_the_first_parked(
    catalog: Catalog,
    db_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
):
    ids = _hooks(catalog)
    _topics(db_url, {"alpha": ids["alpha"]}, 0, 250)
    _topics(db_url, {"gamma": ids["gamma"]}, 0, 21_000)  # 21 parked, 42 failing
    seen: list[str] = []
    after: list[str] = []
    while True:
        page = _show(db_url, capsys, "alpha", "--limit", "100", *after)
        seen += [t["topic"] for t in page["topics"]]
        if page["next"] is None:
            break
        after = ["--after", page["next"]]
    assert seen == [f"hcat.web.t{n:06d}" for n in range(250)]
    parked = _show(db_url, capsys, "gamma", "--only", "parked", "--limit", "10")
    assert [t["topic"] for t in parked["topics"]] == [
        f"hcat.web.t{n:06d}" for n in range(999, 10_000, 1000)
    ]
    assert parked["next"] == "hcat.web.t009999"
    failing = _show(db_url, capsys, "gamma", "--only", "failing", "--after", "hcat.web.t020000")
    assert [t["topic"] for t in failing["topics"]] == ["hcat.web.t020250", "hcat.web.t020750"]
    assert failing["next"] is None
    assert main(["--db-url", db_url, "webhooks", "show", "gamma", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "topics failing: 42, parked: 21" in out
    assert "more topics: hcat-notify webhooks show gamma --limit 2 --after hcat.web.t000001" in out
    assert "release parked topics with: hcat-notify webhooks retry|drop gamma" in out
    status = _status(db_url, capsys)
    assert status["webhooks_parked_count"] == 21
    assert [p["topic"] for p in status["webhooks_parked"]] == [
        f"hcat.web.t{n:06d}" for n in range(999, 20_000, 1000)
    ]
    assert main(["--db-url", db_url, "status"]) == 0
    assert "21 webhook topics parked; the first 20" in capsys.readouterr().out


@SQLITE
def test_the_webhooks_figures_cost_the_same_at_300_and_15000_topics(
    catalog: Catalog, db_url: str, capsys: pytest.CaptureFixture[str]
):
    def overview() -> None:
        _webhook_samples(catalog)
        catalog.webhooks.parked(20)
        catalog.webhooks.parked_count()
        catalog.webhooks.topics_page("beta", limit=21)
        catalog.webhooks.figures("beta")

    ids = _hooks(catalog)
    _topics(db_url, ids, 0, 100)
    small = sqlite_work(overview)
    _topics(db_url, ids, 100, 4900)
    large = sqlite_work(overview)
    assert large <= FLAT * small + 2, (small, large)


@pytest.fixture
def captured() -> Iterator[list[tuple[str, Any]]]:
    statements: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "hcat_webhook_progress" in statement and statement.lstrip().startswith("SELECT"):
            statements.append((statement, parameters))

    from sqlalchemy import Engine

    event.listen(Engine, "before_cursor_execute", capture)
    try:
        yield statements
    finally:
        event.remove(Engine, "before_cursor_execute", capture)


@POSTGRES
def test_postgresql_counts_failing_and_parked_topics_on_their_partial_indexes(
    catalog: Catalog, db_url: str, captured: list[tuple[str, Any]]
):
    ids = _hooks(catalog)
    _topics(db_url, ids, 0, 2000)
    _webhook_samples(catalog)
    catalog.webhooks.parked(20)
    catalog.webhooks.parked_count()
    catalog.webhooks.topics_page("beta", limit=21, only="failing")
    plans = plans_without_seqscan(db_url, list(captured))
    assert len(plans) == 4, captured
    figures, parked, count, failing = plans
    for name in ("failing", "parked"):
        assert f"ix_hcat_webhook_progress_{name}" in figures, figures
    assert "ix_hcat_webhook_progress_parked" in parked, parked
    assert "ix_hcat_webhook_progress_parked" in count, count
    assert "ix_hcat_webhook_progress_failing" in failing, failing
    for plan in plans:
        assert not re.search(r"Seq Scan on hcat_webhook_progress", plan), plan
