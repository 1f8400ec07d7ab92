"""``serve``'s protocol writing a wake-up's whole responses in one batch (the
whole-response extension's ``write(encoded, batch)`` and ``batch.flush()``), on real
connections: every connection gets its own bytes whole and once, in order behind what
its transport had buffered already; what a socket does not take goes through the
transport; a connection whose client went away is not written to."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from hcat_notify.api.protocol import ApiHttpProtocol
from hcat_notify.api.state import WHOLE_RESPONSE_KEY, WholeResponse

CONNECTIONS = 200  # several chunks
BIG = 4 * 1024 * 1024  # more than a socket takes at once


async def _serve(
    count: int, hold: asyncio.Event
) -> tuple[list[WholeResponse], list[socket.socket], list[Any]]:
    """``count`` connections of the protocol, each with one request waiting in the
    application until ``hold`` is set: their writers, the clients' sockets, the
    protocols."""
    writers: dict[int, WholeResponse] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        writer = scope["extensions"][WHOLE_RESPONSE_KEY]
        writers[int(scope["path"].rsplit("/", 1)[1])] = writer
        await hold.wait()
        writer.finish()

    config = Config(app, lifespan="off")
    config.load()
    loop = asyncio.get_running_loop()
    clients, protocols = [], []
    for i in range(count):
        server_side, client = socket.socketpair()
        client.setblocking(False)
        state = ServerState()
        _, protocol = await loop.connect_accepted_socket(
            lambda state=state: ApiHttpProtocol(  # type: ignore[misc]
                config=config, server_state=state, app_state={}, _loop=loop
            ),
            server_side,
        )
        client.sendall(f"GET /wait/{i} HTTP/1.1\r\nhost: test\r\n\r\n".encode())
        clients.append(client)
        protocols.append(protocol)
    while len(writers) < count:
        await asyncio.sleep(0.01)
    return [writers[i] for i in range(count)], clients, protocols


async def _read_all(client: socket.socket, size: int) -> bytes:
    loop = asyncio.get_running_loop()
    data = b""
    while len(data) < size:
        data += await loop.sock_recv(client, 1 << 20)
    return data


def test_a_batch_writes_each_connection_its_whole_answer_once_and_in_order():
    async def scenario() -> None:
        hold = asyncio.Event()
        writers, clients, protocols = await _serve(CONNECTIONS, hold)
        # connection 1: bytes already buffered in its transport, which the answer follows
        ahead = b"A" * BIG
        protocols[1].transport.write(ahead)
        assert protocols[1].transport.get_write_buffer_size() > 0
        # connection 2: the client went away
        clients[2].close()
        for _ in range(200):
            if protocols[2].transport.is_closing():
                break
            await asyncio.sleep(0.01)
        batch = writers[0].batch()
        expected = {}
        for i, writer in enumerate(writers):
            body = (b"B" * BIG) if i == 3 else f"answer {i}".encode()  # 3: more than fits
            encoded = writer.encode(200, [(b"content-type", b"text/plain")], body)
            assert writer.write(encoded, batch) is (i != 2)
            expected[i] = encoded[1]
        batch.flush()
        hold.set()  # the requests' tasks: finish()
        for i, client in enumerate(clients):
            if i != 2:
                want = (ahead if i == 1 else b"") + expected[i]
                assert await asyncio.wait_for(_read_all(client, len(want)), 20) == want, i
        await asyncio.sleep(0.1)
        for i, client in enumerate(clients):
            if i != 2:
                try:
                    extra = client.recv(1024)
                except BlockingIOError:
                    extra = b""
                assert extra == b"", f"connection {i} got more than its answer"
                client.close()
        for protocol in protocols:
            protocol.transport.close()

    asyncio.run(scenario())
