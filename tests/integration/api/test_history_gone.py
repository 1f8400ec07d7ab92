"""``GET /v1/events`` below what the outbox's retention deleted: 410 Gone naming the
oldest complete cursor, never a page with a silent gap (issue 31). A module of its own:
its sweep moves the catalog's pruned-through mark, which other modules' replays meet."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest

from hcat_notify.api.client import ApiClient
from hcat_notify.config import Settings
from hcat_notify.errors import HistoryGoneError
from hcat_notify.store import Catalog, NewPartition
from tests.fixtures.published import publish
from tests.integration.api.support import READER, ApiServer

pytestmark = pytest.mark.integration

DAY = timedelta(days=1)


def test_a_cursor_below_the_pruned_mark_is_410_gone(
    reader: httpx.Client, api: ApiServer, api_settings: Settings, api_catalog: Catalog
):
    past = Catalog(
        api_catalog._engine, api_settings, clock=lambda: datetime(2026, 1, 1, tzinfo=UTC)
    )
    past.create_table("old.clicks", location="/data/old/clicks", partition_keys=["ds"])
    ids = [past.mark_set_done("old.clicks", {"ds": str(n)}) for n in range(3)]
    topic = "hcat.old.clicks"
    publish(past, topic, ids[1])
    assert api_catalog.outbox.sweep(timedelta(days=1)).deleted == 2
    gone = reader.get("/v1/events", params={"table": "old.clicks", "cursor": f"{topic}:{ids[0]}"})
    assert gone.status_code == 410, gone.text
    problem = gone.json()
    assert problem["error"] == "HistoryGoneError"
    assert f"oldest complete cursor is {topic}:{ids[1]}" in problem["detail"]
    page = reader.get("/v1/events", params={"table": "old.clicks", "cursor": f"{topic}:{ids[1]}"})
    assert [e["eventId"] for e in page.json()["events"]] == [ids[2]]
    # the consumer library's reader over HTTP raises the same error as the database's
    with ApiClient(api.url, auth=READER) as client, pytest.raises(HistoryGoneError):
        client.catch_up(["old.clicks"], cursor=f"{topic}:{ids[0]}")


def test_b_a_full_page_without_a_cursor_goes_on_without_one(
    reader: httpx.Client, api_settings: Settings, api_catalog: Catalog
):
    """The table keeps its dones longer than the outbox keeps events: the next page of a
    read without a cursor reads the rest of the retained dones (after the page's next),
    where following the page's cursor (every event after its last one, as clients did
    before ``next``) meets what the retention deleted: a 410, not a gap."""
    past = Catalog(
        api_catalog._engine, api_settings, clock=lambda: datetime(2026, 1, 1, tzinfo=UTC)
    )
    past.create_table(
        "old.views", location="/data/old/views", partition_keys=["ds"], retention=1000 * DAY
    )
    dones = []
    for n in range(3):
        dones.append(past.mark_set_done("old.views", {"ds": f"d{n}"}))
        spec = {"ds": f"p{n}"}
        past.add_partitions("old.views", [NewPartition(spec, f"/data/old/views/ds=p{n}", 1, 1)])
    publish(past, "hcat.old.views", past.last_event_id())
    assert api_catalog.outbox.sweep(DAY).deleted >= 3  # the added partitions' events
    params: dict[str, str | int] = {"table": "old.views", "limit": 2}
    first = reader.get("/v1/events", params=params).json()
    assert [e["eventId"] for e in first["events"]] == dones[:2]
    assert (first["cursor"], first["more"], first["next"]) == (f"*:{dones[1]}", True, dones[1])
    batch = reader.get(
        "/v1/events", params=params, headers={"Accept": "application/cloudevents-batch+json"}
    )
    assert (batch.headers["Hcat-Cursor"], batch.headers["Hcat-Next"]) == (
        f"*:{dones[1]}",
        str(dones[1]),
    )
    gone = reader.get("/v1/events", params={**params, "cursor": first["cursor"]})
    assert gone.status_code == 410, gone.text
    params.update(after=first["next"])
    second = reader.get("/v1/events", params=params)
    assert second.status_code == 200, second.text
    page = second.json()
    assert [e["eventId"] for e in page["events"]] == [dones[2]]
    assert not page["more"]
    assert page["next"] is None
    assert page["cursor"] == f"*:{api_catalog.last_event_id()}"
