"""``hcat-notify serve`` stopping with long polls in flight (SIGTERM to a real process,
on SQLite and PostgreSQL): every waiting request gets a complete answer at once, and
the process exits without waiting for its graceful-shutdown timeout."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from hcat_notify.config import Settings
from hcat_notify.store import Catalog
from tests.integration.api.support import READER, ApiServer

pytestmark = pytest.mark.integration

POLLS = 6
DEADLINE = 30.0  # seconds, for what should take well under one
EXIT_BOUND = 4.5  # seconds: below uvicorn's graceful-shutdown timeout of 5 s


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > end:
            pytest.fail(f"not within {DEADLINE:g} s: {what}")
        time.sleep(0.05)


def _long_polls_waiting(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    for line in text.splitlines():
        if line.startswith("hcat_notify_api_long_polls_waiting "):
            return float(line.split()[-1])
    return 0.0


def test_sigterm_answers_every_waiting_long_poll_then_exits(
    api_settings: Settings, api_catalog: Catalog, new_table, tmp_path: Path
):
    """Point 7: 503 with Retry-After for each waiting poll, then a prompt exit."""
    name = new_table()
    cursor = f"*:{api_catalog.last_event_id()}"
    server = ApiServer(api_settings, log=tmp_path / "serve.log").start()
    assert server.proc is not None
    try:

        def poll(number: int) -> httpx.Response:
            with httpx.Client(base_url=server.url, auth=READER, timeout=DEADLINE * 4) as client:
                if number % 2:
                    return client.get(
                        "/v1/events", params={"table": name, "cursor": cursor, "wait": 120}
                    )
                return client.get(
                    f"/v1/tables/{name}/done", params={"datestamp": str(number), "wait": 120}
                )

        with ThreadPoolExecutor(POLLS) as pool:
            futures = [pool.submit(poll, number) for number in range(POLLS)]
            _wait_for(
                lambda: _long_polls_waiting(server.url) == POLLS, f"{POLLS} long polls waiting"
            )
            server.proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            answers = [future.result(timeout=DEADLINE) for future in futures]
            server.proc.wait(DEADLINE)
            exited = time.monotonic() - signalled
    finally:
        server.stop()
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.headers["retry-after"] == "1"
        problem = answer.json()
        assert problem["error"] == "ApiUnavailableError"
        assert "stopping" in problem["detail"]
    assert exited < EXIT_BOUND, f"serve took {exited:.1f} s to exit: {server.log()}"
    assert "Traceback" not in server.log()
