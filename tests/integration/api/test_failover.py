"""Two API instances on one catalog: one is killed (SIGKILL) in the middle of 1,000
requests from a client given both URLs, and no call fails."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hcat_notify.api.client import ApiClient
from hcat_notify.config import Settings
from hcat_notify.errors import ApiUnavailableError
from hcat_notify.store import Catalog
from tests.integration.api.support import READER, ApiServer

pytestmark = pytest.mark.integration

REQUESTS = 1000
KILL_AT = 500
THREADS = 4


def test_one_instance_killed_mid_run_no_call_fails(
    api_settings: Settings, api_catalog: Catalog, new_table, tmp_path: Path
):
    name = new_table()
    done = api_catalog.mark_set_done(name, {"datestamp": "20110228"})
    first = ApiServer(api_settings, log=tmp_path / "a.log").start()
    second = ApiServer(api_settings, log=tmp_path / "b.log").start()
    calls = 0
    lock = threading.Lock()
    killed = threading.Event()
    failures: list[BaseException] = []
    answers: list[int | None] = []
    try:
        with ApiClient([first.url, second.url], auth=READER, timeout=10) as client:

            def one(index: int) -> None:
                nonlocal calls
                try:
                    found = client.find_covering_done(
                        name, {"datestamp": "20110228", "region": f"r{index % 7}"}
                    )
                    answers.append(None if found is None else found.event_id)
                except Exception as exc:  # noqa: BLE001 - counted
                    failures.append(exc)
                with lock:
                    calls += 1
                    kill = calls == KILL_AT
                if kill:
                    first.kill()  # requests of the other threads are in flight right now
                    killed.set()

            with ThreadPoolExecutor(THREADS) as pool:
                list(pool.map(one, range(REQUESTS)))
            assert killed.is_set()
            assert failures == []
            assert answers == [done] * REQUESTS
            assert client.urls[client._current] == second.url  # it stayed with the survivor
            # Both gone: a clear error, quickly.
            second.kill()
            with pytest.raises(ApiUnavailableError, match="no HTTP API instance answered"):
                client.last_event_id()
    finally:
        first.stop()
        second.stop()
