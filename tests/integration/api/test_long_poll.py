"""Long polls: a request that waits is answered by a done (or an event) sent while it
waits, and a shell check with ``curl --fail`` exits 0 for a covered spec, 22 otherwise."""

from __future__ import annotations

import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from hcat_notify.store import Catalog
from tests.integration.api.support import READER, ApiServer

pytestmark = pytest.mark.integration

SETTLE = 1.0  # seconds for the request to be waiting on the server before the done


def _later(seconds: float, action) -> threading.Timer:
    timer = threading.Timer(seconds, action)
    timer.start()
    return timer


def test_done_long_poll_answered_by_a_done_sent_while_it_waits(
    reader: httpx.Client, writer: httpx.Client, new_table
):
    name = new_table()
    sent: list[dict] = []
    timer = _later(
        SETTLE,
        lambda: sent.append(
            writer.post(f"/v1/tables/{name}/done", json={"spec": {"datestamp": "20110228"}}).json()
        ),
    )
    started = time.monotonic()
    response = reader.get(
        f"/v1/tables/{name}/done", params={"datestamp": "20110228", "region": "us", "wait": 60}
    )
    waited = time.monotonic() - started
    timer.join()
    assert response.status_code == 200, response.text
    assert response.json()["eventId"] == sent[0]["eventId"]
    assert SETTLE * 0.9 <= waited < SETTLE + 5, waited


def test_many_long_polls_answered_by_one_done(
    reader: httpx.Client, api_catalog: Catalog, new_table
):
    name = new_table()
    timer = _later(SETTLE, lambda: api_catalog.mark_set_done(name, {"datestamp": "1"}))
    with ThreadPoolExecutor(20) as pool:
        answers = list(
            pool.map(
                lambda region: (
                    reader.get(
                        f"/v1/tables/{name}/done",
                        params={"datestamp": "1", "region": region, "wait": 60},
                    ).status_code
                ),
                [f"r{i}" for i in range(20)],
            )
        )
    timer.join()
    assert answers == [200] * 20


def test_done_long_poll_times_out_with_404(reader: httpx.Client, new_table):
    name = new_table()
    started = time.monotonic()
    response = reader.get(f"/v1/tables/{name}/done", params={"datestamp": "1", "wait": 1.5})
    assert response.status_code == 404
    assert response.json()["type"] == "urn:hcat-notify:problem:not-done"
    assert 1.4 <= time.monotonic() - started < 6


def test_events_long_poll_answered_by_an_event(
    reader: httpx.Client, api_catalog: Catalog, new_table
):
    name = new_table()
    cursor = reader.get("/v1/events", params={"table": name}).json()["cursor"]
    timer = _later(SETTLE, lambda: api_catalog.mark_set_done(name, {"datestamp": "2"}))
    started = time.monotonic()
    page = reader.get("/v1/events", params={"table": name, "cursor": cursor, "wait": 60}).json()
    timer.join()
    assert [e["spec"] for e in page["events"]] == ["datestamp=2"]
    assert time.monotonic() - started < SETTLE + 5
    quiet = reader.get(
        "/v1/events", params={"table": name, "cursor": page["cursor"], "wait": 0.5}
    ).json()
    assert quiet["events"] == []
    assert quiet["cursor"] == page["cursor"]


def _curl(url: str, *params: str) -> int:
    command = ["curl", "--fail", "--silent", "--show-error", "--max-time", "60"]
    command += ["--user", ":".join(READER), "--get", url]
    for param in params:
        command += ["--data-urlencode", param]
    return subprocess.run(command, capture_output=True, timeout=90).returncode


def test_curl_fail_is_a_complete_scheduler_check(api: ApiServer, api_catalog: Catalog, new_table):
    name = new_table()
    url = f"{api.url}/v1/tables/{name}/done"
    assert _curl(url, "datestamp=20110228", "region=us") == 22  # not done: HTTP 404
    api_catalog.mark_set_done(name, {"datestamp": "20110228"})
    assert _curl(url, "datestamp=20110228", "region=us") == 0
    assert _curl(url, "datestamp=20110301") == 22
    timer = _later(SETTLE, lambda: api_catalog.mark_set_done(name, {"datestamp": "20110301"}))
    assert _curl(url, "datestamp=20110301", "region=us/east", "wait=60") == 0
    timer.join()
    assert _curl(f"{api.url}/v1/tables/nosuch.t/done", "datestamp=1") == 22
