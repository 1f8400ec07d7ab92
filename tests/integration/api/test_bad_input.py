"""Each bad input gets a problem document that names it, and writes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from hcat_notify.store import Catalog, NewPartition
from tests.integration.api.support import ApiServer

pytestmark = pytest.mark.integration

PROBLEM = "application/problem+json"


def _check(response: httpx.Response, status: int, *words: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    problem: dict[str, Any] = response.json()
    assert problem["status"] == status
    assert problem["title"]
    for word in words:
        assert word in problem["detail"], problem
    return problem


@pytest.mark.usefixtures("unchanged")
class TestRejectedWritesChangeNothing:
    def test_malformed_table_name(self, writer: httpx.Client):
        problem = _check(
            writer.post("/v1/tables/web-clicks/done", json={"spec": {"d": "1"}}),
            400,
            "malformed table name 'web-clicks'",
        )
        assert problem["error"] == "InvalidIdentifierError"
        assert problem["type"] == "urn:hcat-notify:problem:invalid-identifier"

    def test_unknown_table(self, writer: httpx.Client):
        problem = _check(
            writer.post("/v1/tables/nosuch.table/done", json={"spec": {"d": "1"}}),
            404,
            "table nosuch.table is not registered",
        )
        assert problem["error"] == "TableNotFoundError"

    def test_key_not_a_partition_key(self, writer: httpx.Client, table: str):
        name = table
        problem = _check(
            writer.post(f"/v1/tables/{name}/done", json={"spec": {"hour": "1"}}),
            422,
            "no partition key 'hour'",
            "datestamp, region",
        )
        assert problem["error"] == "UnknownPartitionKeyError"

    def test_done_that_skips_a_leading_key(
        self, api: ApiServer, writer: httpx.Client, table: str, tmp_path: Path
    ):
        """A done's spec is a prefix of the table's keys: ``region=us`` alone (keys
        datestamp, region) would cover region us of every day, future ones too."""
        from hcat_notify.api.client import ApiClient
        from hcat_notify.errors import InvalidSpecError
        from tests.integration.api.support import WRITER

        message = (
            f"mark-set-done spec 'region=us' for table {table} skips the leading partition "
            "key datestamp: a done's spec must be a prefix of its partition keys "
            "(datestamp, region)"
        )
        problem = _check(
            writer.post(f"/v1/tables/{table}/done", json={"spec": {"region": "us"}}), 400
        )
        assert (problem["detail"], problem["error"]) == (message, "InvalidSpecError")
        landed = tmp_path / "landed"
        landed.mkdir()
        (landed / "part-00000.parquet").write_bytes(b"x")
        problem = _check(
            writer.post(
                f"/v1/tables/{table}/partitions:register",
                json={
                    "partitions": [
                        {"spec": {"datestamp": "1", "region": "us"}, "location": str(landed)}
                    ],
                    "markSetDone": {"region": "us"},
                },
            ),
            400,
        )
        assert problem["detail"] == message
        with ApiClient(api.url, auth=WRITER) as client, pytest.raises(InvalidSpecError) as caught:
            client.mark_set_done(table, {"region": "us"})
        assert str(caught.value) == message

    def test_malformed_spec(self, writer: httpx.Client, table: str):
        name = table
        _check(
            writer.post(f"/v1/tables/{name}/done", json={"spec": {}}), 400, "empty partition spec"
        )
        _check(
            writer.post(f"/v1/tables/{name}/done", json={"spec": {"bad key": "1"}}),
            400,
            "invalid partition key 'bad key'",
        )
        _check(
            writer.post(f"/v1/tables/{name}/done", json={"spec": {"datestamp": "a\x00b"}}),
            400,
            "NUL",
        )
        _check(
            writer.post(f"/v1/tables/{name}/done", json={"spec": {"datestamp": "x" * 800}}),
            400,
            "at most",
        )

    def test_malformed_bodies(self, writer: httpx.Client, table: str):
        name = table
        url = f"/v1/tables/{name}/done"
        headers = {"content-type": "application/json"}
        _check(writer.post(url, content=b"{not json", headers=headers), 400, "malformed request")
        _check(writer.post(url, json={"specs": {"datestamp": "1"}}), 400, "spec")
        _check(writer.post(url, json={"spec": {"datestamp": 1}}), 400, "datestamp")
        _check(writer.post(url, json=["spec"]), 400, "malformed request")
        partitions = f"/v1/tables/{name}/partitions"
        _check(writer.post(partitions, json={"partitions": []}), 400, "partitions")
        _check(
            writer.post(
                partitions,
                json={"partitions": [{"spec": {"datestamp": "1"}, "location": "/x"}]},
            ),
            400,
            "missing partition key(s) region",
        )
        _check(
            writer.post(
                partitions,
                json={
                    "partitions": [
                        {"spec": {"datestamp": "1", "region": "a"}, "location": "/x"},
                        {"spec": {"datestamp": "1", "region": "a"}, "location": "/y"},
                    ]
                },
            ),
            400,
            "given twice",
        )
        for location, problem in (("/x\x00y", "contains a NUL character"), ("x", "relative path")):
            spec = {"datestamp": "1", "region": "a"}
            _check(
                writer.post(
                    partitions, json={"partitions": [{"spec": spec, "location": location}]}
                ),
                400,
                problem,
            )

    def test_bad_registrations(self, writer: httpx.Client, table: str, tmp_path: Path):
        landed = tmp_path / "landed"
        landed.mkdir()
        (landed / "part-0.parquet").write_bytes(b"data")
        markers_only = tmp_path / "markers"
        markers_only.mkdir()
        (markers_only / "_SUCCESS").write_bytes(b"")
        (markers_only / ".part-0.crc").write_bytes(b"")

        def register(
            name: str, spec: dict[str, str], location: str | None, **extra: Any
        ) -> httpx.Response:
            item = {"spec": spec} if location is None else {"spec": spec, "location": location}
            return writer.post(
                f"/v1/tables/{name}/partitions:register", json={"partitions": [item], **extra}
            )

        full = {"datestamp": "1", "region": "us"}
        problem = _check(register("nosuch.table", full, str(landed)), 404, "nosuch.table")
        assert problem["error"] == "TableNotFoundError"
        problem = _check(
            register(table, {**full, "hour": "1"}, str(landed)), 422, "no partition key 'hour'"
        )
        assert problem["error"] == "UnknownPartitionKeyError"
        _check(register(table, {"datestamp": "1"}, str(landed)), 400, "missing partition key")
        _check(register(table, full, None), 400, "location")
        _check(register(table, full, ""), 400, "location")
        problem = _check(register(table, full, str(markers_only)), 422, "holds no data files")
        assert problem["error"] == "LocationNotFoundError"
        _check(register(table, full, str(tmp_path / "nowhere")), 422, "nowhere")
        _check(
            register(table, full, str(landed), markSetDone={"hour": "1"}),
            422,
            "no partition key 'hour'",
        )
        _check(register(table, full, str(landed), announce="often"), 400, "announce")
        _check(
            writer.post(f"/v1/tables/{table}/partitions:register", json={"partitions": []}),
            400,
            "partitions",
        )

    def test_bad_discoveries(self, writer: httpx.Client, table: str):
        _check(writer.post("/v1/tables/nosuch.table/partitions:discover"), 404, "nosuch.table")
        _check(
            writer.post(f"/v1/tables/{table}/partitions:discover", json={"dryrun": True}),
            400,
            "dryrun",
        )

    def test_drop_of_an_unknown_table(self, writer: httpx.Client):
        problem = _check(writer.delete("/v1/tables/nosuch.table"), 404, "nosuch.table")
        assert problem["error"] == "TableNotFoundError"
        _check(writer.delete("/v1/tables/nosuch.table/partitions?d=1"), 404, "nosuch.table")

    def test_bad_table_definitions(self, writer: httpx.Client):
        base = {"name": "fresh.t", "location": "/data/fresh", "partitionKeys": ["k"]}
        _check(writer.post("/v1/tables", json={**base, "name": "no_dot"}), 400, "DB.TABLE")
        _check(writer.post("/v1/tables", json={**base, "partitionKeys": []}), 400, "partitionKeys")
        _check(writer.post("/v1/tables", json={**base, "partitionKeys": ["a b"]}), 400, "a b")
        _check(writer.post("/v1/tables", json={**base, "format": "xls"}), 400, "format")
        _check(writer.post("/v1/tables", json={**base, "retentionSeconds": 0}), 400, "retention")
        _check(writer.post("/v1/tables", json={**base, "topic": "queue://x"}), 400, "topic")
        _check(writer.post("/v1/tables", json={**base, "announce": "often"}), 400, "announce")

    def test_body_over_one_mebibyte(self, writer: httpx.Client, table: str):
        name = table
        big = {"spec": {"datestamp": "1"}, "padding": "x" * (1 << 20)}
        _check(writer.post(f"/v1/tables/{name}/done", json=big), 413, "over 1,048,576 bytes")

    def test_chunked_body_over_one_mebibyte(self, writer: httpx.Client, table: str):
        name = table

        def chunks():
            yield b'{"spec": {"datestamp": "1"}, "padding": "'
            for _ in range(40):
                yield b"x" * 32_768
            yield b'"}'

        response = writer.post(
            f"/v1/tables/{name}/done",
            content=chunks(),
            headers={"content-type": "application/json"},
        )
        _check(response, 413, "over 1,048,576 bytes")


def test_bad_drops_change_nothing(writer: httpx.Client, new_table, api_catalog: Catalog):
    name = new_table()
    external = new_table(table_type="EXTERNAL_TABLE")
    for each in (name, external):
        api_catalog.add_partitions(
            each, [NewPartition({"datestamp": "1", "region": "us"}, f"/d/{each}/1")]
        )
    before = (api_catalog.last_event_id(), len(api_catalog.list_tables()))
    url = f"/v1/tables/{name}/partitions"
    problem = _check(writer.delete(url, params={"datestamp": "2"}), 404, "no partition")
    assert problem["error"] == "PartitionNotFoundError"
    problem = _check(writer.delete(url, params={"hour": "1"}), 422, "no partition key 'hour'")
    assert problem["error"] == "UnknownPartitionKeyError"
    _check(writer.delete(url), 400, "give the partitions to drop")
    _check(writer.delete(url, params={"datestamp": "1", "purge": "maybe"}), 400, "purge")
    _check(
        writer.delete(
            f"/v1/tables/{external}/partitions", params={"datestamp": "1", "purge": True}
        ),
        400,
        "EXTERNAL_TABLE",
    )
    _check(writer.delete(f"/v1/tables/{external}", params={"purge": True}), 400, "EXTERNAL_TABLE")
    assert (api_catalog.last_event_id(), len(api_catalog.list_tables())) == before
    for each in (name, external):
        assert [p.spec.to_path() for p in api_catalog.list_partitions(each)] == [
            "datestamp=1/region=us"
        ]


def test_bad_reads(reader: httpx.Client, new_table):
    name = new_table()
    _check(reader.get(f"/v1/tables/{name}/done"), 400, "give the spec")
    _check(reader.get(f"/v1/tables/{name}/done?hour=1"), 422, "no partition key 'hour'")
    skips = "skips the leading partition key datestamp"  # as a done of it is refused
    _check(reader.get(f"/v1/tables/{name}/done?region=us"), 400, skips)
    _check(reader.get(f"/v1/tables/{name}/done?region=us&wait=30"), 400, skips)
    _check(reader.get(f"/v1/tables/{name}/done?datestamp=1&datestamp=2"), 400, "more than once")
    _check(reader.get(f"/v1/tables/{name}/done?spec=datestamp=1&region=x"), 400, "not both")
    _check(reader.get(f"/v1/tables/{name}/done?spec=datestamp"), 400, "KEY=VALUE")
    for wait in ("-1", "nan", "inf", "301", "soon"):
        _check(reader.get(f"/v1/tables/{name}/done?datestamp=1&wait={wait}"), 400, "wait")
    _check(reader.get("/v1/tables/a.b.c"), 400, "malformed table name")
    _check(reader.get(f"/v1/tables/{name}/partitions?limit=0"), 400, "limit")
    _check(reader.get(f"/v1/tables/{name}/partitions?hour=1"), 422, "hour")
    _check(reader.get("/v1/events"), 400, "table")
    _check(reader.get(f"/v1/events?table={name}&cursor=nonsense"), 400, "malformed cursor")
    _check(reader.get(f"/v1/events?table={name}&cursor=*:99999999999"), 400, "beyond the newest")
    _check(reader.get(f"/v1/events?table={name}&cursor=t:99999999999999999999"), 400, "too large")
    _check(reader.get(f"/v1/events?table={name}&limit=10001"), 400, "limit")
    _check(reader.get("/v1/events?table=nosuch.t"), 404, "nosuch.t")


def test_unknown_route_and_method(api: ApiServer):
    _check(httpx.get(f"{api.url}/v2/tables"), 404, "Not Found")
    response = httpx.delete(f"{api.url}/v1/events/last")
    assert response.status_code == 405
    assert response.headers["content-type"] == PROBLEM
