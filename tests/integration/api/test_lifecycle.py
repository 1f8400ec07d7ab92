"""What the command line's lifecycle commands write, over HTTP, against a real server on
SQLite and PostgreSQL: registering files in place, discovery, drops of partitions and
tables, a table's announce mode; the events each writes; the same through ApiClient."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import pytest

from hcat_notify import ApiClient, PartitionNotFoundError, register_partitions
from hcat_notify.model.changes import AnnounceMode
from hcat_notify.model.events import EventType
from hcat_notify.store import Catalog, NewPartition, OutboxEvent
from tests.integration.api.support import WRITER, ApiServer
from tests.wire import validate_message

pytestmark = pytest.mark.integration


def _land(directory: Path, *sizes: int) -> Path:
    """Files a tool other than Spark wrote: data files of ``sizes`` bytes and a marker."""
    directory.mkdir(parents=True)
    for index, size in enumerate(sizes):
        (directory / f"part-{index:05d}.parquet").write_bytes(b"x" * size)
    (directory / "_SUCCESS").write_bytes(b"")
    return directory


def _table_at(catalog: Catalog, root: Path, **options) -> str:
    name = f"t{uuid.uuid4().hex[:10]}.landed"
    catalog.create_table(
        name, location=str(root), partition_keys=["datestamp", "region"], **options
    )
    return name


def _events(catalog: Catalog, after: int, table: str) -> list[OutboxEvent]:
    """The outbox events of ``table`` after event ``after``, each checked as a message."""
    found = [e for e in catalog.outbox.events(after_event_id=after, limit=1000) if e.table == table]
    for event in found:
        validate_message(event.headers, event.body)
    return found


def test_register_files_in_place(writer: httpx.Client, api_catalog: Catalog, tmp_path: Path):
    name = _table_at(api_catalog, tmp_path / "table")
    us = _land(tmp_path / "landing" / "us", 10, 32)
    eu = _land(tmp_path / "landing" / "eu", 5)
    before = api_catalog.last_event_id()
    body = {
        "partitions": [
            {"spec": {"datestamp": "20110228", "region": "us"}, "location": str(us)},
            {"spec": {"region": "eu", "datestamp": "20110228"}, "location": str(eu)},
        ],
        "markSetDone": {"datestamp": "20110228"},
        "jobId": "landing-7",
    }
    response = writer.post(f"/v1/tables/{name}/partitions:register", json=body)
    assert response.status_code == 201, response.text
    data = response.json()
    assert data["table"] == name
    measured = {p["spec"]: (p["fileCount"], p["totalBytes"]) for p in data["partitions"]}
    assert measured == {
        "datestamp=20110228/region=us": (2, 42),
        "datestamp=20110228/region=eu": (1, 5),
    }
    assert all(p["jobId"] == "landing-7" for p in data["partitions"])
    events = _events(api_catalog, before, name)
    assert [e.event_type for e in events] == [EventType.ADD_PARTITION] * 2 + [
        EventType.MARK_SET_DONE
    ]
    assert data["eventIds"] == [e.event_id for e in events[:2]]
    assert data["doneEventId"] == events[2].event_id
    stored = api_catalog.partitions.get(name, {"datestamp": "20110228", "region": "us"})
    assert stored is not None
    assert (stored.file_count, stored.total_bytes) == (2, 42)
    assert stored.location.endswith(str(us))
    covering = api_catalog.find_covering_done(name, {"datestamp": "20110228", "region": "eu"})
    assert covering is not None
    again = writer.post(f"/v1/tables/{name}/partitions:register", json=body)
    assert again.status_code == 409
    assert again.json()["error"] == "PartitionExistsError"


def test_register_batched_by_the_announce_override(
    writer: httpx.Client, api_catalog: Catalog, tmp_path: Path
):
    name = _table_at(api_catalog, tmp_path / "table")
    before = api_catalog.last_event_id()
    body = {
        "partitions": [
            {
                "spec": {"datestamp": "1", "region": region},
                "location": str(_land(tmp_path / region, 3)),
            }
            for region in ("a", "b", "c")
        ],
        "announce": "write",
    }
    response = writer.post(f"/v1/tables/{name}/partitions:register", json=body)
    assert response.status_code == 201, response.text
    (event,) = _events(api_catalog, before, name)
    assert event.event_type is EventType.ADD_PARTITION
    assert len(json.loads(event.body)["partitions"]) == 3
    assert response.json()["eventIds"] == [event.event_id]


def test_create_table_with_announce_write(writer: httpx.Client, api_catalog: Catalog):
    name = f"t{uuid.uuid4().hex[:10]}.batched"
    body = {
        "name": name,
        "location": f"/data/{name}",
        "partitionKeys": ["datestamp", "region"],
        "announce": "write",
    }
    response = writer.post("/v1/tables", json=body)
    assert response.status_code == 201, response.text
    assert response.json()["properties"] == {"hcat.notify.announce": "write"}
    before = api_catalog.last_event_id()
    added = writer.post(
        f"/v1/tables/{name}/partitions",
        json={
            "partitions": [
                {"spec": {"datestamp": "1", "region": region}, "location": f"/d/{region}"}
                for region in ("a", "b")
            ]
        },
    )
    assert added.status_code == 201, added.text
    (event,) = _events(api_catalog, before, name)
    assert len(json.loads(event.body)["partitions"]) == 2  # one message for the write
    conflicting = {**body, "name": f"{name}2", "properties": {"hcat.notify.announce": "x"}}
    refused = writer.post("/v1/tables", json=conflicting)
    assert refused.status_code == 400
    assert "hcat.notify.announce" in refused.json()["detail"]


def test_drop_partitions_by_partial_spec(writer: httpx.Client, new_table, api_catalog: Catalog):
    name = new_table()
    api_catalog.add_partitions(
        name,
        [
            NewPartition({"datestamp": day, "region": region}, f"/d/{day}/{region}")
            for day in ("1", "2")
            for region in ("us", "eu")
        ],
    )
    before = api_catalog.last_event_id()
    response = writer.delete(f"/v1/tables/{name}/partitions", params={"datestamp": "1"})
    assert response.status_code == 200, response.text
    data = response.json()
    assert sorted(p["spec"] for p in data["partitions"]) == [
        "datestamp=1/region=eu",
        "datestamp=1/region=us",
    ]
    assert (data["purged"], data["deleted"], data["errors"]) == (False, [], [])
    events = _events(api_catalog, before, name)
    assert [e.event_type for e in events] == [EventType.DROP_PARTITION] * 2
    assert data["eventIds"] == [e.event_id for e in events]
    left = [p.spec.to_path() for p in api_catalog.list_partitions(name)]
    assert left == ["datestamp=2/region=eu", "datestamp=2/region=us"]


def test_drop_partitions_with_purge(writer: httpx.Client, api_catalog: Catalog, tmp_path: Path):
    name = _table_at(api_catalog, tmp_path / "table")
    landed = _land(tmp_path / "table" / "datestamp=1" / "region=us", 4)
    register_partitions(api_catalog, name, {"datestamp=1/region=us": str(landed)})
    response = writer.delete(
        f"/v1/tables/{name}/partitions", params={"region": "us", "purge": "true"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["purged"] is True
    assert response.json()["errors"] == []
    assert not landed.exists()
    assert api_catalog.list_partitions(name) == []


def test_drop_table(writer: httpx.Client, new_table, api_catalog: Catalog):
    name = new_table()
    api_catalog.add_partitions(
        name, [NewPartition({"datestamp": "1", "region": "us"}, f"/d/{name}/1")]
    )
    api_catalog.mark_set_done(name, {"datestamp": "1"})
    before = api_catalog.last_event_id()
    response = writer.delete(f"/v1/tables/{name}")
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["definition"]["name"] == name
    assert [p["spec"] for p in data["partitions"]] == ["datestamp=1/region=us"]
    events = _events(api_catalog, before, name)
    assert [e.event_type for e in events] == [EventType.DROP_TABLE] * 2
    assert {e.topic for e in events} == {"hcat", f"hcat.{name}"}  # prefix topic and its own
    assert data["eventIds"] == [e.event_id for e in events]
    assert name not in {str(t.name) for t in api_catalog.list_tables(name.split(".")[0])}
    gone = writer.get(f"/v1/tables/{name}")
    assert gone.status_code == 404


def test_drop_table_with_purge(writer: httpx.Client, api_catalog: Catalog, tmp_path: Path):
    root = tmp_path / "table"
    name = _table_at(api_catalog, root)
    _land(root / "datestamp=1" / "region=us", 4)
    response = writer.delete(f"/v1/tables/{name}", params={"purge": "true"})
    assert response.status_code == 200, response.text
    assert response.json()["deleted"] == [str(root)]
    assert not root.exists()


def test_discover(writer: httpx.Client, api_catalog: Catalog, tmp_path: Path):
    root = tmp_path / "table"
    name = _table_at(api_catalog, root)
    _land(root / "datestamp=1" / "region=us%2Feast", 7)
    _land(root / "datestamp=1" / "region=eu", 3)
    (root / "datestamp=2" / "region=us").mkdir(parents=True)  # no data files
    url = f"/v1/tables/{name}/partitions:discover"
    before = api_catalog.last_event_id()
    dry = writer.post(url, json={"dryRun": True})
    assert dry.status_code == 200, dry.text
    report = dry.json()
    assert sorted((p["spec"], p["fileCount"]) for p in report["found"]) == [
        ("datestamp=1/region=eu", 1),
        ("datestamp=1/region=us%2Feast", 1),
    ]
    assert {"datestamp": "1", "region": "us/east"} in [p["values"] for p in report["found"]]
    assert report["empty"] == ["datestamp=2/region=us"]
    assert (report["dryRun"], report["partitions"], report["eventIds"]) == (True, [], [])
    assert api_catalog.last_event_id() == before  # a dry run writes nothing
    done = writer.post(url)  # no body: the defaults
    assert done.status_code == 200, done.text
    events = _events(api_catalog, before, name)
    assert [e.event_type for e in events] == [EventType.ADD_PARTITION] * 2
    assert done.json()["eventIds"] == [e.event_id for e in events]
    assert len(api_catalog.list_partitions(name)) == 2
    nothing = writer.post(url, json={}).json()
    assert (nothing["found"], nothing["partitions"]) == ([], [])


def test_discover_refuses_foreign_directories(
    writer: httpx.Client, api_catalog: Catalog, tmp_path: Path
):
    root = tmp_path / "table"
    name = _table_at(api_catalog, root)
    _land(root / "datestamp=1" / "region=us", 7)
    _land(root / "hour=3", 1)
    url = f"/v1/tables/{name}/partitions:discover"
    before = api_catalog.last_event_id()
    refused = writer.post(url, json={})
    assert refused.status_code == 400, refused.text
    assert "hour=3" in refused.json()["detail"]
    assert api_catalog.last_event_id() == before
    assert api_catalog.list_partitions(name) == []
    skipped = writer.post(url, json={"skipForeign": True})
    assert skipped.status_code == 200, skipped.text
    assert [f["path"] for f in skipped.json()["foreign"]] == ["hour=3"]
    assert [p.spec.to_path() for p in api_catalog.list_partitions(name)] == [
        "datestamp=1/region=us"
    ]


def test_api_client_lifecycle(api: ApiServer, api_catalog: Catalog, tmp_path: Path):
    root = tmp_path / "table"
    name = f"t{uuid.uuid4().hex[:10]}.client"
    with ApiClient(api.url, auth=WRITER) as client:
        created = client.create_table(
            name,
            location=str(root),
            partition_keys=["datestamp", "region"],
            announce=AnnounceMode.WRITE,
        )
        assert created.properties["hcat.notify.announce"] == "write"
        landed = _land(tmp_path / "landing", 6)
        registration = client.register_partitions(
            name, {"datestamp=1/region=us": str(landed)}, mark_set_done={"datestamp": "1"}
        )
        assert [p.spec.to_path() for p in registration.partitions] == ["datestamp=1/region=us"]
        assert registration.partitions[0].file_count == 1
        assert registration.done_event_id is not None
        assert registration.event_ids == (registration.partitions[0].event_id,)
        _land(root / "datestamp=2" / "region=eu", 2)
        discovery = client.discover_partitions(name, dry_run=True)
        assert [p.location for p in discovery.found] == [f"file://{root}/datestamp=2/region=eu"]
        assert discovery.registration is None
        discovered = client.discover_partitions(name)
        assert discovered.registration is not None
        assert len(discovered.registration.event_ids) == 1
        dropped, purge = client.drop_partitions(name, {"region": "eu"})
        assert [p.spec.to_path() for p in dropped.partitions] == ["datestamp=2/region=eu"]
        assert len(dropped.event_ids) == 1
        assert (purge.deleted, purge.errors) == ([], [])
        with pytest.raises(PartitionNotFoundError, match="matches"):
            client.drop_partitions(name, {"region": "eu"})
        table, purge = client.drop_table(name)
        assert table.table.name == created.name
        assert [p.spec.to_path() for p in table.partitions] == ["datestamp=1/region=us"]
        assert len(table.event_ids) == 2
    assert name not in {str(t.name) for t in api_catalog.list_tables()}
