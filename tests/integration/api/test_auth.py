"""The auth matrix: anonymous, wrong secret, reader and writer on every route."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import httpx
import pytest

from hcat_notify.api.client import ApiClient
from hcat_notify.config import Settings
from hcat_notify.errors import ApiAuthError
from hcat_notify.model.events import EventType
from hcat_notify.store import Catalog
from tests.integration.api.support import READER, WRITER, ApiServer

pytestmark = pytest.mark.integration

READS = [
    ("GET", "/v1/tables"),
    ("GET", "/v1/tables/{table}"),
    ("GET", "/v1/tables/{table}/partitions"),
    ("GET", "/v1/tables/{table}/done?datestamp=1"),
    ("GET", "/v1/events?table={table}"),
    ("GET", "/v1/events/last"),
    ("GET", "/"),
]
WRITES = [  # in this order, each succeeds for a writer with the status given
    (
        "POST",
        "/v1/tables",
        {"name": "{db}.other", "location": "/x/{db}", "partitionKeys": ["k"]},
        201,
    ),
    ("POST", "/v1/tables/{table}/done", {"spec": {"datestamp": "1"}}, 201),
    (
        "POST",
        "/v1/tables/{table}/partitions",
        {
            "partitions": [
                {"spec": {"datestamp": "1", "region": "us"}, "location": "/x-data/{table}"}
            ]
        },
        201,
    ),
    (
        "POST",
        "/v1/tables/{table}/partitions:register",
        {"partitions": [{"spec": {"datestamp": "2", "region": "us"}, "location": "{landing}"}]},
        201,
    ),
    ("POST", "/v1/tables/{table}/partitions:discover", {"dryRun": True}, 200),
    ("DELETE", "/v1/tables/{table}/partitions?datestamp=1", None, 200),
    ("DELETE", "/v1/tables/{db}.other", None, 200),
]
WRITTEN = {  # what the writes above announce
    EventType.CREATE_TABLE,
    EventType.MARK_SET_DONE,
    EventType.ADD_PARTITION,
    EventType.DROP_PARTITION,
    EventType.DROP_TABLE,
}
OPEN = ["/healthz", "/readyz", "/metrics", "/openapi.json"]


def _fill(value, table: str, landing: str = ""):
    db = table.split(".")[0]
    if isinstance(value, str):
        return value.format(table=table, db=db, landing=landing)
    if isinstance(value, dict):
        return {key: _fill(item, table, landing) for key, item in value.items()}
    if isinstance(value, list):
        return [_fill(item, table, landing) for item in value]
    return value


@pytest.mark.parametrize(
    ("auth", "reads", "writes"),
    [
        (None, 401, 401),
        (("hcat-reader", "wrong"), 401, 401),
        (("nobody", "hcat-reader-dev"), 401, 401),
        (READER, 200, 403),
        (WRITER, 200, None),  # each write's own success status
    ],
    ids=["anonymous", "wrong-secret", "unknown-principal", "reader", "writer"],
)
def test_auth_matrix(
    api: ApiServer, new_table, api_catalog: Catalog, tmp_path: Path, auth, reads, writes
):
    table = new_table()
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "part-0.parquet").write_bytes(b"data")
    api_catalog.mark_set_done(table, {"datestamp": "1"})  # so that the done check answers 200
    before = api_catalog.last_event_id()
    with httpx.Client(base_url=api.url, auth=auth, timeout=30) as client:
        for method, path in READS:
            response = client.request(method, _fill(path, table))
            assert response.status_code == reads, (path, response.text)
            if reads == 401:
                assert response.headers["www-authenticate"] == 'Basic realm="hcat-notify"'
                assert response.json()["error"] == "ApiAuthError"
        for method, path, body, success in WRITES:
            response = client.request(
                method, _fill(path, table), json=_fill(body, table, str(landing))
            )
            assert response.status_code == (writes or success), (path, response.text)
            if writes == 403:
                assert "is a reader" in response.json()["detail"]
        for path in OPEN:
            assert client.get(path).status_code == 200, path
    written = {event.event_type for event in api_catalog.outbox.events(after_event_id=before)}
    assert written == (WRITTEN if writes is None else set())  # refused writes changed nothing
    partitions = [p.spec.to_path() for p in api_catalog.list_partitions(table)]
    assert partitions == (["datestamp=2/region=us"] if writes is None else [])
    assert [str(t.name) for t in api_catalog.list_tables(table.split(".")[0])] == [table]


def test_malformed_authorization_header(api: ApiServer):
    response = httpx.get(f"{api.url}/v1/tables", headers={"Authorization": "Basic !!!"})
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"


def test_a_wrong_consumer_password_names_the_principal_and_its_settings(
    api: ApiServer, api_settings: Settings, table: str
):
    """What ``wait`` / ``watch`` with HCAT_NOTIFY_API_URL and a wrong
    HCAT_NOTIFY_CONSUMER_PASSWORD say: which principal, and where it was set."""
    wrong = dataclasses.replace(api_settings, api_url=api.url, consumer_password="wrong")
    with ApiClient.from_settings(wrong) as client, pytest.raises(ApiAuthError) as caught:
        client.get_table(table)
    assert str(caught.value) == (
        f"the API at {api.url} refused API principal {api_settings.consumer_user!r} (the "
        "consumer principal, HCAT_NOTIFY_CONSUMER_USER / HCAT_NOTIFY_CONSUMER_PASSWORD): "
        "unknown principal or wrong secret"
    )
