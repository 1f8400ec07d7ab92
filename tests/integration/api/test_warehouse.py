"""The warehouse boundary through the HTTP API, as an attacker with a writer principal
would try it, against a real ``hcat-notify serve`` whose operator set one narrow root
and one API external root (SQLite and PostgreSQL): nothing outside the root is registered
or deleted, and nothing outside both is registered or measured (docs/api.md, "Locations
over the API")."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hcat_notify.config import Settings, load_settings
from hcat_notify.store import Catalog
from tests.integration.api.support import WRITER, ApiServer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="module")
def landing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The operator's one API external root."""
    return tmp_path_factory.mktemp("landing")


@pytest.fixture(scope="module")
def roots_settings(api_settings: Settings, warehouse: Path, landing: Path) -> Settings:
    return load_settings(
        home=api_settings.home,
        db_url=api_settings.database_url,
        broker_url=api_settings.broker_url,
        warehouse_roots=[str(warehouse)],
        api_external_roots=[str(landing)],
    )


@pytest.fixture(scope="module")
def server(roots_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    Catalog.open(roots_settings).close()
    log = tmp_path_factory.mktemp("warehouse-api-log") / "serve.log"
    with ApiServer(roots_settings, log=log) as api:
        yield api.url


@pytest.fixture
def client(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, auth=WRITER, timeout=30) as http:
        yield http


@pytest.fixture
def catalog(roots_settings: Settings) -> Iterator[Catalog]:
    with Catalog.open(roots_settings) as opened:
        yield opened


def _precious(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "part-0.parquet").write_bytes(b"ledger")
    return directory


def _name() -> str:
    return f"api.t{uuid.uuid4().hex[:10]}"


def _refused(response: httpx.Response, problem: str) -> None:
    assert response.status_code == 400, response.text
    body = response.json()
    assert response.headers["content-type"].startswith("application/problem+json")
    assert problem in body["detail"]
    assert body["error"] in ("LocationOutsideWarehouseError", "InvalidInputError")


@pytest.mark.parametrize(
    ("location", "problem"),
    [
        ("{outside}", "is outside the warehouse roots"),
        ("/", "is the root of its filesystem"),
        ("file://{root}/../../../etc", "has a '..' segment"),
        ("{root}/../finance", "has a '..' segment"),
        ("{root}/link", "is outside the warehouse roots"),  # where it leads: not said
    ],
)
def test_a_table_outside_the_roots_is_refused_and_nothing_registered(
    client: httpx.Client,
    catalog: Catalog,
    warehouse: Path,
    tmp_path: Path,
    location: str,
    problem: str,
):
    outside = _precious(tmp_path / "finance" / "ledger")
    link = warehouse / "link"
    link.unlink(missing_ok=True)
    link.symlink_to(outside)
    before = (len(catalog.list_tables()), catalog.last_event_id())
    name = _name()
    body = {
        "name": name,
        "location": location.format(outside=outside, root=warehouse),
        "partitionKeys": ["ds"],
    }
    _refused(client.post("/v1/tables", json=body), problem)
    assert (len(catalog.list_tables()), catalog.last_event_id()) == before
    assert client.delete(f"/v1/tables/{name}", params={"purge": "true"}).status_code == 404
    assert (outside / "part-0.parquet").read_bytes() == b"ledger"


def test_a_partition_outside_the_roots_is_refused(
    client: httpx.Client, catalog: Catalog, warehouse: Path, tmp_path: Path
):
    name = _name()
    root = warehouse / name
    created = client.post(
        "/v1/tables", json={"name": name, "location": str(root), "partitionKeys": ["ds"]}
    )
    assert created.status_code == 201, created.text
    outside = _precious(tmp_path / "finance" / "ledger")
    root.mkdir()
    (root / "ds=2").symlink_to(outside)
    before = catalog.last_event_id()
    for location, problem in [
        (str(outside), "is outside the warehouse roots"),
        (str(root / "ds=2"), "symlinks resolved"),
        (f"{root}/../../finance/ledger", "has a '..' segment"),
    ]:
        spec = {"ds": "1"}
        registered = client.post(
            f"/v1/tables/{name}/partitions:register",
            json={"partitions": [{"spec": spec, "location": location}]},
        )
        _refused(registered, problem)
        added = client.post(
            f"/v1/tables/{name}/partitions",
            json={"partitions": [{"spec": spec, "location": location}]},
        )
        _refused(added, problem)
    _refused(
        client.post(f"/v1/tables/{name}/partitions:discover", json={}),
        "ds=2 is a symbolic link",  # refused by name before it is listed
    )
    assert catalog.list_partitions(name) == []
    assert catalog.last_event_id() == before
    dropped = client.delete(f"/v1/tables/{name}", params={"purge": "true"})
    assert dropped.status_code == 200, dropped.text
    assert (outside / "part-0.parquet").read_bytes() == b"ledger"


def test_external_data_is_never_purged_through_the_api(
    client: httpx.Client, catalog: Catalog, landing: Path
):
    name = _name()
    outside = _precious(landing / name / "ledger")
    created = client.post(
        "/v1/tables",
        json={
            "name": name,
            "location": str(outside),
            "partitionKeys": ["ds"],
            "tableType": "EXTERNAL_TABLE",
        },
    )
    assert created.status_code == 201, created.text
    registered = client.post(
        f"/v1/tables/{name}/partitions:register",
        json={"partitions": [{"spec": {"ds": "1"}, "location": str(outside)}]},
    )
    assert registered.status_code == 201, registered.text
    for path in (f"/v1/tables/{name}/partitions", f"/v1/tables/{name}"):
        refused = client.delete(path, params={"ds": "1", "purge": "true"})
        _refused(refused, "EXTERNAL_TABLE")
    assert (outside / "part-0.parquet").read_bytes() == b"ledger"
    assert [p.spec.to_path() for p in catalog.list_partitions(name)] == ["ds=1"]


def test_a_purge_through_the_api_keeps_a_shared_directory(
    client: httpx.Client, catalog: Catalog, warehouse: Path
):
    name = _name()
    root = warehouse / name
    shared = _precious(root / "shared")
    created = client.post(
        "/v1/tables", json={"name": name, "location": str(root), "partitionKeys": ["ds"]}
    )
    assert created.status_code == 201, created.text
    registered = client.post(
        f"/v1/tables/{name}/partitions:register",
        json={
            "partitions": [
                {"spec": {"ds": "1"}, "location": str(shared)},
                {"spec": {"ds": "2"}, "location": str(shared)},
            ]
        },
    )
    assert registered.status_code == 201, registered.text
    dropped = client.delete(f"/v1/tables/{name}/partitions", params={"ds": "1", "purge": "true"})
    assert dropped.status_code == 200, dropped.text
    assert dropped.json()["deleted"] == []
    assert "still used by partition ds=2" in dropped.json()["kept"][0]
    assert (shared / "part-0.parquet").read_bytes() == b"ledger"
    assert [p.spec.to_path() for p in catalog.list_partitions(name)] == ["ds=2"]


def _outside_refusal(response: httpx.Response, location: str) -> dict[str, str]:
    """The refusal of a location outside the warehouse and the API external roots, with
    the location as given taken out of its detail (the rest is the same for any)."""
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error"] == "LocationOutsideWarehouseError"
    assert "the API registers locations only inside them" in body["detail"]
    return {**body, "detail": body["detail"].replace(repr(location), "<location>")}


def test_an_external_table_outside_the_api_places_is_one_refusal_exists_or_not(
    client: httpx.Client, catalog: Catalog, tmp_path: Path
):
    there = _precious(tmp_path / "etc" / "ssl" / "certs")
    before = (len(catalog.list_tables()), catalog.last_event_id())
    answers = []
    for location in (str(there), str(tmp_path / "etc" / "nonexistent")):
        body = {
            "name": "api.probe",
            "location": location,
            "partitionKeys": ["k"],
            "tableType": "EXTERNAL_TABLE",
        }
        answers.append(_outside_refusal(client.post("/v1/tables", json=body), location))
    assert answers[0] == answers[1]
    assert answers[0]["type"] == "urn:hcat-notify:problem:location-outside-warehouse"
    assert (len(catalog.list_tables()), catalog.last_event_id()) == before


def test_an_external_table_inside_an_api_external_root_is_registered_and_measured(
    client: httpx.Client, catalog: Catalog, landing: Path, warehouse: Path
):
    name, inside = _name(), _name()
    data = _precious(landing / name / "ds=1")
    created = client.post("/v1/tables", json={**_external(name), "location": str(landing / name)})
    assert created.status_code == 201, created.text
    registered = client.post(
        f"/v1/tables/{name}/partitions:register",
        json={"partitions": [{"spec": {"ds": "1"}, "location": str(data)}]},
    )
    assert registered.status_code == 201, registered.text
    assert [(p.file_count, p.total_bytes) for p in catalog.list_partitions(name)] == [(1, 6)]
    in_root = {**_external(inside), "location": str(warehouse / inside)}  # as before
    assert client.post("/v1/tables", json=in_root).status_code == 201


def test_partitions_outside_the_api_places_are_refused_before_any_measure(
    client: httpx.Client, catalog: Catalog, tmp_path: Path
):
    """Even of the operator's external table (registered without the API) outside them."""
    name = _name()
    operators = _precious(tmp_path / "operators" / "t")
    catalog.create_table(name, location=str(operators), partition_keys=["ds"],
                         table_type="EXTERNAL_TABLE")  # fmt: skip
    there = _precious(operators / "ds=1")
    before = catalog.last_event_id()
    for route in ("partitions:register", "partitions"):
        answers = []
        for location in (str(there), str(operators / "ds=2"), str(tmp_path / "empty")):
            item = {"spec": {"ds": "1"}, "location": location}
            sent = client.post(f"/v1/tables/{name}/{route}", json={"partitions": [item]})
            answers.append(_outside_refusal(sent, location))
        assert answers[0] == answers[1] == answers[2]
    assert catalog.list_partitions(name) == []
    assert catalog.last_event_id() == before


def _external(name: str) -> dict[str, object]:
    return {"name": name, "partitionKeys": ["ds"], "tableType": "EXTERNAL_TABLE"}
