"""The clients of ``scale_waiters.py``: COUNT long polls of one table's done, each on
its own connection (raw HTTP/1.1 on asyncio, uvloop when installed), in one process;
standard library only, so that a client process starts fast. Each records when its
whole answer arrived (``time.monotonic``, one clock for every process of the machine)."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import resource
import sys
import time

READER = ("hcat-reader", "hcat-reader-dev")
REGIONS = 100


class _Poll(asyncio.Protocol):
    """One connection, one long poll: when its whole answer arrived, and what came."""

    def __init__(self, request: bytes, answered: asyncio.Future[None] | None) -> None:
        self.request = request
        self.data = bytearray()
        self.at = math.nan
        self.whole = -1
        self.answered = answered

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self.data += data
        if self.whole < 0 and b"\r\n\r\n" in self.data:
            head, _, _ = bytes(self.data).partition(b"\r\n\r\n")
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    self.whole = len(head) + 4 + int(line.split(b":")[1])
        if 0 <= self.whole <= len(self.data) and math.isnan(self.at):
            self.at = time.monotonic()
            if self.answered is not None and not self.answered.done():
                self.answered.set_result(None)

    def result(self) -> list[object]:
        """[arrival, status, event id, bytes after the answer]."""
        if math.isnan(self.at):
            return [None, None, None, len(self.data)]
        head, _, rest = bytes(self.data).partition(b"\r\n\r\n")
        body = rest[: self.whole - len(head) - 4]
        status = int(head[9:12])
        event = json.loads(body).get("eventId") if status == 200 else body.decode()[:200]
        return [self.at, status, event, len(self.data) - self.whole]


async def _clients(url: str, table: str, ds: str, first: int, count: int, timeout: float) -> None:
    host, port = url.removeprefix("http://").split(":")
    token = base64.b64encode(":".join(READER).encode()).decode()
    loop = asyncio.get_running_loop()
    polls = []
    gate = asyncio.Semaphore(200)

    async def connect(i: int) -> None:
        request = (
            f"GET /v1/tables/{table}/done?ds={ds}&region=r{i % REGIONS:03d}&wait={timeout:g} "
            f"HTTP/1.1\r\nHost: {host}\r\nAuthorization: Basic {token}\r\n\r\n"
        ).encode()
        poll = _Poll(request, loop.create_future())
        async with gate:
            await loop.create_connection(lambda: poll, host, int(port))
        polls.append(poll)

    await asyncio.gather(*(connect(i) for i in range(first, first + count)))
    print("CONNECTED", flush=True)
    waiting = [p.answered for p in polls if p.answered is not None]
    await asyncio.wait(waiting, timeout=timeout + 10)
    await asyncio.sleep(0.5)  # anything more that comes on a connection is counted
    print(json.dumps([p.result() for p in polls]), flush=True)


def client_main(argv: list[str]) -> None:
    """``_waiter_clients.py URL TABLE DS FIRST COUNT TIMEOUT``: prints CONNECTED once
    every poll is sent, then one JSON line of results."""
    url, table, ds, first, count, timeout = argv
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, int(count) + 100)), hard))
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
        pass
    asyncio.run(_clients(url, table, ds, int(first), int(count), float(timeout)))


if __name__ == "__main__":
    client_main(sys.argv[1:])
