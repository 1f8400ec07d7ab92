"""The HTTP/1.1 protocol ``hcat-notify serve`` runs uvicorn with: uvicorn's httptools
protocol, plus what it lacks at the edge of the server.

* **A deadline for the request head.** uvicorn times out only an idle keep-alive
  connection: a client that opens a connection and sends nothing, or sends its headers a
  byte at a time, holds the connection (and a file descriptor) for ever. Here the whole
  head (request line and headers) must arrive within :data:`HEAD_TIMEOUT` seconds of the
  connection or of the request's first byte, whatever trickles in meanwhile.
* **A read timeout for the body**: :data:`BODY_IDLE_TIMEOUT` seconds without a byte of
  an announced body ends the request.
* **Bounds on the head**: :data:`MAX_URL_BYTES` for the request target (httptools
  cannot parse a longer one), :data:`MAX_HEAD_BYTES` for it and the headers together
  (httptools has no bound of its own).
* **Problem documents** for what the server refuses before the application sees the
  request (an unreadable request line, an unknown method, the bounds above), instead
  of uvicorn's ``text/plain``. A timed-out request gets 408, a target too long 414, a
  head too large 431, an unknown method or a malformed request 400.
* **A lingering close** after a refusal: the server half-closes (its answer, then end of
  stream) and reads and drops what the client still sends, for at most
  :data:`LINGER_SECONDS`, before it closes. Closing a socket with unread input resets
  the connection, and a reset can destroy the answer before the client reads it: a
  client still sending a 100 KB request target got a reset instead of its 414 (nginx's
  ``lingering_close`` does the same).
* **Whole responses written from outside the request's task** (the scope extension
  :data:`~hcat_notify.api.state.WHOLE_RESPONSE_KEY`): a long poll waiting with ten
  thousand others for the same done is answered by one loop that writes the same
  bytes to each connection, in one write each, instead of ten thousand tasks each
  sending its response through the ASGI stack; the writes of one wake-up go straight
  to the sockets, a chunk at a time (:class:`_Writes`); and it learns that its client
  went away while it waited (it leaves its group instead of waiting out its deadline).
* **Long polls answered on shutdown**: as uvicorn begins to stop it asks each
  connection to close; the first such call also calls the application's drain
  (:data:`~hcat_notify.api.state.DRAIN_STATE_KEY`), so every waiting long poll answers
  at once instead of being cut off when the graceful-shutdown timeout runs out.

These bound one connection each. They do not bound how many connections a client
opens: a reverse proxy in front (docs/api.md) should limit connections per client and
buffer requests, as it can for every backend at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

from hcat_notify.api.contract import PROBLEM_JSON
from hcat_notify.api.problems import problem_body
from hcat_notify.api.state import DRAIN_STATE_KEY, WHOLE_RESPONSE_KEY, Encoded, WriteBatch

__all__ = [
    "BODY_IDLE_TIMEOUT",
    "HEAD_TIMEOUT",
    "LINGER_SECONDS",
    "MAX_HEAD_BYTES",
    "MAX_URL_BYTES",
    "ApiHttpProtocol",
]

logger = logging.getLogger(__name__)

HEAD_TIMEOUT = 10.0
"""Seconds a request's line and headers may take to arrive, all of them."""
BODY_IDLE_TIMEOUT = 10.0
"""Seconds a request body may pause between two reads."""
MAX_HEAD_BYTES = 64 * 1024
"""The largest request line and headers taken together (a query string included)."""
MAX_URL_BYTES = 60 * 1024
"""The longest request target (path and query); httptools parses none over 64 KiB."""
LINGER_SECONDS = 2.0
"""After a refusal, the longest the server reads and drops what the client still sends
before it closes the connection."""
CHUNK_WRITES = 64
"""The answers of a wake-up's long polls are written this many at a time, in one tight
loop."""


class _RefusedError(Exception):
    """Raised in a parser callback: the parser stops, and :meth:`send_400_response`
    (uvicorn's handler of the parser's error) answers this instead."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class ApiHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a head deadline, a body read timeout, a bound
    on the head, problem documents for what it refuses, and long polls drained as the
    server begins to stop. For ``uvicorn.run(..., http=ApiHttpProtocol)``."""

    # Slots: five more keys in uvicorn's instance dict (27, key-shared: 296 bytes) made
    # it a dict of its own (1,584 bytes), per connection: a long poll's, for a minute.
    __slots__ = (
        "_body_pending",
        "_fd",
        "_field_bytes",
        "_head_bytes",
        "_lingering",
        "_on_lost",
        "_timer",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None
        self._head_bytes: int | None = 0  # None: the head is read, the body may follow
        self._body_pending = False
        self._field_bytes = 0  # of the headers parsed so far
        self._lingering = False  # refused: what still comes is read and dropped
        self._on_lost: Callable[[], object] | None = None  # a waiting long poll's
        self._fd = -1  # the socket's, if what is written to it goes as it is (no TLS)

    # ------------------------------------------------------------------ timers

    def _arm(self, seconds: float, what: str) -> None:
        self._disarm()
        self._timer = self.loop.call_later(seconds, self._timed_out, what)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self, what: str) -> None:
        self._timer = None
        logger.info("api: closing a connection from %s: %s", self.client, what)
        self._refuse(408, what)

    # ------------------------------------------------------------------ protocol

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._fd = _plain_fd(transport)
        self._arm(HEAD_TIMEOUT, f"the request's head did not arrive within {HEAD_TIMEOUT:g} s")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)
        lost, self._on_lost = self._on_lost, None
        if lost is not None:
            lost()

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # the rest of a refused request
        if self._body_pending:
            self._arm(BODY_IDLE_TIMEOUT, _body_idle())
        super().data_received(data)
        # Counted once parsed: a chunk that completes the head may hold body bytes too.
        if self._head_bytes is not None and not self._lingering:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse(431, f"the request line and headers are over {MAX_HEAD_BYTES:,} bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._field_bytes = 0
        if self._head_bytes is None:  # the next request on a kept-alive connection
            self._head_bytes = 0
            self._arm(HEAD_TIMEOUT, f"the request's head did not arrive within {HEAD_TIMEOUT:g} s")

    def on_headers_complete(self) -> None:
        self._head_bytes = None
        self._disarm()
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:  # a request (not an upgrade)
            extensions: dict[str, Any] = {WHOLE_RESPONSE_KEY: _WholeResponse(self, cycle)}
            self.scope["extensions"] = extensions
        self._body_pending = any(
            (name == b"content-length" and value.strip() not in (b"", b"0"))
            or name == b"transfer-encoding"
            for name, value in self.headers
        )
        if self._body_pending:
            self._arm(BODY_IDLE_TIMEOUT, _body_idle())

    def on_message_complete(self) -> None:
        self._body_pending = False
        self._disarm()
        super().on_message_complete()

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > MAX_URL_BYTES:
            raise _RefusedError(414, f"the request target is over {MAX_URL_BYTES:,} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        self._field_bytes += len(name) + len(value) + 4
        if self._field_bytes + len(self.url) > MAX_HEAD_BYTES:
            raise _RefusedError(431, _head_too_large())

    def send_400_response(self, msg: str) -> None:
        # Called by uvicorn inside its ``except`` for the parser's error: name it.
        error = sys.exception()
        refused = error.__context__ if error is not None else None
        if isinstance(refused, _RefusedError):
            self._refuse(refused.status, refused.detail)
        elif isinstance(error, httptools.HttpParserInvalidMethodError):
            self._refuse(400, "malformed request: a method this server does not know")
        else:
            self._refuse(400, f"malformed request: {error or msg}")

    def shutdown(self) -> None:
        drain = self.app_state.get(DRAIN_STATE_KEY)
        if callable(drain):
            drain()  # idempotent: every connection calls it
        super().shutdown()

    # ------------------------------------------------------------------ refusals

    def _refuse(self, status: int, detail: str) -> None:
        """Answer ``status`` with a problem document, unless a response is under way,
        and close the connection; the application, if it runs, sees a disconnect."""
        if self._lingering or self.transport.is_closing():
            return  # answered already
        self._disarm()
        cycle = self.cycle
        running = cycle is not None and not cycle.response_complete
        if running:
            cycle.disconnected = True
            cycle.message_event.set()
        # While the head is read, a running cycle is the previous (pipelined) request's.
        head = self._head_bytes is not None
        if not (cycle is not None and (cycle.response_started if not head else running)):
            self.transport.write(self._problem(status, detail))
        self._linger()

    def _linger(self) -> None:
        """End the answer with end of stream, then read and drop the client's input for
        at most :data:`LINGER_SECONDS` before closing (the module's docstring says why);
        a client that closes its side ends it sooner."""
        self._lingering = True
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()
        self._timer = self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def _problem(self, status: int, detail: str) -> bytes:
        body = json.dumps(
            problem_body(status, detail, instance=self._path()), ensure_ascii=False
        ).encode()
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head.extend([name, b": ", value, b"\r\n"])
        head.extend(
            [
                b"content-type: " + PROBLEM_JSON.encode() + b"\r\n",
                b"content-length: " + str(len(body)).encode() + b"\r\n",
                b"connection: close\r\n\r\n",
            ]
        )
        return b"".join(head) + body

    def _path(self) -> str | None:
        """The request's path (without its query), if its line was read."""
        url: bytes = getattr(self, "url", b"")
        path = url.split(b"?", 1)[0]
        if not path.startswith(b"/") or len(path) > 2048:
            return None
        return path.decode("latin-1")


class _WholeResponse:
    """:class:`~hcat_notify.api.state.WholeResponse` for one request: what uvicorn's
    ``RequestResponseCycle.send`` does for a response start and its whole body, in one
    write and without a task; the bytes first (:meth:`write`), the cycle's bookkeeping
    from the request's task (:meth:`finish`)."""

    __slots__ = ("_cycle", "_fd", "_protocol", "_status")

    def __init__(self, protocol: ApiHttpProtocol, cycle: RequestResponseCycle) -> None:
        self._protocol = protocol
        self._cycle = cycle
        self._fd = protocol._fd
        self._status = 0

    def encode(self, status: int, headers: Sequence[tuple[bytes, bytes]], body: bytes) -> Encoded:
        head = [STATUS_LINE[status]]
        for name, value in (*self._protocol.server_state.default_headers, *headers):
            head.extend([name.lower(), b": ", value, b"\r\n"])
        start = b"".join(head)
        return status, start + b"\r\n" + body, start + b"connection: close\r\n\r\n" + body

    def write(self, encoded: Encoded, batch: WriteBatch | None = None) -> bool:
        # Only what puts the bytes on the wire: a group's loop calls it for each of its
        # thousands of waiters before the next one's bytes can go.
        cycle = self._cycle
        if cycle.disconnected or cycle.response_started:
            return False
        cycle.response_started = True
        self._status = encoded[0]
        data = encoded[1] if cycle.keep_alive else encoded[2]
        transport = cycle.transport
        fd = self._fd
        if fd < 0 or transport.is_closing() or transport.get_write_buffer_size():
            transport.write(data)
            return True
        if isinstance(batch, _Writes):
            batch.add(fd, data, transport)
        else:
            _write_through(fd, data, transport)
        return True

    def batch(self) -> WriteBatch:
        return _Writes()

    def finish(self) -> None:
        cycle, protocol = self._cycle, self._protocol
        if cycle.response_started and not cycle.response_complete:  # written by write()
            protocol._on_lost = None
            cycle.waiting_for_100_continue = False
            cycle.response_complete = True
            cycle.message_event.set()
            if cycle.access_log:
                scope = cycle.scope
                cycle.access_logger.info(
                    '%s - "%s %s HTTP/%s" %d',
                    get_client_addr(scope),
                    scope["method"],
                    get_path_with_query_string(scope),
                    scope["http_version"],
                    self._status,
                )
            if not cycle.keep_alive:
                cycle.transport.close()
        # What the response's end starts (a request pipelined behind it, or the
        # keep-alive timer), unless the client's next request began meanwhile.
        if cycle.response_complete and (protocol.pipeline or protocol.cycle is cycle):
            cycle.on_response()

    def on_lost(self, callback: Callable[[], object] | None) -> None:
        """``callback`` is called when the connection is lost, at once if it was lost
        already (while the request was read, say)."""
        # Only the request whose task runs calls it: one at a time per connection.
        if callback is not None and self._cycle.disconnected:
            callback()
            return
        self._protocol._on_lost = callback


def _write_through(fd: int, data: bytes, transport: asyncio.Transport) -> None:
    """``data`` straight to the socket ``fd`` whose transport has nothing buffered, as
    the transport would first try (without its buffering's cost per call); what does
    not go, or an error, the transport's own write takes on."""
    try:
        sent = os.write(fd, data)
    except OSError:
        sent = 0
    if sent < len(data):
        transport.write(data[sent:])


class _Writes:
    """:class:`~hcat_notify.api.state.WriteBatch`: whole responses bound straight for
    their sockets (nothing buffered before them), collected while a wake-up's long
    polls are answered and written :data:`CHUNK_WRITES` at a time in one tight loop of
    ``os.write``; what a socket does not take, or refuses, then goes through its
    transport. Nothing else of the event loop runs meanwhile, so no socket collected
    closes before its bytes are written."""

    __slots__ = ("data", "fds", "transports")

    def __init__(self) -> None:
        self.fds: list[int] = []
        self.data: list[bytes] = []
        self.transports: list[asyncio.Transport] = []

    def add(self, fd: int, data: bytes, transport: asyncio.Transport) -> None:
        fds = self.fds
        fds.append(fd)
        self.data.append(data)
        self.transports.append(transport)
        if len(fds) >= CHUNK_WRITES:
            self.flush()

    def flush(self) -> None:
        fds, data, transports = self.fds, self.data, self.transports
        self.fds, self.data, self.transports = [], [], []
        sent = [0] * len(fds)
        for i, fd in enumerate(fds):
            try:  # noqa: SIM105 - a context manager per write costs more than the rest
                sent[i] = os.write(fd, data[i])
            except OSError:
                pass  # through its transport, which says what went wrong
        for i, n in enumerate(sent):
            if n < len(data[i]):
                try:
                    transports[i].write(data[i][n:])
                except Exception:  # the transport reports its connection lost
                    logger.warning("api: writing a long poll's answer failed", exc_info=True)


def _plain_fd(transport: asyncio.Transport) -> int:
    """The descriptor of the transport's socket if bytes written to it reach the peer as
    they are (a plain TCP or Unix socket, no TLS); else -1."""
    if transport.get_extra_info("sslcontext") is not None:
        return -1
    sock = transport.get_extra_info("socket")
    try:
        return int(sock.fileno()) if sock is not None else -1
    except (AttributeError, OSError, ValueError):
        return -1


def _body_idle() -> str:
    return f"the request's body paused for over {BODY_IDLE_TIMEOUT:g} s"


def _head_too_large() -> str:
    return f"the request line and headers are over {MAX_HEAD_BYTES:,} bytes"
