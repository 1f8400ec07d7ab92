"""Every endpoint of ``hcat-notify serve`` against a real server process, on SQLite and
PostgreSQL: what it answers, and that what it wrote is in the catalog."""

from __future__ import annotations

import json

import httpx
import pytest

from hcat_notify.api.client import ApiClient
from hcat_notify.model.events import EventType
from hcat_notify.store import Catalog, NewPartition
from tests.fixtures.catalog_rows import insert_webhook_progress
from tests.integration.api.support import READER, ApiServer
from tests.wire import parse_cloudevent_batch, validate_cloudevent, validate_message

pytestmark = pytest.mark.integration


def test_healthz_and_readyz(anonymous: httpx.Client):
    assert anonymous.get("/healthz").json() == {"status": "ok"}
    ready = anonymous.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json() == {"status": "ready", "checks": {"catalog": "ok", "broker": "ok"}}


def test_list_and_get_tables(reader: httpx.Client, new_table):
    name = new_table()
    db = name.split(".")[0]
    listed = reader.get("/v1/tables", params={"db": db}).json()["tables"]
    assert [item["name"] for item in listed] == [name]
    table = reader.get(f"/v1/tables/{name}").json()
    assert table["partitionKeys"] == ["datestamp", "region"]
    assert table["topic"] == f"hcat.{name}"
    assert table["destination"] == f"/topic/hcat.{name}"
    assert table["retentionSeconds"] == 7 * 86400
    everything = {item["name"] for item in reader.get("/v1/tables").json()["tables"]}
    assert name in everything


def test_tables_come_in_pages_with_next(reader: httpx.Client, api_catalog: Catalog):
    for n in range(5):
        api_catalog.create_table(f"paged_db.t{n}", location=f"/w/paged/{n}", partition_keys=["ds"])
    names: list[str] = []
    params: dict[str, str | int] = {"db": "paged_db", "limit": 2}
    while True:
        page = reader.get("/v1/tables", params=params).json()
        assert len(page["tables"]) <= 2
        names += [item["name"] for item in page["tables"]]
        if page["next"] is None:
            break
        params["after"] = page["next"]
    assert names == [f"paged_db.t{n}" for n in range(5)]
    assert reader.get("/v1/tables", params={"limit": 0}).status_code in (400, 422)


def test_create_table(writer: httpx.Client, api_catalog: Catalog):
    body = {
        "name": "created_here.views",
        "location": "/data/views",
        "partitionKeys": ["datestamp"],
        "format": "orc",
        "retentionSeconds": 3600,
        "topic": "hcat.custom.views",
    }
    response = writer.post("/v1/tables", json=body)
    assert response.status_code == 201, response.text
    assert response.headers["location"] == "/v1/tables/created_here.views"
    assert response.json()["topic"] == "hcat.custom.views"
    stored = api_catalog.get_table("created_here.views")
    assert (stored.storage_format, stored.retention.total_seconds()) == ("orc", 3600)
    again = writer.post("/v1/tables", json=body)
    assert again.status_code == 409
    assert again.json()["error"] == "TableExistsError"


def test_partitions_paged_and_filtered(reader: httpx.Client, new_table, api_catalog: Catalog):
    name = new_table()
    api_catalog.add_partitions(
        name,
        [
            NewPartition({"datestamp": day, "region": region}, f"/data/{day}/{region}")
            for day in ("20110227", "20110228")
            for region in ("eu", "us/east", "us")
        ],
    )
    first = reader.get(f"/v1/tables/{name}/partitions", params={"limit": 4}).json()
    assert len(first["partitions"]) == 4
    rest = reader.get(
        f"/v1/tables/{name}/partitions", params={"limit": 4, "after": first["next"]}
    ).json()
    assert rest["next"] is None
    specs = [p["spec"] for p in first["partitions"] + rest["partitions"]]
    assert specs == sorted(specs)
    assert len(specs) == 6
    assert "datestamp=20110228/region=us%2Feast" in specs
    us_east = reader.get(f"/v1/tables/{name}/partitions", params={"region": "us/east"}).json()
    assert [p["values"] for p in us_east["partitions"]] == [
        {"datestamp": "20110227", "region": "us/east"},
        {"datestamp": "20110228", "region": "us/east"},
    ]
    by_path = reader.get(
        f"/v1/tables/{name}/partitions", params={"spec": "datestamp=20110228"}
    ).json()
    assert len(by_path["partitions"]) == 3


def test_add_partitions(writer: httpx.Client, new_table, api_catalog: Catalog):
    name = new_table()
    body = {
        "partitions": [
            {
                "spec": {"datestamp": "20110228", "region": "us"},
                "location": f"/d/{name}/1",
                "fileCount": 3,
            },
            {"spec": {"region": "eu", "datestamp": "20110228"}, "location": f"/d/{name}/2"},
        ],
        "jobId": "job-7",
    }
    response = writer.post(f"/v1/tables/{name}/partitions", json=body)
    assert response.status_code == 201, response.text
    added = response.json()["partitions"]
    assert [p["spec"] for p in added] == [
        "datestamp=20110228/region=us",
        "datestamp=20110228/region=eu",
    ]
    assert all(p["eventId"] for p in added)
    events = api_catalog.catch_up([name], cursor="*:0")
    assert [e.event_type for e in events] == [EventType.ADD_PARTITION] * 2
    assert writer.post(f"/v1/tables/{name}/partitions", json=body).status_code == 409


def test_mark_done_then_covering_done(writer: httpx.Client, reader: httpx.Client, new_table):
    name = new_table()
    recorded = writer.post(f"/v1/tables/{name}/done", json={"spec": {"datestamp": "20110228"}})
    assert recorded.status_code == 201, recorded.text
    body = recorded.json()
    assert body["spec"] == "datestamp=20110228"
    assert body["partitionSpec"] == {"datestamp": "20110228"}
    covered = reader.get(
        f"/v1/tables/{name}/done", params={"datestamp": "20110228", "region": "us"}
    )
    assert covered.status_code == 200
    assert covered.json()["eventId"] == body["eventId"]
    assert covered.json()["expiresAt"] > covered.json()["createdAt"]
    missing = reader.get(f"/v1/tables/{name}/done", params={"datestamp": "20110301"})
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/problem+json"
    assert missing.json()["type"] == "urn:hcat-notify:problem:not-done"
    assert missing.json()["error"] == "InvalidInputError"  # every problem names one


def test_mark_done_keys_sorted_and_escaped(writer: httpx.Client, reader: httpx.Client, new_table):
    name = new_table()
    spec = {"region": "us/east", "datestamp": "20110228"}
    body = writer.post(f"/v1/tables/{name}/done", json={"spec": spec}).json()
    assert body["spec"] == "datestamp=20110228/region=us%2Feast"
    assert reader.get(f"/v1/tables/{name}/done", params=spec).status_code == 200


def test_events_after_a_cursor(writer: httpx.Client, reader: httpx.Client, new_table, api_catalog):
    name = new_table()
    other = new_table()
    first = writer.post(f"/v1/tables/{name}/done", json={"spec": {"datestamp": "1"}}).json()
    writer.post(f"/v1/tables/{other}/done", json={"spec": {"datestamp": "1"}})
    # Without a cursor: the retained dones, and a cursor after everything read so far.
    page = reader.get("/v1/events", params={"table": name}).json()
    assert [e["eventId"] for e in page["events"]] == [first["eventId"]]
    assert page["more"] is False
    event = page["events"][0]
    assert event["event"] == "MARK_SET_DONE"
    assert event["table"] == name
    assert event["headers"]["HCAT_EVENT_ID"] == str(first["eventId"])
    validate_message(event["headers"], json.dumps(event["body"]))
    api_catalog.add_partitions(
        name, [NewPartition({"datestamp": "2", "region": "us"}, f"/d/{name}/2")]
    )
    second = writer.post(f"/v1/tables/{name}/done", json={"spec": {"datestamp": "2"}}).json()
    later = reader.get("/v1/events", params={"table": name, "cursor": page["cursor"]}).json()
    kinds = [(e["event"], e["eventId"]) for e in later["events"]]
    assert kinds[-1] == ("MARK_SET_DONE", second["eventId"])
    assert [k for k, _ in kinds] == ["ADD_PARTITION", "MARK_SET_DONE"]
    # The same events, in the same order, as the catalog's catch-up.
    expected = api_catalog.catch_up([name], cursor=page["cursor"])
    assert [e["eventId"] for e in later["events"]] == [e.event_id for e in expected]
    assert later["cursor"] == f"*:{page['cursor'][2:]},hcat.{name}:{second['eventId']}"
    nothing = reader.get("/v1/events", params={"table": name, "cursor": later["cursor"]}).json()
    assert nothing["events"] == []
    assert nothing["cursor"] == later["cursor"]


def test_events_paged(reader: httpx.Client, new_table, api_catalog: Catalog):
    name = new_table()
    ids = [api_catalog.mark_set_done(name, {"datestamp": str(day)}) for day in range(5)]
    seen: list[int] = []
    cursor = "*:0"
    while True:
        page = reader.get("/v1/events", params={"table": name, "cursor": cursor, "limit": 2}).json()
        seen += [e["eventId"] for e in page["events"]]
        cursor = page["cursor"]
        if not page["more"]:
            break
    assert seen == ids
    first = reader.get("/v1/events", params={"table": name, "limit": 3}).json()
    assert first["more"]
    # Without a cursor the next page reads the rest of the retained dones (after next);
    # the cursor, as before next, reads every event after the page's last.
    assert (first["cursor"], first["next"]) == (f"*:{ids[2]}", ids[2])
    query = {"table": name, "limit": 3, "after": first["next"]}
    rest = reader.get("/v1/events", params=query).json()
    assert [e["eventId"] for e in rest["events"]] == ids[3:]
    assert (rest["more"], rest["next"]) == (False, None)
    assert rest["cursor"].startswith("*:")


CE_BATCH = "application/cloudevents-batch+json"


def test_events_as_a_cloudevents_batch(
    api: ApiServer, reader: httpx.Client, new_table, api_catalog: Catalog
):
    name = new_table()
    api_catalog.add_partitions(
        name, [NewPartition({"datestamp": "2", "region": "us"}, f"/d/{name}/2")]
    )
    done = api_catalog.mark_set_done(name, {"datestamp": "2"})
    query = {"table": name, "cursor": "*:0"}
    page = reader.get("/v1/events", params=query).json()
    answer = reader.get("/v1/events", params=query, headers={"Accept": CE_BATCH})
    assert answer.status_code == 200
    assert answer.headers["content-type"] == CE_BATCH
    assert (answer.headers["hcat-cursor"], answer.headers["hcat-more"]) == (page["cursor"], "false")
    events = parse_cloudevent_batch(answer.content)
    assert [e.get_id() for e in events] == [str(e["eventId"]) for e in page["events"]]
    assert [e.get_type() for e in events] == [
        "org.apache.hive.hcatalog.add_partition",
        "org.apache.hive.hcatalog.mark_set_done",
    ]
    for event, plain in zip(events, page["events"], strict=True):
        assert event.get_data() == plain["body"]  # the Hive body unchanged
        assert event.get_source() == "urn:hcat-notify:hcat"  # the default source
        assert event.get_extension("hcattable") == name
    assert events[-1].get_subject() == f"{name}/datestamp=2"
    # JSON stays the default, and wins where the client prefers it.
    for accept in ("application/json", "*/*", f"{CE_BATCH};q=0.5, application/json"):
        plain = reader.get("/v1/events", params=query, headers={"Accept": accept})
        assert plain.headers["content-type"] == "application/json", accept
        assert plain.json() == page
    # The client, a page at a time along the cursor.
    with ApiClient(api.url, auth=READER) as client:
        first = client.cloudevents([name], cursor="*:0", limit=1)
        rest = client.cloudevents([name], cursor=first.cursor)
    assert first.more
    assert not rest.more
    assert [e["id"] for e in first.events + rest.events] == [e.get_id() for e in events]
    assert rest.cursor == page["cursor"]
    assert rest.events[-1]["sequence"] == str(done).zfill(19)
    for item in json.loads(answer.content):
        validate_cloudevent(item)


def test_last_event(reader: httpx.Client, new_table, api_catalog: Catalog):
    name = new_table()
    event_id = api_catalog.mark_set_done(name, {"datestamp": "1"})
    assert reader.get("/v1/events/last").json()["eventId"] >= event_id


def test_metrics(anonymous: httpx.Client, reader: httpx.Client, new_table, api_catalog: Catalog):
    name = new_table()
    api_catalog.mark_set_done(name, {"datestamp": "1"})
    reader.get(f"/v1/tables/{name}")
    assert reader.get(f"/v1/tables/{name}/done", params={"datestamp": "1"}).status_code == 200
    assert reader.get(f"/v1/tables/{name}/done", params={"datestamp": "2"}).status_code == 404
    text = anonymous.get("/metrics").text
    assert "hcat_notify_catalog_up 1.0" in text
    for metric in (
        "hcat_notify_outbox_backlog_events",
        "hcat_notify_outbox_oldest_unpublished_seconds",
        "hcat_notify_relay_publish_rate_events_per_second",
        "hcat_notify_relay_members",
        'hcat_notify_relay_buckets{state="unassigned"}',
    ):
        assert metric in text
    backlog = next(
        line for line in text.splitlines() if line.startswith("hcat_notify_outbox_backlog")
    )
    assert float(backlog.split()[-1]) >= 1
    assert (
        'hcat_notify_api_requests_total{method="GET",route="/v1/tables/{table}",status="200"}'
        in text
    )
    assert "hcat_notify_api_request_duration_seconds_bucket" in text
    # the check is a plain route in front of the others: still counted by its template
    for status in ("200", "404"):
        assert (
            'hcat_notify_api_requests_total{method="GET",route="/v1/tables/{table}/done",'
            f'status="{status}"}}'
        ) in text


def test_status_page_html(reader: httpx.Client, new_table, api_catalog: Catalog):
    name = new_table()
    api_catalog.add_partitions(
        name, [NewPartition({"datestamp": "20110228", "region": "us"}, f"/d/{name}")]
    )
    api_catalog.mark_set_done(name, {"datestamp": "20110228"})
    page = reader.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert name in page.text
    assert "datestamp=20110228/region=us" in page.text
    assert "not yet published" in page.text


def test_openapi_document_is_served(anonymous: httpx.Client):
    schema = anonymous.get("/openapi.json").json()
    assert "/v1/tables/{table}/done" in schema["paths"]


def test_webhooks_managed_by_writers(
    writer: httpx.Client, reader: httpx.Client, new_table, api_catalog: Catalog
):
    name = new_table()
    hook = f"h{name.split('.')[0]}"
    body = {"name": hook, "url": "https://hooks.example.com/in", "tables": [name]}
    assert reader.get("/v1/webhooks").status_code == 403
    assert reader.post("/v1/webhooks", json=body).status_code == 403
    added = writer.post("/v1/webhooks", json=body)
    assert added.status_code == 201, added.text
    secret = added.json()["secret"]
    assert secret.startswith("whsec_")
    assert added.json()["webhook"]["state"] == "active"
    listed = writer.get("/v1/webhooks")
    assert hook in [item["name"] for item in listed.json()]
    assert secret not in listed.text
    # refused with one problem, nothing written
    for bad in (
        body,  # the name is in use
        {**body, "name": f"{hook}x", "url": "http://hooks.example.com/in"},
        {**body, "name": f"{hook}y", "tables": ["nodb.*"]},
        {**body, "name": f"{hook}z", "format": "cloudevent"},
        {**body, "name": f"{hook}w", "fromEvent": 10**9},  # beyond the newest event
    ):
        refused = writer.post("/v1/webhooks", json=bad)
        assert refused.status_code == 400, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
    assert [i.name for i in api_catalog.webhooks.every() if i.name.startswith(hook)] == [hook]
    shown = writer.get(f"/v1/webhooks/{hook}").json()
    assert (shown["webhook"]["url"], shown["topics"]) == ("https://hooks.example.com/in", [])
    assert (shown["webhook"]["format"], shown["webhook"]["contentType"]) == (
        "cloudevents",
        "application/cloudevents+json",
    )
    # its topics a page at a time, the failing and parked ones counted (issue 31)
    hook_info = api_catalog.webhooks.get(hook)
    insert_webhook_progress(
        api_catalog.settings.database_url,
        [
            {
                "webhook_id": hook_info.id,
                "topic": f"hcat.t{n}",
                "bucket": n,
                "last_event_id": 10 + n,
                "epoch": 1,
                "updated_at": 1.0,
                "attempts": 2 if n >= 3 else 0,
                "parked_at": 1.5 if n == 4 else None,
            }
            for n in range(5)
        ],
    )
    first = writer.get(f"/v1/webhooks/{hook}", params={"limit": 2}).json()
    assert [t["topic"] for t in first["topics"]] == ["hcat.t0", "hcat.t1"]
    assert (first["next"], first["failingTopics"], first["parkedTopics"]) == ("hcat.t1", 1, 1)
    assert first["deliveredThrough"] == max(14, hook_info.start_after)  # added from now
    rest = writer.get(f"/v1/webhooks/{hook}", params={"limit": 5, "after": first["next"]})
    assert [t["topic"] for t in rest.json()["topics"]] == ["hcat.t2", "hcat.t3", "hcat.t4"]
    assert rest.json()["next"] is None
    only = writer.get(f"/v1/webhooks/{hook}", params={"only": "parked"}).json()
    assert [t["topic"] for t in only["topics"]] == ["hcat.t4"]
    assert writer.get(f"/v1/webhooks/{hook}", params={"limit": 0}).status_code == 400
    batched = writer.post(
        "/v1/webhooks", json={**body, "name": f"{hook}b", "format": "cloudevents-batch"}
    )
    assert batched.json()["webhook"]["contentType"] == "application/cloudevents-batch+json"
    assert writer.delete(f"/v1/webhooks/{hook}b").status_code == 204
    # a body the route does not take: refused, nothing done
    refused = writer.post(f"/v1/webhooks/{hook}/pause", json={"state": "paused"})
    assert refused.status_code == 400, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["error"] == "InvalidInputError"
    assert refused.json()["detail"] == (
        "malformed request: POST /v1/webhooks/{name}/pause takes no body"
    )
    assert api_catalog.webhooks.get(hook).state.value == "active"
    assert writer.post(f"/v1/webhooks/{hook}/pause").json()["state"] == "paused"
    assert api_catalog.webhooks.get(hook).state.value == "paused"
    assert writer.post(f"/v1/webhooks/{hook}/resume").json()["state"] == "active"
    rotated = writer.post(f"/v1/webhooks/{hook}/rotate-secret").json()
    assert rotated["secret"].startswith("whsec_")
    assert rotated["secret"] != secret
    assert rotated["webhook"]["rotatingUntil"] is not None
    newest = api_catalog.last_event_id()
    replayed = writer.post(f"/v1/webhooks/{hook}/replay", json={"fromEvent": newest})
    assert replayed.json()["startAfter"] == newest - 1, replayed.text
    beyond = writer.post(f"/v1/webhooks/{hook}/replay", json={"fromEvent": 10**9})
    assert beyond.status_code == 400, beyond.text
    assert "beyond the newest event" in beyond.json()["detail"]
    assert "--" not in beyond.json()["detail"]  # no command-line option named to the API
    assert api_catalog.webhooks.get(hook).start_after == newest - 1
    assert writer.delete(f"/v1/webhooks/{hook}").status_code == 204
    assert writer.get(f"/v1/webhooks/{hook}").status_code == 404
    assert writer.post(f"/v1/webhooks/{hook}/pause").status_code == 404
