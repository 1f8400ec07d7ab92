"""The front of the API application for the scheduler's long poll,
``GET /v1/tables/{table}/done?...&wait=S``: ten thousand of them may wait on one
instance for the same done.

:class:`LongPolls` sits before the application's middleware and routing and takes only
such a request that is plainly well formed (no body, a UTF-8 query, a positive wait).
It checks the credentials and reads the parameters as the route does
(:func:`~hcat_notify.api.routes.dones.done_query`), reads once, and if nothing covers
the spec yet joins the key's group of the change feed (:mod:`hcat_notify.api.feed`)
with a small :class:`~hcat_notify.api.feed.Waiter`: no request object, no framework
frames, no timer of its own while it waits. When the group's read finds the done, its
answer is encoded once and the same bytes are written to every waiter's connection,
each in one write (the server's :data:`~hcat_notify.api.state.WHOLE_RESPONSE_KEY`
extension), the writes of every group of the wake-up in one batch
(:meth:`~hcat_notify.api.feed.Waiter.send`), before any waiter's task is resumed; the
tasks then only count the request. A client that goes away while it waits leaves its group.
Anything else (a failed check of the credentials, a malformed parameter, a read that
raised, a server without the extension) goes to the application, which answers it as
it always has, so status codes, headers, bodies and metrics are the route's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from prometheus_client import Counter
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from hcat_notify.api.feed import TIMED_OUT, WAKE_UP, Waiter, stopping_error
from hcat_notify.api.params import query_not_utf8
from hcat_notify.api.problems import error_response
from hcat_notify.api.routes.dones import DONE_PATH, DoneQuery, done_query
from hcat_notify.api.state import (
    WHOLE_RESPONSE_KEY,
    ApiState,
    Encoded,
    WholeResponse,
    WriteBatch,
)

__all__ = ["LongPolls"]

_PREFIX = DONE_PATH.split("{", 1)[0]  # "/v1/tables/"
_SUFFIX = DONE_PATH.rsplit("}", 1)[1]  # "/done"
_GONE = object()  # the client went away while it waited


def _is_long_poll(scope: Scope) -> bool:
    """A plain ``GET`` of the check with a ``wait`` parameter, no body, a UTF-8 query."""
    if scope["type"] != "http" or scope["method"] != "GET" or scope.get("root_path"):
        return False
    path: str = scope["path"]
    if not (path.startswith(_PREFIX) and path.endswith(_SUFFIX)):
        return False
    table = path[len(_PREFIX) : -len(_SUFFIX)]
    query: bytes = scope["query_string"]
    if not table or "/" in table or b"wait=" not in query:
        return False
    for name, value in scope["headers"]:
        if name in (b"content-length", b"transfer-encoding") and value not in (b"0", b""):
            return False
    return (query.isascii() and b"%" not in query) or query_not_utf8(query) is None


class _Poll(Waiter):
    """One waiting long poll: the group's answer written to its connection (when the
    server offers that), then its task resumed to count it."""

    __slots__ = ("future", "path", "query", "sent", "writer")

    def __init__(
        self,
        deadline: float,
        future: asyncio.Future[Any],
        query: DoneQuery,
        path: str,
        writer: WholeResponse | None,
    ) -> None:
        super().__init__(deadline)
        self.future = future
        self.query = query
        self.path = path
        self.writer = writer
        self.sent: object = None  # the status written, _GONE, or why it could not be

    def send(self, outcome: object, shared: dict[str, Any]) -> None:
        writer = self.writer
        if writer is None or self.sent is not None or self.future.done():
            return
        try:
            encoded: Encoded | None = shared.get("encoded")
            if encoded is None:
                encoded = shared["encoded"] = _encode(writer, self.response(outcome))
            wake_up: dict[str, Any] | None = shared.get(WAKE_UP)
            batch: WriteBatch | None = None
            if wake_up is not None:  # the wake-up's writes are made together
                batch = wake_up.get("writes")
                if batch is None:
                    batch = wake_up["writes"] = writer.batch()
                    wake_up["flush"] = batch.flush
            self.sent = encoded[0] if writer.write(encoded, batch) else _GONE
        except Exception as exc:  # noqa: BLE001 - answered in answer(): its task's 500
            self.sent = exc

    def answer(self, outcome: object, shared: dict[str, Any]) -> None:
        if self.future.done():
            return
        if self.writer is None:  # the task sends the response itself
            self.future.set_result(outcome)
            return
        self.send(outcome, shared)
        sent = self.sent
        if isinstance(sent, Exception):
            self.future.set_exception(sent)  # its task answers 500 (the feed logs it)
            raise sent
        self.future.set_result(sent)

    def response(self, outcome: object) -> Response:
        """The route's response to ``outcome``."""
        if outcome is TIMED_OUT:
            return self.query.not_done(self.path)
        if isinstance(outcome, Exception):
            return error_response(outcome, method="GET", path=self.path)
        assert isinstance(outcome, str)
        return Response(outcome, media_type="application/json")

    def gone(self) -> None:
        """The connection was lost while it waited."""
        if not self.future.done():
            self.future.set_result(_GONE)


def _encode(writer: WholeResponse, response: Response) -> Encoded:
    return writer.encode(response.status_code, response.raw_headers, bytes(response.body))


class LongPolls:
    """ASGI middleware in front of the whole application: takes the scheduler's long
    polls (the module's docstring says which and how), hands everything else on."""

    def __init__(self, app: ASGIApp, state: ApiState) -> None:
        self.app = app
        self.state = state
        # the request metrics' series of the route, looked up once (per status)
        self._counters: dict[int, Counter] = {}
        self._latency = state.metrics.latency.labels("GET", DONE_PATH)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _is_long_poll(scope):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        query = await self._query(scope)
        if query is None:
            await self.app(scope, receive, send)  # it answers the error as ever
            return
        feed = self.state.feed
        generation = feed.generation()
        try:
            found = await query.check()
        except Exception:  # noqa: BLE001 - the application reads again and answers it
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        writer: WholeResponse | None = scope.get("extensions", {}).get(WHOLE_RESPONSE_KEY)
        loop = asyncio.get_running_loop()
        poll = _Poll(loop.time() + query.wait, loop.create_future(), query, path, writer)
        if found is not None or feed.stopping:
            # a failure to answer is in the future too: answered below as the route would
            with contextlib.suppress(Exception):
                poll.answer(found if found is not None else stopping_error(), {})
        else:
            feed.join(query.key, query.check, poll, generation=generation, batch=query.batch)
            if writer is not None:  # after the join: a connection lost already leaves now
                writer.on_lost(lambda: poll.gone() if feed.leave(poll) else None)
        try:
            outcome = await poll.future
        except asyncio.CancelledError:  # the server gave up on the request (its shutdown)
            feed.leave(poll)
            raise
        except Exception as exc:  # noqa: BLE001 - answering it failed: a problem document
            outcome = error_response(exc, method="GET", path=path)
        finally:
            if writer is not None:
                writer.finish()
        if outcome is _GONE:
            return
        if writer is None or isinstance(outcome, Response):
            response = outcome if isinstance(outcome, Response) else poll.response(outcome)
            await response(scope, receive, send)
            outcome = response.status_code
        counter = self._counters.get(outcome)
        if counter is None:
            metrics = self.state.metrics
            counter = self._counters[outcome] = metrics.requests.labels(
                "GET", DONE_PATH, str(outcome)
            )
        counter.inc()
        self._latency.observe(time.perf_counter() - started)

    async def _query(self, scope: Scope) -> DoneQuery | None:
        """The request's check if its credentials and parameters are good and it waits;
        else None (the request object is dropped here: a waiter keeps none)."""
        path: str = scope["path"]
        scope["path_params"] = {"table": path[len(_PREFIX) : -len(_SUFFIX)]}
        try:
            query = await done_query(Request(scope))
        except Exception:  # noqa: BLE001 - the application answers it
            return None
        return query if query.wait > 0 else None
