"""The long-poll front (:mod:`hcat_notify.api.long_polls`) on the real application and a
real SQLite catalog, the server's whole-response extension played by a double: a
group's answer is encoded once and the same bytes written to each waiter; deadlines
are kept by one timer, not one per waiter; a waiter whose client went away leaves its
group, is never written to and never counted."""

from __future__ import annotations

import asyncio
import base64
import contextvars
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVarTuple

import pytest

from hcat_notify.api.app import create_app
from hcat_notify.api.state import WHOLE_RESPONSE_KEY, ApiState, Encoded
from hcat_notify.config import Settings, load_settings
from hcat_notify.store import Catalog

TABLE = "waits.t"
READER = ("hcat-reader", "hcat-reader-dev")
ROUTE = 'route="/v1/tables/{table}/done"'


class _Connection:
    """The server's whole-response extension for one request, recording what the
    application asks of it."""

    encoded: ClassVar[list[tuple[int, bytes]]] = []  # every encode call, of any connection

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.finished = False
        self.lost: Callable[[], object] | None = None

    def encode(self, status: int, headers: Any, body: bytes) -> Encoded:
        _Connection.encoded.append((status, body))
        head = b"HTTP/1.1 %d\r\n" % status + b"".join(n + b": " + v + b"\r\n" for n, v in headers)
        return status, head + b"\r\n" + body, head + b"connection: close\r\n\r\n" + body

    def write(self, encoded: Encoded, batch: Any = None) -> bool:
        if isinstance(batch, _Batch):
            batch.pending.append((self, encoded[1]))
        else:
            self.written.append(encoded[1])
        return True

    def batch(self) -> _Batch:
        return _Batch()

    def finish(self) -> None:
        self.finished = True

    def on_lost(self, callback: Callable[[], object] | None) -> None:
        self.lost = callback


class _Batch:
    """A batch of writes: each written to its connection as it is flushed."""

    flushed: ClassVar[list[int]] = []  # each flush's size

    def __init__(self) -> None:
        self.pending: list[tuple[_Connection, bytes]] = []

    def flush(self) -> None:
        _Batch.flushed.append(len(self.pending))
        for connection, data in self.pending:
            connection.written.append(data)
        self.pending = []


_Ts = TypeVarTuple("_Ts")


class _CountingLoop(asyncio.SelectorEventLoop):
    """Counts the timers armed (``call_at``, which ``call_later`` and timeouts use)."""

    timers = 0

    def call_at(
        self,
        when: float,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        _CountingLoop.timers += 1
        return super().call_at(when, callback, *args, context=context)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    settings = load_settings(home=tmp_path, db_url=f"sqlite:///{tmp_path / 'catalog.db'}")
    with Catalog.open(settings) as catalog:
        catalog.create_table(TABLE, location=str(tmp_path / "t"), partition_keys=["ds", "region"])
    _Connection.encoded = []
    _Batch.flushed = []
    return settings


def _scope(query: str, connection: _Connection | None) -> dict[str, Any]:
    token = base64.b64encode(":".join(READER).encode())
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": f"/v1/tables/{TABLE}/done",
        "raw_path": f"/v1/tables/{TABLE}/done".encode(),
        "root_path": "",
        "query_string": query.encode(),
        "headers": [(b"host", b"test"), (b"authorization", b"Basic " + token)],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
        "state": {},
        "extensions": {} if connection is None else {WHOLE_RESPONSE_KEY: connection},
    }


async def _request(app: Any, query: str, connection: _Connection | None) -> list[dict[str, Any]]:
    """One request; what the application sent through ASGI (nothing when it wrote the
    whole response through the extension)."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(_scope(query, connection), receive, send)
    return sent


def _figure(state: ApiState, prefix: str) -> float:
    for line in state.metrics.render()[0].decode().splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def _until(condition: Callable[[], bool], seconds: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def _waiting(state: ApiState) -> float:
    return _figure(state, "hcat_notify_api_long_polls_waiting ")


def _counted(state: ApiState, status: int) -> float:
    return _figure(
        state, f'hcat_notify_api_requests_total{{method="GET",{ROUTE},status="{status}"}}'
    )


def _run(settings: Settings, scenario: Callable[[Any, ApiState], Any]) -> Any:
    app = create_app(settings)
    state: ApiState = app.state.hcat
    loop = _CountingLoop()
    try:
        return loop.run_until_complete(scenario(app, state))
    finally:
        state.close()
        loop.close()


def test_a_groups_answer_is_encoded_once_and_the_same_bytes_written_to_each_waiter_together(
    settings: Settings,
):
    per_key = 300
    connections = [_Connection() for _ in range(2 * per_key)]

    async def scenario(app: Any, state: ApiState) -> tuple[list[Any], int, float]:
        polls = [
            asyncio.create_task(_request(app, f"ds=1&region=r{i % 2}&wait=30", connection))
            for i, connection in enumerate(connections)
        ]
        await _until(lambda: _waiting(state) == 2 * per_key)
        with Catalog.open(settings) as catalog:
            event_id = await asyncio.to_thread(catalog.mark_set_done, TABLE, {"ds": "1"})
        sent = await asyncio.wait_for(asyncio.gather(*polls), 20)
        return sent, event_id, _counted(state, 200)

    app_sent, event_id, counted = _run(settings, scenario)
    assert counted == 2 * per_key
    assert app_sent == [[] for _ in connections]  # nothing went through ASGI's send
    assert all(c.finished for c in connections)
    assert len(_Connection.encoded) == 2  # once per key (per group)
    assert {status for status, _ in _Connection.encoded} == {200}
    assert all(f'"eventId":{event_id}'.encode() in body for _, body in _Connection.encoded)
    for key in (0, 1):
        written = [c.written for c in connections[key::2]]
        assert all(len(w) == 1 for w in written)
        assert all(w[0] is written[0][0] for w in written)  # the very same bytes object
    assert _Batch.flushed == [2 * per_key]  # both groups' writes together, once


def test_long_polls_time_out_together_on_one_timer_each_answered_404_and_counted(
    settings: Settings,
):
    waiters = 300
    connections = [_Connection() for _ in range(waiters)]

    async def scenario(app: Any, state: ApiState) -> tuple[int, float, float]:
        polls = [
            asyncio.create_task(_request(app, f"ds=2&region=r{i % 3}&wait=2.5", connection))
            for i, connection in enumerate(connections)
        ]
        await _until(lambda: _waiting(state) == waiters)
        armed = _CountingLoop.timers
        await asyncio.wait_for(asyncio.gather(*polls), 20)
        return _CountingLoop.timers - armed, _waiting(state), _counted(state, 404)

    _CountingLoop.timers = 0
    timers, waiting, counted = _run(settings, scenario)
    assert all(len(c.written) == 1 for c in connections)
    assert all(c.written[0].startswith(b"HTTP/1.1 404") for c in connections)
    assert all(b"urn:hcat-notify:problem:not-done" in c.written[0] for c in connections)
    # the deadlines passed as the waiters came, over a second or so: each timer answers
    # the waiters of its few milliseconds, one encoding per group among them
    print(f"{timers} timers, {len(_Connection.encoded)} encodings for {waiters} waiters")
    assert timers <= waiters // 4, timers  # not one per waiter
    assert len(_Connection.encoded) <= waiters // 4, len(_Connection.encoded)
    assert waiting == 0
    assert counted == waiters


def test_a_waiter_whose_client_went_away_leaves_its_group_unanswered_and_uncounted(
    settings: Settings,
):
    waiters = 200
    connections = [_Connection() for _ in range(waiters)]

    async def scenario(app: Any, state: ApiState) -> tuple[float, float, list[Any]]:
        polls = [
            asyncio.create_task(_request(app, "ds=3&region=r0&wait=30", connection))
            for connection in connections
        ]
        await _until(lambda: _waiting(state) == waiters)
        for connection in connections[::2]:  # what the server does as a connection is lost
            assert connection.lost is not None
            connection.lost()
        await _until(lambda: _waiting(state) == waiters // 2)
        gone = await asyncio.wait_for(asyncio.gather(*polls[::2]), 5)  # they ended
        with Catalog.open(settings) as catalog:
            await asyncio.to_thread(catalog.mark_set_done, TABLE, {"ds": "3"})
        await asyncio.wait_for(asyncio.gather(*polls[1::2]), 20)
        return _waiting(state), _counted(state, 200), gone

    waiting, counted, gone = _run(settings, scenario)
    assert gone == [[] for _ in range(waiters // 2)]
    assert all(c.written == [] for c in connections[::2])
    assert all(len(c.written) == 1 for c in connections[1::2])
    assert waiting == 0
    assert counted == waiters // 2


def test_without_the_extension_the_front_answers_through_asgi(settings: Settings):
    async def scenario(app: Any, state: ApiState) -> tuple[list[dict[str, Any]], float]:
        poll = asyncio.create_task(_request(app, "ds=4&region=r0&wait=30", None))
        await _until(lambda: _waiting(state) == 1)
        with Catalog.open(settings) as catalog:
            await asyncio.to_thread(catalog.mark_set_done, TABLE, {"ds": "4"})
        return await asyncio.wait_for(poll, 20), _counted(state, 200)

    sent, counted = _run(settings, scenario)
    assert sent[0]["type"] == "http.response.start"
    assert sent[0]["status"] == 200
    assert b'"spec":"ds=4"' in sent[1]["body"]
    assert counted == 1


class _Broken(_Connection):
    def encode(self, status: int, headers: Any, body: bytes) -> Encoded:
        raise RuntimeError("cannot encode")


def test_a_waiter_whose_answer_cannot_be_written_is_answered_500_and_the_others_theirs(
    settings: Settings,
):
    connections: list[_Connection] = [_Broken(), _Connection()]

    async def scenario(app: Any, state: ApiState) -> list[Any]:
        polls = [
            asyncio.create_task(_request(app, f"ds=5&region=r{i}&wait=30", connection))
            for i, connection in enumerate(connections)
        ]
        await _until(lambda: _waiting(state) == 2)
        with Catalog.open(settings) as catalog:
            await asyncio.to_thread(catalog.mark_set_done, TABLE, {"ds": "5"})
        return await asyncio.wait_for(asyncio.gather(*polls), 20)

    broken, fine = _run(settings, scenario)
    assert broken[0]["status"] == 500  # through ASGI's send, a problem document
    assert b"incident" in broken[1]["body"]
    assert fine == []
    assert connections[1].written[0].startswith(b"HTTP/1.1 200")


def test_a_waiter_whose_request_is_cancelled_leaves_its_group(settings: Settings):
    """The server cancels a request's task (its shutdown's grace ran out): the waiter is
    taken out of its group then, not kept until its deadline."""

    async def scenario(app: Any, state: ApiState) -> float:
        poll = asyncio.create_task(_request(app, "ds=6&region=r0&wait=300", _Connection()))
        await _until(lambda: _waiting(state) == 1)
        poll.cancel()
        with pytest.raises(asyncio.CancelledError):
            await poll
        return _waiting(state)

    assert _run(settings, scenario) == 0


def test_an_answer_found_at_once_that_cannot_be_written_is_answered_500(settings: Settings):
    """The done is there when the poll comes: its answer fails as a waiter's would, and
    the route's problem document goes out through ASGI."""

    async def scenario(app: Any, state: ApiState) -> list[dict[str, Any]]:
        with Catalog.open(settings) as catalog:
            await asyncio.to_thread(catalog.mark_set_done, TABLE, {"ds": "7"})
        return await asyncio.wait_for(_request(app, "ds=7&region=r0&wait=30", _Broken()), 20)

    sent = _run(settings, scenario)
    assert sent[0]["status"] == 500
    assert b"incident" in sent[1]["body"]


class _LostAlready(_Connection):
    """A connection the client closed while its request was read: the server's extension
    calls a lost-callback at once when it is registered."""

    def on_lost(self, callback: Callable[[], object] | None) -> None:
        super().on_lost(callback)
        if callback is not None:
            callback()


def test_a_waiter_whose_connection_was_lost_before_it_joined_leaves_at_once(
    settings: Settings,
):
    """The lost-callback comes as the waiter registers it: the waiter must be in its group
    by then, so that leaving takes it out (registered before the join, it stayed until its
    deadline, 300 s here, and was counted as waiting)."""

    async def scenario(app: Any, state: ApiState) -> tuple[list[dict[str, Any]], float]:
        sent = await asyncio.wait_for(_request(app, "ds=8&region=r0&wait=300", _LostAlready()), 20)
        return sent, _waiting(state)

    sent, waiting = _run(settings, scenario)
    assert sent == []  # nothing answered to a connection that is gone
    assert waiting == 0
