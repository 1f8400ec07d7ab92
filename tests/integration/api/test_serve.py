"""The ``serve`` command itself: readiness says why it is not ready, several worker
processes share one port and one set of metrics, ``hash-secret`` makes a usable hash,
and principals from the settings file are the ones the server accepts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from hcat_notify.config import load_settings
from hcat_notify.model.principals import verify_secret
from hcat_notify.store import Catalog
from tests.fixtures.ports import free_port
from tests.integration.api.support import READER, ApiServer
from tests.integration.delivery import CLI

pytestmark = pytest.mark.integration


@pytest.fixture
def local_settings(tmp_path: Path):
    settings = load_settings(home=tmp_path / "home", broker_url=f"stomp://127.0.0.1:{free_port()}")
    Catalog.open(settings).close()
    return settings


def test_readyz_names_what_is_missing(local_settings, tmp_path: Path):
    with ApiServer(local_settings, log=tmp_path / "serve.log") as server:
        response = httpx.get(f"{server.url}/readyz", timeout=30)
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "not ready"
    assert body["checks"]["catalog"] == "ok"
    assert "cannot connect to broker" in body["checks"]["broker"]


def test_several_workers_share_a_port_and_their_metrics(local_settings, tmp_path: Path):
    with ApiServer(local_settings, "--workers", "2", log=tmp_path / "serve.log") as server:
        with httpx.Client(base_url=server.url, auth=READER, timeout=30) as client:
            for _ in range(40):  # new connections: the kernel spreads them over the workers
                assert (
                    httpx.get(f"{server.url}/v1/tables", auth=READER, timeout=30).status_code == 200
                )
            text = client.get("/metrics").text
    counted = [
        line
        for line in text.splitlines()
        if line.startswith(
            'hcat_notify_api_requests_total{method="GET",route="/v1/tables",status="200"}'
        )
    ]
    assert counted, text
    assert float(counted[0].split()[-1]) == 40.0


def test_hash_secret_and_principals_from_the_settings_file(local_settings, tmp_path: Path):
    made = subprocess.run(
        [CLI, "hash-secret", "--secret-stdin"],
        input="s3cret\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    secret_hash = made.stdout.strip()
    assert verify_secret("s3cret", secret_hash)
    config = tmp_path / "hcat-notify.toml"
    config.write_text(f'[api.principals]\nops = {{ role = "writer", secret = "{secret_hash}" }}\n')
    with ApiServer(
        local_settings, log=tmp_path / "serve.log", env={"HCAT_NOTIFY_CONFIG": str(config)}
    ) as server:
        assert httpx.get(f"{server.url}/v1/tables", auth=("ops", "s3cret")).status_code == 200
        # The development pairs are gone once principals are configured.
        assert httpx.get(f"{server.url}/v1/tables", auth=READER).status_code == 401


def test_serve_refuses_bad_options(local_settings):
    from tests.integration.delivery import run_cli

    result = run_cli(local_settings, "serve", "--port", "70000")
    assert result.returncode == 2
    assert "70000" in result.stderr
