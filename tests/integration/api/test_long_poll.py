"""Long polls: a request that waits is answered by a done (or an event) sent while it
waits, and a shell check with ``curl --fail`` exits 0 for a covered spec, 22 otherwise."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

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
    sent: list[dict[str, Any]] = []
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


FAN_OUT = 1000


async def _long_poll(url: str, path: str, token: str) -> list[tuple[int, bytes]]:
    """One keep-alive connection's answers to one long poll (all that came before EOF
    or 30 s), as (status, body)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Basic {token}\r\n\r\n".encode()
    )
    answers = []
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        answers.append((int(head[9:12]), await reader.readexactly(length)))
        with contextlib.suppress(TimeoutError):  # nothing more comes on this connection
            extra = await asyncio.wait_for(reader.read(1), 0.2)
            assert extra == b"", extra
    finally:
        writer.close()
    return answers


def test_a_thousand_long_polls_each_answered_once_by_one_done(
    api: ApiServer, api_catalog: Catalog, new_table
):
    name = new_table()
    token = base64.b64encode(":".join(READER).encode()).decode()
    paths = [f"/v1/tables/{name}/done?datestamp=1&region=r{i % 10}&wait=60" for i in range(FAN_OUT)]

    async def scenario() -> tuple[int, list[list[tuple[int, bytes]]]]:
        polls = [asyncio.create_task(_long_poll(api.url, path, token)) for path in paths]
        # /metrics reads the catalog in a worker thread, behind the polls' first checks
        async with httpx.AsyncClient(timeout=30) as client:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # every poll waits on the server
                metrics = (await client.get(f"{api.url}/metrics", auth=READER)).text
                if f"hcat_notify_api_long_polls_waiting {FAN_OUT}.0" in metrics:
                    break
                await asyncio.sleep(0.2)
            else:
                raise AssertionError("the long polls never all waited")
        event_id = await asyncio.to_thread(api_catalog.mark_set_done, name, {"datestamp": "1"})
        return event_id, await asyncio.gather(*polls)

    event_id, answers = asyncio.run(scenario())
    assert len(answers) == FAN_OUT
    for answer in answers:
        assert len(answer) == 1, answer
        status, body = answer[0]
        assert status == 200, body
        assert json.loads(body)["eventId"] == event_id


def _figure(metrics: str, prefix: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_long_poll_whose_client_goes_away_leaves_its_group_at_once(
    api: ApiServer, api_catalog: Catalog, new_table
):
    """The server learns that a waiting client closed its connection and drops its
    poll from the group (the gauge falls at once, not at the poll's deadline); the
    others are answered once, and only answered polls are counted."""
    name = new_table()
    token = base64.b64encode(":".join(READER).encode()).decode()
    path = f"/v1/tables/{name}/done?datestamp=7&wait=60"
    counted = (
        'hcat_notify_api_requests_total{method="GET",route="/v1/tables/{table}/done",status="200"}'
    )
    waiting = "hcat_notify_api_long_polls_waiting "

    async def scenario() -> tuple[float, float, int, list[list[tuple[int, bytes]]]]:
        host, port = api.url.removeprefix("http://").split(":")
        leaving = [await asyncio.open_connection(host, int(port)) for _ in range(10)]
        request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Basic {token}\r\n\r\n"
        for _, writer in leaving:
            writer.write(request.encode())
        staying = [asyncio.create_task(_long_poll(api.url, path, token)) for _ in range(10)]
        async with httpx.AsyncClient(base_url=api.url, auth=READER, timeout=30) as client:

            async def figure(prefix: str) -> float:
                return _figure((await client.get("/metrics")).text, prefix)

            async def until(prefix: str, value: float) -> None:
                deadline = time.monotonic() + 20
                while await figure(prefix) != value:
                    assert time.monotonic() < deadline, (prefix, await figure(prefix))
                    await asyncio.sleep(0.1)

            await until(waiting, 20)
            before = await figure(counted)
            for _, writer in leaving:
                writer.close()
            await until(waiting, 10)  # well before their 60 s
            event_id = await asyncio.to_thread(api_catalog.mark_set_done, name, {"datestamp": "7"})
            answers = await asyncio.gather(*staying)
            await until(waiting, 0)
            return before, await figure(counted), event_id, answers

    before, after, event_id, answers = asyncio.run(scenario())
    for answer in answers:
        assert len(answer) == 1, answer
        assert answer[0][0] == 200
        assert json.loads(answer[0][1])["eventId"] == event_id
    assert after - before == 10
