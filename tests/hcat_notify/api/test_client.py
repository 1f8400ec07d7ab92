"""The API client over an in-memory transport: failover, what is sent again, errors."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from hcat_notify.api.client import ApiClient
from hcat_notify.errors import (
    ApiAuthError,
    ApiError,
    ApiUnavailableError,
    InvalidInputError,
    TableNotFoundError,
    UnknownPartitionKeyError,
)

A, B = "http://a:8080", "http://b:8080"
PROBLEM = {"content-type": "application/problem+json"}
LAST = {"eventId": 7}


def _client(handler) -> ApiClient:
    return ApiClient([A, B], auth=("u", "p"), transport=httpx.MockTransport(handler))


def test_reads_fail_over_and_stay_with_the_instance_that_answered():
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        if request.url.host == "a":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json=LAST)

    with _client(handler) as client:
        assert client.last_event_id() == 7
        assert client.last_event_id() == 7
    assert seen == ["a", "b", "b"]


def test_a_read_broken_in_flight_is_sent_again():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "a":
            raise httpx.RemoteProtocolError("server disconnected", request=request)
        return httpx.Response(200, json=LAST)

    with _client(handler) as client:
        assert client.last_event_id() == 7


def test_503_moves_on_and_the_last_answer_is_raised_when_all_fail():
    def handler(request: httpx.Request) -> httpx.Response:
        problem = {
            "status": 503,
            "detail": f"{request.url.host} down",
            "error": "StoreUnavailableError",
        }
        return httpx.Response(503, json=problem, headers=PROBLEM)

    with _client(handler) as client, pytest.raises(Exception, match="b down") as info:
        client.last_event_id()
    assert type(info.value).__name__ == "StoreUnavailableError"


def test_a_write_is_never_sent_twice_once_it_may_have_arrived():
    posts: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        posts.append(request.url.host)
        raise httpx.ReadTimeout("no answer", request=request)

    with _client(handler) as client, pytest.raises(ApiUnavailableError, match="may or may not"):
        client.mark_set_done("web.clicks", {"datestamp": "1"})
    assert posts == ["a"]


def test_a_write_refused_at_connect_goes_to_the_next_instance():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "a":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(201, json={"eventId": 9})

    with _client(handler) as client:
        assert client.mark_set_done("web.clicks", {"datestamp": "1"}) == 9


@pytest.mark.parametrize(
    ("status", "error", "raised"),
    [
        (404, "TableNotFoundError", TableNotFoundError),
        (422, "UnknownPartitionKeyError", UnknownPartitionKeyError),
        (400, "InvalidInputError", InvalidInputError),
        (401, "ApiAuthError", ApiAuthError),
        (403, None, ApiAuthError),
        (418, None, ApiError),
        (404, "NotOurs", ApiError),
    ],
)
def test_problems_become_the_same_exception_type(status, error, raised):
    def handler(request: httpx.Request) -> httpx.Response:
        body = {"status": status, "detail": "what went wrong"}
        if error is not None:
            body["error"] = error
        return httpx.Response(status, json=body, headers=PROBLEM)

    with _client(handler) as client, pytest.raises(raised, match="what went wrong"):
        client.get_table("web.clicks")


def test_a_401_names_the_principal_refused():
    def handler(request: httpx.Request) -> httpx.Response:
        body = {"status": 401, "detail": "unknown principal or wrong secret"}
        return httpx.Response(401, json={**body, "error": "ApiAuthError"}, headers=PROBLEM)

    with _client(handler) as client, pytest.raises(ApiAuthError) as caught:
        client.get_table("web.clicks")
    assert str(caught.value) == (
        "the API at http://a:8080 refused API principal 'u': unknown principal or wrong secret"
    )


def test_not_done_is_none():
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.params["spec"] == "datestamp=1/region=us%2Feast"
        problem = {"type": "urn:hcat-notify:problem:not-done", "status": 404, "detail": "no"}
        return httpx.Response(404, json=problem, headers=PROBLEM)

    with _client(handler) as client:
        assert (
            client.find_covering_done("web.clicks", {"datestamp": "1", "region": "us/east"}) is None
        )


def test_catch_up_pages_until_the_server_says_no_more():
    calls: list[dict[str, str]] = []

    def event(event_id: int) -> dict[str, Any]:
        return {
            "eventId": event_id,
            "event": "MARK_SET_DONE",
            "table": "web.clicks",
            "topic": "hcat.web.clicks",
            "spec": "d=1",
            "headers": {"HCAT_SPEC": "d=1"},
            "body": {"eventId": event_id},
            "createdAt": "2026-11-23T10:00:00+00:00",
        }

    def handler(request: httpx.Request) -> httpx.Response:
        params = dict(request.url.params)
        calls.append(params)
        after = int(params["after"])
        ids = [after + 1, after + 2] if after < 4 else [after + 1]
        return httpx.Response(
            200, json={"events": [event(i) for i in ids], "cursor": "*:0", "more": len(ids) == 2}
        )

    with _client(handler) as client:
        got = client.catch_up(["web.clicks"], cursor="hcat.web.clicks:0")
    assert [e.event_id for e in got] == [1, 2, 3, 4, 5]
    assert [c["after"] for c in calls] == ["0", "2", "4"]
    assert all(c["cursor"] == "hcat.web.clicks:0" for c in calls)


def test_bad_urls_are_refused():
    with pytest.raises(InvalidInputError, match="http"):
        ApiClient("stomp://a:1")


def test_a_partition_comes_back_as_the_server_knows_it():
    partition = {
        "spec": "d=1",
        "values": {"d": "1"},
        "location": "/w/t/d=1",
        "fileCount": 2,
        "totalBytes": 10,
        "archived": False,
        "jobId": None,
        "eventId": 4,
        "createdAt": "2026-11-23T10:00:00Z",
        "updatedAt": "2026-11-24T10:00:00Z",
        "version": 3,
    }

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"partitions": [partition], "next": None})

    with _client(handler) as client:
        (got,) = client.list_partitions("web.clicks")
    assert (got.version, got.updated_at.isoformat()) == (3, "2026-11-24T10:00:00+00:00")
    assert got.created_at.isoformat() == "2026-11-23T10:00:00+00:00"
    assert (str(got.table), got.spec.to_path(), got.file_count) == ("web.clicks", "d=1", 2)


def test_a_body_that_is_not_the_apis_model_is_an_api_error():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"eventid": 7})

    with _client(handler) as client, pytest.raises(ApiError, match="no LastEvent"):
        client.last_event_id()


def test_cloudevents_asks_for_a_batch_and_refuses_an_answer_that_is_none():
    seen: list[str] = []
    batch = {"content-type": "application/cloudevents-batch+json", "hcat-cursor": "*:9"}

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["accept"])
        if request.url.params.get("limit") == "1":  # a server that ignores Accept
            return httpx.Response(200, json={"events": [], "cursor": "*:9", "more": False})
        return httpx.Response(200, json=[{"id": "9"}], headers=batch | {"hcat-more": "true"})

    with _client(handler) as client:
        page = client.cloudevents(["web.clicks"], cursor="*:0", wait=1)
        assert (page.events, page.cursor, page.more) == ([{"id": "9"}], "*:9", True)
        with pytest.raises(ApiError, match="answered application/json where a CloudEvents"):
            client.cloudevents(["web.clicks"], limit=1)
    assert seen[0] == "application/cloudevents-batch+json"
