"""The floor of ``scale_waiters.py``: a bare asyncio server (uvloop) that holds every
request it reads as a waiting long poll and, when told, writes the same pre-built
response bytes to each of them: what answering N waiting connections costs on this
machine with nothing of HTTP, the framework or the catalog in the way. Standard library
and uvloop only.

``_waiter_floor.py`` prints ``LISTENING PORT``. Requests it takes (the target decides,
the rest of the head is read and ignored):

* ``GET /metrics``: answered at once with ``hcat_notify_api_long_polls_waiting N``, the
  gauge ``scale_waiters.py`` reads from the real server;
* ``POST /answer`` with the response bytes as its body: written to every waiting
  connection (in the order they came), then this request is answered 204;
* anything else: waits for the next ``/answer``.
"""

from __future__ import annotations

import asyncio
import resource


class _Floor:
    def __init__(self) -> None:
        self.waiting: list[asyncio.Transport] = []


class _Connection(asyncio.Protocol):
    def __init__(self, floor: _Floor) -> None:
        self.floor = floor
        self.data = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.data += data
        head, found, rest = self.data.partition(b"\r\n\r\n")
        if not found:
            return
        assert self.transport is not None
        target = head.split(b" ", 2)[1]
        if target.startswith(b"/metrics"):
            self.data = rest
            body = f"hcat_notify_api_long_polls_waiting {len(self.floor.waiting)}\n".encode()
            self.transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
            )
        elif target.startswith(b"/answer"):
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            if len(rest) < length:
                return
            answer, self.data = rest[:length], rest[length:]
            waiting, self.floor.waiting = self.floor.waiting, []
            for transport in waiting:
                transport.write(answer)
            self.transport.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        else:
            self.data = rest
            self.floor.waiting.append(self.transport)


async def _serve() -> None:
    floor = _Floor()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Connection(floor), "127.0.0.1", 0, backlog=4096)
    print(f"LISTENING {server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


def floor_main() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
        pass
    asyncio.run(_serve())


if __name__ == "__main__":
    floor_main()
