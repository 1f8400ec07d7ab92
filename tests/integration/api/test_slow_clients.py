"""Clients too slow to send a request do not hold ``hcat-notify serve``'s connections:
real sockets on loopback, a bounded number of them, against a real server process."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import time
from pathlib import Path

import httpx
import pytest

from hcat_notify.api.protocol import BODY_IDLE_TIMEOUT, HEAD_TIMEOUT
from hcat_notify.config import load_settings
from hcat_notify.store import Catalog
from tests.fixtures.ports import free_port
from tests.integration.api.support import ApiServer

pytestmark = pytest.mark.integration

SLOW_HEADS = 20
SLOW_BODIES = 5
SILENT = 5
TRICKLE = 0.5  # seconds between two bytes of a slow client
MARGIN = 20.0  # seconds past the server's timeout before the test gives up


@pytest.fixture
def server(tmp_path: Path):
    settings = load_settings(home=tmp_path / "home", broker_url=f"stomp://127.0.0.1:{free_port()}")
    Catalog.open(settings).close()
    with ApiServer(settings, log=tmp_path / "serve.log") as running:
        yield running


def _connect(server: ApiServer, first: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    sock.setblocking(False)
    if first:
        sock.sendall(first)
    return sock


def test_slow_heads_bodies_and_silent_connections_are_cut_off(server: ApiServer):
    """Point 14: a head trickled a header line at a time, a body that stops, and a
    connection that sends nothing each get a 408 problem document and are closed."""
    heads = [_connect(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n") for _ in range(SLOW_HEADS)]
    bodies = [
        _connect(
            server,
            b"POST /v1/tables/web.clicks/done HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
        )
        for _ in range(SLOW_BODIES)
    ]
    silent = [_connect(server, b"") for _ in range(SILENT)]
    answers: dict[socket.socket, bytes] = {sock: b"" for sock in heads + bodies + silent}
    still_open = set(answers)
    try:
        # The server answers others meanwhile.
        assert httpx.get(f"{server.url}/healthz", timeout=30).status_code == 200
        end = time.monotonic() + max(HEAD_TIMEOUT, BODY_IDLE_TIMEOUT) + MARGIN
        while still_open and time.monotonic() < end:
            for sock in [sock for sock in heads if sock in still_open]:
                # Closed by the server: its answer is read below.
                with contextlib.suppress(OSError):
                    sock.sendall(b"X-Slow: 1\r\n")
            readable, _, _ = select.select(list(still_open), [], [], TRICKLE)
            for sock in readable:
                try:
                    chunk = sock.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                answers[sock] += chunk
                if not chunk:
                    still_open.discard(sock)
        assert not still_open, (
            f"{len(still_open)} of {len(answers)} slow connections still held "
            f"{max(HEAD_TIMEOUT, BODY_IDLE_TIMEOUT) + MARGIN:g} s after they began"
        )
        for answer in answers.values():
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408 "), answer[:300]
            assert b"content-type: application/problem+json" in head.lower()
            problem = json.loads(body)
            assert problem["status"] == 408
            assert problem["error"] == "InvalidInputError"
            assert "did not arrive" in problem["detail"] or "paused" in problem["detail"]
        assert httpx.get(f"{server.url}/healthz", timeout=30).status_code == 200
        assert "Traceback" not in server.log()
    finally:
        for sock in answers:
            sock.close()
