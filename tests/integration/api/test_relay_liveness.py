"""Every view of the relay group judges a member by its own ``--session-timeout``: real
``hcat-notify relay`` processes, frozen with SIGSTOP, as ``hcat-notify status``, the
status page and ``/metrics`` show them; on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator

import httpx
import pytest

from hcat_notify.config import Settings
from hcat_notify.relay import RelayConfig
from hcat_notify.store import Catalog
from tests.integration.delivery import CliProcess, run_cli

pytestmark = pytest.mark.integration

PATIENT = 60.0  # seconds: far longer than the default, and than the checks take under load
HASTY = 2.0  # seconds: shorter than the default
DEFAULT = RelayConfig().session_timeout


def _relay(settings: Settings, member: str, timeout: float, beat: float) -> CliProcess:
    return CliProcess(
        settings,
        "relay",
        "--member-id",
        member,
        "--session-timeout",
        str(timeout),
        "--heartbeat-interval",
        str(beat),
    )


def _wait_for(condition, timeout: float, failure) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, failure()
        time.sleep(0.05)


@pytest.fixture
def frozen(api_settings: Settings, api_catalog: Catalog) -> Iterator[None]:
    """Two relays, 'patient' (session timeout 60 s) and 'hasty' (2 s), joined and then
    frozen (SIGSTOP) until both are silent for longer than the default timeout."""
    relays = {
        "patient": _relay(api_settings, "patient", PATIENT, 1.0),
        "hasty": _relay(api_settings, "hasty", HASTY, 0.5),
    }
    try:
        _wait_for(
            lambda: {m.member_id for m in api_catalog.group.members()} == set(relays),
            60,
            lambda: f"relays did not join: {api_catalog.group.members()}",
        )
        for process in relays.values():
            process.proc.send_signal(signal.SIGSTOP)
        _wait_for(
            lambda: min(m.heartbeat_age for m in api_catalog.group.members()) > DEFAULT + 0.5,
            30,
            lambda: f"still beating: {api_catalog.group.members()}",
        )
        yield
    finally:
        for process in relays.values():
            if process.proc.poll() is None:
                process.proc.send_signal(signal.SIGCONT)
                process.proc.send_signal(signal.SIGTERM)
        for member, process in relays.items():
            code, err = process.finish(timeout=60)
            # SIGTERM before its handler is installed (a failed start) ends it at once
            assert code in (0, -signal.SIGTERM), f"{member} exited {code}: {err[-2000:]}"


@pytest.mark.usefixtures("frozen")
def test_a_relay_is_shown_alive_or_silent_by_its_own_session_timeout(
    api_settings: Settings, reader: httpx.Client, anonymous: httpx.Client
):
    # hcat-notify status
    out = run_cli(api_settings, "-o", "json", "status")
    assert out.returncode == 0, out.stderr
    members = {m["member_id"]: m for m in json.loads(out.stdout)["members"]}
    assert {k: m["alive"] for k, m in members.items()} == {"patient": True, "hasty": False}
    assert {k: m["session_timeout_seconds"] for k, m in members.items()} == {
        "patient": PATIENT,
        "hasty": HASTY,
    }
    assert all(m["heartbeat_age_seconds"] > DEFAULT for m in members.values())
    text = run_cli(api_settings, "status").stdout
    assert "relay patient (alive, heartbeat" in text
    assert "relay hasty (silent, heartbeat" in text
    # the status page
    page = reader.get("/")
    assert page.status_code == 200
    assert "<td>patient</td><td>alive</td>" in page.text
    assert '<td>hasty</td><td><span class="bad">silent</span></td>' in page.text
    # /metrics: the live members only
    metrics = anonymous.get("/metrics").text
    assert "hcat_notify_relay_members 1.0" in metrics.splitlines()
    assert 'hcat_notify_relay_member_buckets{member="patient"}' in metrics
    assert 'member="hasty"' not in metrics
    # a reader may still judge every member by one timeout of its own
    strict = json.loads(
        run_cli(api_settings, "-o", "json", "status", "--session-timeout", "1").stdout
    )
    assert [m["alive"] for m in strict["members"]] == [False, False]
