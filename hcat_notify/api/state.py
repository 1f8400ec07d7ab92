"""What one API process holds: settings, a catalog opened on first use, the change
feed, the authenticator and the metrics. None of it is state a request depends on
between calls: any instance answers any request the same way."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import anyio
import anyio.to_thread
from fastapi import Request

from hcat_notify.api.auth import Authenticator
from hcat_notify.api.feed import ChangeFeed
from hcat_notify.api.metrics import ApiMetrics
from hcat_notify.broker.connection import consumer_connection
from hcat_notify.config import Settings
from hcat_notify.errors import HcatNotifyError
from hcat_notify.store.catalog import Catalog
from hcat_notify.store.revision import SCHEMA_REVISION

__all__ = [
    "CATALOG_THREADS",
    "DRAIN_STATE_KEY",
    "READINESS_TTL",
    "WHOLE_RESPONSE_KEY",
    "ApiState",
    "Encoded",
    "WholeResponse",
    "WriteBatch",
    "in_thread",
    "state_of",
]

READINESS_TTL = 2.0
"""Seconds a readiness answer is reused: load balancers probe often, a probe of the
broker is a STOMP connection."""
_BROKER_PROBE_TIMEOUT = 3.0
CATALOG_THREADS = 4
DRAIN_STATE_KEY = "hcat_notify.drain"
"""The lifespan state entry (ASGI ``state``) the server calls, without arguments, when
it begins to stop: :meth:`ApiState.drain` (:mod:`hcat_notify.api.protocol`)."""
WHOLE_RESPONSE_KEY = "hcat_notify.whole_response"
"""The ASGI scope extension (``scope["extensions"]``) through which ``hcat-notify serve``'s
protocol lets the application write a whole response at once, from outside the
request's task (:class:`WholeResponse`)."""

Encoded = tuple[int, bytes, bytes]
"""A whole response as the server writes it: its status, and its bytes on a connection
kept alive and on one that closes after it."""


class WriteBatch(Protocol):
    """Whole responses collected by :meth:`WholeResponse.write`, written together."""

    def flush(self) -> None:
        """Write every response collected (in the event loop's thread)."""


class WholeResponse(Protocol):
    """What the server offers under :data:`WHOLE_RESPONSE_KEY`, for one request: a long
    poll answered by a group answers each of its waiters with the same bytes, written
    from the group's answer (:mod:`hcat_notify.api.long_polls`)."""

    def encode(self, status: int, headers: Sequence[tuple[bytes, bytes]], body: bytes) -> Encoded:
        """The response's bytes as the server writes them now (its own headers first);
        for any request of this server."""

    def write(self, encoded: Encoded, batch: WriteBatch | None = None) -> bool:
        """Write the whole response to this request's connection, and nothing else (a
        group's loop writes thousands): the response is complete, as if the
        application had sent it, once :meth:`finish` is called. False (nothing written)
        if the client went away or a response was started already. With ``batch``
        (from :meth:`batch`), the bytes may wait there for its :meth:`WriteBatch.flush`,
        to be written with the others'."""

    def batch(self) -> WriteBatch:
        """A new batch of writes, for any requests of this server."""

    def finish(self) -> None:
        """After :meth:`write`, from the request's task: the response's end, and what it
        starts on the connection (kept out of the loop that writes a group's answers)."""

    def on_lost(self, callback: Callable[[], object] | None) -> None:
        """Call ``callback`` if the connection is lost before this request's response
        (None: no more)."""


T = TypeVar("T")


class CatalogHandle:
    """The catalog, opened (and migrated) on first use and kept; opened again after a
    failed open, so a server started before its database answers starts serving when
    the database does."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self._catalog: Catalog | None = None

    def __call__(self) -> Catalog:
        catalog = self._catalog
        if catalog is None:
            with self._lock:
                if self._catalog is None:
                    self._catalog = Catalog.open(self._settings)
                catalog = self._catalog
        return catalog

    def opened(self) -> Catalog | None:
        """The catalog if it is open already, else None (never opens it)."""
        return self._catalog

    def close(self) -> None:
        with self._lock:
            catalog, self._catalog = self._catalog, None
        if catalog is not None:
            catalog.close()


@dataclass
class ApiState:
    """Everything the routes share within one process (``app.state.hcat``)."""

    settings: Settings
    catalog: CatalogHandle
    authenticator: Authenticator
    feed: ChangeFeed
    metrics: ApiMetrics
    _ready: tuple[float, dict[str, str]] | None = field(default=None, repr=False)
    _local: bool = field(default=False, init=False, repr=False)  # a SQLite catalog

    def __post_init__(self) -> None:
        self._local = self.settings.database_url.startswith("sqlite")

    @classmethod
    def build(cls, settings: Settings) -> ApiState:
        catalog = CatalogHandle(settings)
        metrics = ApiMetrics(catalog)
        return cls(
            settings=settings,
            catalog=catalog,
            authenticator=Authenticator(settings.api_principals),
            feed=ChangeFeed(settings.database_url, on_waiting=metrics.long_polls.set),
            metrics=metrics,
        )

    async def read(self, func: Callable[[Catalog], T]) -> T:
        """A short catalog read, such as "is this spec done?".

        On a local SQLite catalog it runs on the event loop: the read takes tens of
        microseconds and never waits for a writer (WAL), while a trip to a worker thread
        costs more than the read and makes the loop wait for the GIL behind it. On a
        database over the network, and while the catalog is not open yet, it runs in a
        worker thread (:func:`in_thread`).
        """
        catalog = self.catalog.opened()
        if catalog is not None and self._local:
            return func(catalog)
        return await in_thread(lambda: func(self.catalog()))

    def readiness(self) -> dict[str, str]:
        """Each check ("catalog", "broker") with "ok" or why it failed; blocking."""
        cached = self._ready
        if cached is not None and time.monotonic() - cached[0] < READINESS_TTL:
            return cached[1]
        checks = {"catalog": self._check_catalog(), "broker": self._check_broker()}
        self._ready = (time.monotonic(), checks)
        return checks

    def _check_catalog(self) -> str:
        try:
            revision = self.catalog().schema_revision()
        except HcatNotifyError as exc:
            return str(exc).splitlines()[0]
        if revision != SCHEMA_REVISION:
            return (
                f"the catalog is at migration {revision}, this server needs {SCHEMA_REVISION} "
                "(run hcat-notify db upgrade)"
            )
        return "ok"

    def _check_broker(self) -> str:
        import dataclasses

        probe = dataclasses.replace(
            self.settings, broker_timeout=min(self.settings.broker_timeout, _BROKER_PROBE_TIMEOUT)
        )
        connection = consumer_connection(probe)
        try:
            connection.connect()
        except HcatNotifyError as exc:
            return str(exc).splitlines()[0]
        finally:
            connection.close()
        return "ok"

    def drain(self) -> None:
        """The server begins to stop: answer every long poll now (non-blocking)."""
        self.feed.drain()

    def close(self) -> None:
        self.feed.close()
        self.catalog.close()


async def state_of(request: Request) -> ApiState:
    """The process's :class:`ApiState` (a FastAPI dependency; async, so that FastAPI
    calls it on the event loop instead of sending it to a worker thread)."""
    state: ApiState = request.app.state.hcat
    return state


_limiters: dict[int, anyio.CapacityLimiter] = {}


async def in_thread(func: Callable[[], T]) -> T:
    """Run a blocking catalog call in a worker thread, at most :data:`CATALOG_THREADS`
    at once per process.

    The calls are mostly Python (SQLAlchemy) under one GIL: dozens of threads taking
    turns on two cores answer fewer requests than a few do, and each holds a pooled
    connection besides. Requests beyond the limit wait their turn in the event loop.
    """
    loop = id(asyncio.get_running_loop())
    limiter = _limiters.get(loop)
    if limiter is None:
        limiter = _limiters[loop] = anyio.CapacityLimiter(CATALOG_THREADS)
    return await anyio.to_thread.run_sync(func, limiter=limiter)
