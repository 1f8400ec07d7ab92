"""The clients of ``scale_waiters.py``: COUNT long polls of one table's done, each on
its own connection, in one process; standard library only, so that a client process
starts fast.

Each poll records two times its whole answer arrived:

* **in its socket** (the verdict's): the kernel's receive timestamp of the bytes that
  completed the answer (``SO_TIMESTAMPNS``, ``CLOCK_REALTIME``; on loopback it is taken
  as the server's write hands the bytes to the receiving socket). It is when the
  answer reached the waiter, whatever the client process does next, so a client busy
  with 4,999 other sockets, or waiting for a core, does not add its own lag to the
  server's;
* **read by the client** (``time.monotonic`` as ``epoll`` returned the socket readable,
  the old way's figure): that plus this process's lag in noticing it.

The loop is plain ``epoll`` and ``recvmsg`` (no asyncio, no protocol objects): the
earlier client (asyncio with uvloop, a protocol per connection) took ~15 µs of Python
per answer, and two of them on two cores, beside the server, stretched both the
server's and the floor's figures by their own backlog.
"""

from __future__ import annotations

import base64
import json
import math
import resource
import select
import socket
import struct
import sys
import time

READER = ("hcat-reader", "hcat-reader-dev")
REGIONS = 100
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; absent from Python's socket
_TIMESPEC = struct.Struct("@qq")
_ANCILLARY = socket.CMSG_SPACE(_TIMESPEC.size)
_LINGER = 0.5  # seconds after the last answer: anything more on a connection is counted


class _Poll:
    """One connection, one long poll: when its whole answer arrived, and what came."""

    __slots__ = ("at", "data", "in_socket", "sock", "whole")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.data = b""
        self.at = math.nan  # monotonic: read by this process
        self.in_socket = math.nan  # realtime: the kernel's receive timestamp
        self.whole = -1

    def read(self, seen: float) -> bool:
        """Read what is there; False once the peer closed (nothing more to read)."""
        try:
            chunk, ancillary, _flags, _addr = self.sock.recvmsg(65536, _ANCILLARY)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        self.data += chunk
        if self.whole < 0 and b"\r\n\r\n" in self.data:
            head, _, _ = self.data.partition(b"\r\n\r\n")
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    self.whole = len(head) + 4 + int(line.split(b":")[1])
        if 0 <= self.whole <= len(self.data) and math.isnan(self.at):
            self.at = seen
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = _TIMESPEC.unpack(value[: _TIMESPEC.size])
                    self.in_socket = sec + nsec / 1e9
        return True

    def result(self) -> list[object]:
        """[read, status, event id, bytes after the answer, in its socket]."""
        if math.isnan(self.at):
            return [None, None, None, len(self.data), None]
        head, _, rest = self.data.partition(b"\r\n\r\n")
        body = rest[: self.whole - len(head) - 4]
        status = int(head[9:12])
        event = json.loads(body).get("eventId") if status == 200 else body.decode()[:200]
        in_socket = None if math.isnan(self.in_socket) else self.in_socket
        return [self.at, status, event, len(self.data) - self.whole, in_socket]


def _connect(host: str, port: int, request: bytes) -> _Poll:
    sock = socket.create_connection((host, port), timeout=60)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.sendall(request)
    sock.setblocking(False)
    return _Poll(sock)


def run_clients(url: str, table: str, ds: str, first: int, count: int, timeout: float) -> None:
    host, port = url.removeprefix("http://").split(":")
    token = base64.b64encode(":".join(READER).encode()).decode()
    polls: dict[int, _Poll] = {}
    for i in range(first, first + count):
        request = (
            f"GET /v1/tables/{table}/done?ds={ds}&region=r{i % REGIONS:03d}&wait={timeout:g} "
            f"HTTP/1.1\r\nHost: {host}\r\nAuthorization: Basic {token}\r\n\r\n"
        ).encode()
        poll = _connect(host, int(port), request)
        polls[poll.sock.fileno()] = poll
    epoll = select.epoll(len(polls) + 1)
    for fd in polls:
        epoll.register(fd, select.EPOLLIN)
    print("CONNECTED", flush=True)
    pending = len(polls)
    deadline = time.monotonic() + timeout + 10
    linger_until = math.inf
    while (now := time.monotonic()) < min(deadline, linger_until):
        events = epoll.poll(min(deadline, linger_until) - now)
        seen = time.monotonic()
        for fd, _mask in events:
            poll = polls[fd]
            answered = not math.isnan(poll.at)
            if not poll.read(seen):  # closed: an answered poll's connection, or none came
                epoll.unregister(fd)
                pending -= 0 if answered else 1
            elif not answered and not math.isnan(poll.at):
                pending -= 1
        if pending == 0 and linger_until == math.inf:
            linger_until = time.monotonic() + _LINGER
    print(json.dumps([p.result() for p in polls.values()]), flush=True)


def client_main(argv: list[str]) -> None:
    """``_waiter_clients.py URL TABLE DS FIRST COUNT TIMEOUT``: prints CONNECTED once
    every poll is sent, then one JSON line of results."""
    url, table, ds, first, count, timeout = argv
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, int(count) + 100)), hard))
    run_clients(url, table, ds, int(first), int(count), float(timeout))


if __name__ == "__main__":
    client_main(sys.argv[1:])
