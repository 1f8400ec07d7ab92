"""The ``serve`` command itself: readiness says why it is not ready, several worker
processes share one port and one set of metrics, ``hash-secret`` makes a usable hash,
and principals from the settings file are the ones the server accepts."""

from __future__ import annotations

import signal
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

# A catalog URL with a password; nothing connects to it before a request needs it.
SECRET_URL = "postgresql+psycopg://postgres:SECRETPW@127.0.0.1:1/nodb"


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


def test_start_up_failures_are_one_line_before_any_announcement(local_settings, tmp_path: Path):
    """A bad TLS file, a busy port, a host that does not resolve or is not of this
    machine: one line naming it, exit 2, nothing announced and no traceback."""
    import socket

    from tests.integration.delivery import run_cli

    not_pem = tmp_path / "not.pem"
    not_pem.write_text("not a certificate\n")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        port = str(busy.getsockname()[1])
        for args, message in [
            (["--ssl-certfile", str(not_pem)], f"cannot use TLS certificate {not_pem}"),
            (["--ssl-keyfile", str(not_pem)], "--ssl-keyfile needs --ssl-certfile"),
            (["--port", port], f"cannot listen on 127.0.0.1:{port}: Address already in use"),
            (["--host", "not a host", "--port", "0"], "cannot listen on not a host:0"),
            (["--host", "192.0.2.1", "--port", "0"], "cannot listen on 192.0.2.1:0"),
        ]:
            result = run_cli(local_settings, "serve", *args)
            assert result.returncode == 2, (args, result.stderr)
            assert result.stderr.startswith(f"hcat-notify: error: {message}"), result.stderr
            assert result.stderr.count("\n") == 1, result.stderr
    finally:
        busy.close()


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"]
)
def test_the_banner_gives_the_bound_port_hides_the_password_and_signals_exit_as_the_relays(
    local_settings, sig: int, code: int
):
    """``--port 0``: the port the kernel chose is announced (once bound); the catalog's
    password is masked as everywhere else; SIGTERM exits 0, SIGINT 130 (the relay's)."""
    from tests.integration.delivery import cli_env

    env = {**cli_env(local_settings), "HCAT_NOTIFY_DB_URL": SECRET_URL}
    proc = subprocess.Popen(
        [CLI, "serve", "--port", "0"], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        banner = proc.stderr.readline()
        assert banner.startswith("hcat-notify API on http://127.0.0.1:"), banner
        assert "SECRETPW" not in banner
        assert "postgresql+psycopg://postgres:***@127.0.0.1:1/nodb" in banner
        port = int(banner.split("http://127.0.0.1:")[1].split()[0])
        assert port != 0
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=30).status_code == 200
        proc.send_signal(sig)
        assert proc.wait(30) == code
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
