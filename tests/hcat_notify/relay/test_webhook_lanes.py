"""A relay's webhook pass holds the lanes of the topics that have events, not of every
topic ever delivered (issue 31): it read, at its first pass and at every gained bucket,
the progress row of every (webhook, topic) of its buckets and kept a lane of each, so
that its memory and that read grew with every topic the webhooks ever got."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest

from hcat_notify.config import Settings
from hcat_notify.model.topics import topic_bucket
from hcat_notify.relay import Relay, RelayConfig
from hcat_notify.relay import webhooks as webhooks_module
from hcat_notify.store import Catalog
from hcat_notify.store.models import WebhookProgressRow
from tests.fixtures.catalog_rows import bulk_insert
from tests.fixtures.counted_webhooks import CountedWebhooks
from tests.fixtures.webhook_receiver import Receiver, event_ids

IDLE = 400  # topics each webhook was delivered once, with no events now


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path, _sqlite_catalog_template: Path) -> str:
    """Both backends (the relay's tests are SQLite's): the read of the lanes' progress is
    a statement of each."""
    if request.param == "postgresql":
        url: str = request.getfixturevalue("fresh_postgres_catalog_url")
        return url
    path = tmp_path / "catalog.db"
    shutil.copyfile(_sqlite_catalog_template, path)
    return f"sqlite:///{path}"


def test_the_pass_reads_and_holds_the_progress_of_the_topics_with_events_only(
    hook_settings: Settings, solo_relay: Callable[..., Relay], receiver: Receiver
):
    with Catalog.open(hook_settings) as catalog:
        catalog.create_table("web.clicks", location="/w/clicks", partition_keys=["ds"])
        catalog.create_table("web.views", location="/w/views", partition_keys=["ds"])
        before = catalog.mark_set_done("web.clicks", {"ds": "0"})
        hooks = {}
        for name in ("a", "b"):
            # from the done on (the tables' creation went to the database's topic)
            catalog.webhooks.add(name, f"{receiver.url}/{name}", "web.*", from_event=before)
            hooks[name] = catalog.webhooks.get(name).id
        clicks = catalog.get_table("web.clicks").topic
        buckets = catalog.group.info().bucket_count
        idle = [f"hcat.web.idle{n:04d}" for n in range(IDLE)]
        bulk_insert(
            hook_settings.database_url,
            WebhookProgressRow,
            [
                {
                    "webhook_id": hook,
                    "topic": topic,
                    "bucket": topic_bucket(topic, buckets),
                    "last_event_id": position,
                    "epoch": 1,
                    "updated_at": 1.0,
                }
                for hook in hooks.values()
                for topic, position in [*((t, 1) for t in idle), (clicks, before)]
            ],
        )
        fresh = [catalog.mark_set_done("web.clicks", {"ds": str(n)}) for n in (1, 2)]
        views = catalog.mark_set_done("web.views", {"ds": "1"})
        counted = CountedWebhooks(catalog, "progress", len)
        with solo_relay(
            cast(Catalog, counted), RelayConfig(webhook_interval=60.0, batch_size=50)
        ) as relay:
            relay.drain()
            # the two topics with events, per webhook: not the 800 idle lanes
            assert counted.total == 2, counted.total
        shown = {t.topic: t.last_event_id for t in catalog.webhooks.topics("a")}
    got: dict[str, list[int]] = {}
    for request in receiver.ok():
        got.setdefault(request.path, []).extend(event_ids(request))
    # each webhook got what came after its progress: not the done its progress is at
    for name in ("a", "b"):
        assert sorted(got[f"/hook/{name}"]) == sorted([*fresh, views])
    assert shown[clicks] == fresh[-1]
    assert len(shown) == IDLE + 2


def test_idle_lanes_are_let_go_and_opened_again_where_their_progress_stands(
    hook_settings: Settings,
    solo_relay: Callable[..., Relay],
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
):
    """Past ``LANES_HELD`` lanes a running relay's pass lets go of the idle ones: what it
    holds stays bounded however many topics have had events (it held every lane it had
    opened), and a lane opened again reads its progress: nothing is delivered twice."""
    monkeypatch.setattr(webhooks_module, "RELEASE_EVERY", 0.05)
    tables = [f"web.t{n:02d}" for n in range(30)]
    with Catalog.open(hook_settings) as catalog:
        for table in tables:
            catalog.create_table(table, location=f"/w/{table}", partition_keys=["ds"])
        catalog.webhooks.add("all", receiver.url, "web.*")
        counted = CountedWebhooks(catalog, "progress", len)
        relay = solo_relay(cast(Catalog, counted))
        thread = threading.Thread(target=relay.run, daemon=True)
        thread.start()

        def got() -> list[int]:
            return [event_id for request in receiver.ok() for event_id in event_ids(request)]

        def recorded() -> dict[str, int]:
            return {t.topic: t.last_event_id for t in catalog.webhooks.topics("all")}

        try:
            written = [catalog.mark_set_done(table, {"ds": "1"}) for table in tables]
            _wait(lambda: len(recorded()) == 30 and set(got()) == set(written), "30 delivered")
            assert counted.total == 0  # new lanes: no progress to read
            # a pass lets go of the 30 idle lanes (the bound lowered only now: lowered
            # before, a pass during the deliveries let go of the lanes idle then and
            # kept the others, which no pass let go once at most 5 were held)
            monkeypatch.setattr(webhooks_module, "LANES_HELD", 5)
            _wait(lambda: relay.webhooks.stats.released == 30, "the idle lanes let go")
            assert relay.webhooks.lanes_held == 0
            written += [catalog.mark_set_done(table, {"ds": "2"}) for table in tables]
            _wait(lambda: sorted(got()) == sorted(written), "each event delivered")
            assert counted.total == 30  # each opened again where its progress stood
        finally:
            relay.stop()
            thread.join(30)
            relay.close()
    assert not thread.is_alive()
    assert sorted(got()) == sorted(written)  # each once


def _wait(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.01)
