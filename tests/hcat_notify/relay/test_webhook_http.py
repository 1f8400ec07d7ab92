"""The relays' HTTP transport against a real receiver on loopback: what it sends, what it
makes of each answer, no redirects followed, one deadline for the whole of a request, an
answer read as sent (never decoded) up to a cap; and a proxy the environment names is
used."""

from __future__ import annotations

import tracemalloc

import pytest

from hcat_notify.relay.webhook_http import ANSWER_CAP, USER_AGENT, HttpxPoster
from tests.fixtures.webhook_receiver import Receiver, nested_gzip


@pytest.fixture
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)


@pytest.mark.usefixtures("no_proxy")
def test_each_answer_becomes_a_result_and_the_request_arrives_as_sent():
    # a 204 has no body: the answer after it on the same connection is read whole
    fates = ["200", "201", "204", "200", "500", "429", "410", "302", "close"]
    receiver = Receiver(answer=lambda n: fates[n], retry_after=7)
    poster = HttpxPoster(timeout=5.0, connections=2)
    try:
        results = [
            poster.post(receiver.url, b'{"n":%d}' % n, {"content-type": "application/json"})
            for n in range(len(fates))
        ]
    finally:
        poster.close()
        receiver.close()
    assert [r.status for r in results] == [200, 201, 204, 200, 500, 429, 410, 302, None]
    assert [r.ok for r in results] == [True, True, True, True, False, False, False, False, False]
    assert results[5].retry_after == "7"
    assert results[4].error == "HTTP 500: no"
    assert results[7].error == "HTTP 302: no (redirects are not followed)"
    assert results[8].error is not None
    # one request each (the 302 not followed), each as sent
    assert [r.body for r in receiver.received] == [b'{"n":%d}' % n for n in range(len(fates))]
    first = receiver.received[0]
    assert first.path == "/hook"
    assert first.headers["content-type"] == "application/json"
    assert first.headers["user-agent"] == USER_AGENT
    assert first.headers["content-length"] == "7"
    assert ANSWER_CAP == 4096


@pytest.mark.usefixtures("no_proxy")
def test_a_request_without_an_answer_times_out():
    receiver = Receiver(answer=lambda _n: "hang")
    poster = HttpxPoster(timeout=0.3, connections=1)
    try:
        result = poster.post(receiver.url, b"{}", {})
    finally:
        poster.close()
        receiver.close()
    assert result.status is None
    assert result.error is not None
    assert result.error.startswith("timeout")


@pytest.mark.usefixtures("no_proxy")
@pytest.mark.parametrize("fate", ["drip-body", "drip-head"])
def test_an_answer_dripped_slowly_is_given_up_at_the_requests_deadline(fate: str):
    # each read gets a piece within the timeout: only a deadline for the whole request
    # ends it (it was read to the cap, or the header limit, some 5 s later)
    receiver = Receiver(answer=lambda _n: fate)
    poster = HttpxPoster(timeout=0.5, connections=1)
    try:
        result = poster.post(receiver.url, b"{}", {})
        hung_up = receiver.hung_up.wait(10)  # the receiver sees the connection closed
    finally:
        poster.close()
        receiver.close()
    assert result.status is None
    assert result.error is not None
    assert result.error.startswith("timeout"), result.error
    assert hung_up


@pytest.mark.usefixtures("no_proxy")
def test_an_encoded_answer_is_read_as_sent_never_decoded():
    receiver = Receiver(answer=lambda _n: "gzip")
    receiver.encoded = nested_gzip(8 << 20)  # a few hundred bytes, 8 MiB decoded
    poster = HttpxPoster(timeout=5.0, connections=1)
    tracemalloc.start()
    try:
        result = poster.post(receiver.url, b"{}", {})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        poster.close()
        receiver.close()
    (request,) = receiver.received
    assert request.headers["accept-encoding"] == "identity"
    assert result.status == 500
    assert result.error == "HTTP 500 (a body in content-encoding 'gzip, gzip', not decoded)"
    assert peak < 1 << 20, peak  # what the relay held: no decoded answer


def test_a_proxy_the_environment_names_carries_the_requests(monkeypatch: pytest.MonkeyPatch):
    proxy = Receiver()  # answers 200 to whatever comes: the request in absolute form
    monkeypatch.setenv("HTTP_PROXY", proxy.url.rsplit("/", 1)[0])
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    target = "http://127.0.0.1:9/hook"  # a closed port: reached only through the proxy
    poster = HttpxPoster(timeout=5.0, connections=1)
    try:
        result = poster.post(target, b"{}", {"content-type": "application/json"})
    finally:
        poster.close()
        proxy.close()
    assert result.ok
    (request,) = proxy.received
    assert request.path == target


def test_a_host_no_proxy_names_is_reached_directly(monkeypatch: pytest.MonkeyPatch):
    proxy, target = Receiver(), Receiver()
    monkeypatch.setenv("HTTP_PROXY", proxy.url.rsplit("/", 1)[0])
    monkeypatch.setenv("NO_PROXY", "example.org,127.0.0.1")
    monkeypatch.delenv("no_proxy", raising=False)
    poster = HttpxPoster(timeout=5.0, connections=1)
    try:
        result = poster.post(target.url, b"{}", {"content-type": "application/json"})
    finally:
        poster.close()
        proxy.close()
        target.close()
    assert result.ok
    assert proxy.received == []
    assert [r.path for r in target.received] == ["/hook"]
