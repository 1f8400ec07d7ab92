"""The HTTP edges of ``hcat-notify serve``, against a real server on SQLite and
PostgreSQL: HEAD wherever GET is, a 405's ``Allow`` naming every method of the path,
bodies that are not UTF-8 JSON refused with a problem document that says why (415 for
another media type), query values that are not UTF-8 refused, and every error the
server or its HTTP layer answers is the documented problem document."""

from __future__ import annotations

import socket
from typing import Any

import httpx
import pytest

from hcat_notify.store import Catalog
from tests.integration.api.support import READER, WRITER, ApiServer

pytestmark = pytest.mark.integration

PROBLEM = "application/problem+json"
PREFIX = "urn:hcat-notify:problem:"


def _problem(response: httpx.Response, status: int, *words: str) -> dict[str, Any]:
    """Asserts the documented problem document (docs/api.md, Errors)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM, response.headers
    problem: dict[str, Any] = response.json()
    assert problem["type"].startswith(PREFIX), problem
    assert problem["title"], problem
    assert problem["status"] == status, problem
    assert problem["error"].endswith("Error"), problem
    for word in words:
        assert word in problem["detail"], problem
    return problem


def _raw(api: ApiServer, request: bytes) -> httpx.Response:
    """Send ``request`` as is (no client would); the answer the server gives before it
    closes the connection."""
    with socket.create_connection(("127.0.0.1", api.port), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = [
        (name.strip(), value.strip()) for name, _, value in (s.partition(":") for s in lines)
    ]
    return httpx.Response(int(status_line.split()[1]), headers=headers, content=body)


def test_head_on_every_get_route(api: ApiServer, table: str, api_catalog: Catalog):
    """Point 10: HEAD answers as GET does, without a body."""
    api_catalog.mark_set_done(table, {"datestamp": "1"})
    with httpx.Client(base_url=api.url, auth=READER, timeout=30) as client:
        for path in (
            "/healthz",
            "/metrics",
            "/v1/tables",
            f"/v1/tables/{table}",
            f"/v1/tables/{table}/partitions",
            f"/v1/tables/{table}/done?datestamp=1",
            f"/v1/events?table={table}",
            "/v1/events/last",
            "/",
        ):
            got = client.get(path)
            head = client.head(path)
            assert head.status_code == got.status_code == 200, (path, head.status_code)
            assert head.content == b"", path
            assert head.headers["content-type"] == got.headers["content-type"], path


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("DELETE", "/v1/tables", "GET, HEAD, POST"),
        ("PUT", "/v1/tables/web.clicks", "DELETE, GET, HEAD"),
        ("PUT", "/v1/tables/web.clicks/partitions", "DELETE, GET, HEAD, POST"),
        ("DELETE", "/v1/tables/web.clicks/done", "GET, HEAD, POST"),
        ("POST", "/healthz", "GET, HEAD"),
    ],
)
def test_405_allows_every_method_of_the_path(api: ApiServer, method, path, allowed):
    """Point 10: the ``Allow`` of a 405 lists every method some route answers there."""
    response = httpx.request(method, f"{api.url}{path}", auth=WRITER, timeout=30)
    problem = _problem(response, 405, method)
    assert response.headers["allow"] == allowed
    assert (problem["instance"], problem["type"]) == (path, PREFIX + "method-not-allowed")


@pytest.mark.usefixtures("unchanged")
def test_bodies_the_parser_refuses_are_problem_documents(writer: httpx.Client, table: str):
    """Point 11: each says what is wrong with the body."""
    url = f"/v1/tables/{table}/done"
    json_type = {"content-type": "application/json"}
    for body, words in [
        (b'{"spec": {"datestamp": "\xff\xfe"}}', ("not UTF-8",)),
        (b"[" * 100_000 + b"]" * 100_000, ("nests too deeply",)),
        (b'{"spec": {"datestamp": ' + b"1" * 5000 + b"}}", ("5,000 characters",)),
        (b'{"spec": {"datestamp": 1e999}}', ("out of range",)),
        (b'{"spec": {"datestamp": NaN}}', ("NaN",)),
        (b'{"spec": {"datestamp": "1"', ("not JSON",)),
    ]:
        problem = _problem(writer.post(url, content=body, headers=json_type), 400, *words)
        assert problem["error"] == "InvalidInputError"
        assert problem["type"] == PREFIX + "invalid-input"
        assert problem["instance"] == url


@pytest.mark.usefixtures("unchanged")
def test_too_large_content_length_names_the_path(api: ApiServer, table: str):
    """Point 11: the 413 of an announced length has the path as ``instance``."""
    path = f"/v1/tables/{table}/done"
    response = _raw(
        api,
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {2 << 20}\r\nConnection: close\r\n\r\n".encode(),
    )
    problem = _problem(response, 413, "over 1,048,576 bytes")
    assert problem["instance"] == path
    assert problem["type"] == PREFIX + "content-too-large"


def test_protocol_errors_are_problem_documents(api: ApiServer):
    """Point 11: a request target over the bound and an unknown method, refused before
    the application sees them, still get problem documents."""
    query = b"q=" + b"a" * 100_000
    long = _raw(api, b"GET /healthz?" + query + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    problem = _problem(long, 414, "request target")
    assert (problem["instance"], problem["type"]) == ("/healthz", PREFIX + "uri-too-long")
    unknown = httpx.request("FROB", f"{api.url}/healthz", timeout=30)
    _problem(unknown, 400, "method")
    headers = httpx.get(f"{api.url}/healthz", headers={"x-big": "b" * 70_000}, timeout=30)
    problem = _problem(headers, 431, "headers")
    assert problem["type"] == PREFIX + "request-header-fields-too-large"
    assert httpx.get(f"{api.url}/healthz", timeout=30).status_code == 200


def test_a_refused_request_still_being_sent_gets_its_answer_not_a_reset(api: ApiServer):
    """A client that is still sending a request the server has refused (a 4 MB request
    target, refused after 60 KiB) reads the 414, then the end of the stream: the server
    reads and drops the rest before it closes. Closed with unread input, the connection
    was reset, and the reset could destroy the answer (seen under load as a
    ConnectionResetError in the test above)."""
    for _ in range(3):
        answer = _raw(api, b"GET /healthz?q=" + b"a" * 4_000_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        _problem(answer, 414, "request target")
    assert httpx.get(f"{api.url}/healthz", timeout=30).status_code == 200


def test_unknown_route_is_a_problem_document(api: ApiServer):
    """Point 11: a 404 without a domain error behind it names a class too."""
    problem = _problem(httpx.get(f"{api.url}/v2/tables", timeout=30), 404, "/v2/tables")
    assert problem["error"] == "InvalidInputError"


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize(
    ("content_type", "words"),
    [
        ("application/x-www-form-urlencoded", ("application/json", "x-www-form-urlencoded")),
        ("text/plain", ("application/json", "text/plain")),
        (None, ("application/json", "no Content-Type")),
        ("application/json; charset=latin-1", ("UTF-8", "latin-1")),
    ],
)
def test_json_of_another_media_type_is_415(api: ApiServer, table: str, content_type, words):
    """Point 12: curl's default form type, text/plain, no type at all, another charset."""
    headers = {"content-type": content_type} if content_type else {}
    body = b'{"spec": {"datestamp": "1"}}'
    with httpx.Client(base_url=api.url, auth=WRITER, timeout=30) as client:
        response = client.post(f"/v1/tables/{table}/done", content=body, headers=headers)
    assert response.request.headers.get("content-type") == content_type
    problem = _problem(response, 415, *words)
    assert problem["type"] == PREFIX + "unsupported-media-type"


def test_json_still_taken(writer: httpx.Client, table: str):
    """Point 12: what is JSON in UTF-8 is taken, with or without a charset."""
    for content_type in ("application/json", "application/json; charset=UTF-8"):
        response = writer.post(
            f"/v1/tables/{table}/done",
            content=b'{"spec": {"datestamp": "\xc3\xa9t\xc3\xa9"}}',
            headers={"content-type": content_type},
        )
        assert response.status_code == 201, response.text
        assert response.json()["partitionSpec"] == {"datestamp": "été"}


def test_query_values_not_utf8_are_400(api: ApiServer, table: str, api_catalog: Catalog):
    """Point 13: a value that is not UTF-8 is refused, not looked up as U+FFFD."""
    api_catalog.mark_set_done(table, {"datestamp": "\ufffd\ufffd"})
    before = api_catalog.last_event_id()
    with httpx.Client(base_url=api.url, auth=WRITER, timeout=30) as client:
        for url in (
            f"/v1/tables/{table}/done?datestamp=%FF%FE",
            f"/v1/tables/{table}/partitions?datestamp=%FF%FE",
            f"/v1/tables/{table}/partitions?%FF=1",
            f"/v1/events?table={table}&cursor=%C3",
        ):
            problem = _problem(client.get(url), 400, "not UTF-8")
            assert problem["error"] == "InvalidInputError", url
        _problem(client.delete(f"/v1/tables/{table}/partitions?datestamp=%FF%FE"), 400, "datestamp")
    assert api_catalog.last_event_id() == before


@pytest.mark.usefixtures("unchanged")
def test_repeated_key_in_a_json_body_is_refused(writer: httpx.Client, table: str):
    """Point 13: ``{"k":"a","k":"b"}`` is refused, as the CLI refuses a repeated key."""
    problem = _problem(
        writer.post(
            f"/v1/tables/{table}/done",
            content=b'{"spec": {"datestamp": "a", "datestamp": "b"}}',
            headers={"content-type": "application/json"},
        ),
        400,
        "'datestamp' appears more than once",
    )
    assert problem["error"] == "InvalidInputError"
