"""The connections a relay's webhook requests go over: httpcore (the transport under
httpx), kept alive, through the proxy the environment names if any, each request with
one deadline for the whole exchange (a connection from the pool, connect, TLS, sending,
the answer's head and body) that every socket operation of the request keeps to, and
the answer read as sent (never decoded) up to a cap. Imported when a relay first
delivers (the ``[webhooks]`` extra); :class:`~hcat_notify.relay.webhook_http.HttpxPoster`
makes results of its answers (docs/webhooks.md, "Safety")."""

from __future__ import annotations

import math
import ssl
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit
from urllib.request import getproxies, proxy_bypass

import httpcore
import httpx

__all__ = ["Answer", "Transport"]

WRITE_SLICE = 4096
"""Bytes a request body is sent in, each slice within the time the deadline leaves (a
socket's own timeout counts per call, and one call may wait several times)."""
_FAILURES = (
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.ProxyError,
    httpcore.UnsupportedProtocol,
)


@dataclass(frozen=True)
class Answer:
    """What came back: a status (None: no answer, ``error`` says why), ``Retry-After``,
    the body's content coding if any, and the body as sent up to the cap."""

    status: int | None
    retry_after: str | None = None
    encoding: str | None = None
    head: bytes = b""
    error: str | None = None


class _Deadline(threading.local):
    """When the request this thread sends must be over (``time.monotonic()``)."""

    at = math.inf


def _left(deadline: _Deadline, timeout: float | None, late: type[Exception]) -> float:
    """The time an operation may take: its own timeout, within what the deadline leaves;
    ``late`` raised if that is nothing."""
    left = deadline.at - time.monotonic()
    if left <= 0:
        raise late("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, deadline: _Deadline) -> None:
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(self._deadline, timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        for start in range(0, len(buffer), WRITE_SLICE):
            piece = buffer[start : start + WRITE_SLICE]
            self._inner.write(piece, _left(self._deadline, timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        left = _left(self._deadline, timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, left), self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    """httpcore's sockets, each operation within the deadline of the request under way
    in the calling thread (a pooled connection serves one request at a time)."""

    def __init__(self, deadline: _Deadline) -> None:
        self._inner = httpcore.SyncBackend()
        self._deadline = deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        left = _left(self._deadline, timeout, httpcore.ConnectTimeout)
        stream = self._inner.connect_tcp(host, port, left, local_address, socket_options)
        return _Stream(stream, self._deadline)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        left = _left(self._deadline, timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_unix_socket(path, left, socket_options), self._deadline)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class Transport:
    """Sends POSTs, ``connections`` kept alive per pool: one pool direct, one per proxy
    the environment names (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, read once;
    ``NO_PROXY`` honoured).

    Raises:
        ValueError: a proxy URL of a scheme other than http, https, socks5.
    """

    def __init__(self, *, connections: int) -> None:
        self._deadline = _Deadline()
        self._backend = _Backend(self._deadline)
        self._connections = connections
        self._ssl = httpx.create_ssl_context()  # what httpx trusts (SSL_CERT_FILE, certifi)
        self._direct = self._pool(None)
        self._proxies = getproxies()
        self._proxied: dict[str, httpcore.ConnectionPool] = {}
        for scheme in ("http", "https"):  # refuse a proxy it cannot use now, not later
            proxy = self._proxies.get(scheme) or self._proxies.get("all")
            if proxy:
                self._proxied.setdefault(proxy, self._pool(proxy))
        self._urls: dict[str, tuple[httpcore.URL, bytes, httpcore.ConnectionPool]] = {}

    def _pool(self, proxy: str | None) -> httpcore.ConnectionPool:
        common: dict[str, Any] = {
            "ssl_context": self._ssl,
            "max_connections": self._connections,
            "max_keepalive_connections": self._connections,
            "network_backend": self._backend,
        }
        if proxy is None:
            return httpcore.ConnectionPool(**common)
        parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        auth = None
        if parts.username is not None:
            auth = (unquote(parts.username), unquote(parts.password or ""))
        bare = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
        if parts.scheme in ("http", "https"):
            return httpcore.HTTPProxy(proxy_url=bare, proxy_auth=auth, **common)
        if parts.scheme in ("socks5", "socks5h"):
            return httpcore.SOCKSProxy(proxy_url=bare, proxy_auth=auth, **common)
        raise ValueError(f"a proxy of scheme {parts.scheme!r} ({bare}): http, https or socks5")

    def _route(self, url: str) -> tuple[httpcore.URL, bytes, httpcore.ConnectionPool]:
        """The URL as httpcore takes it (parsed by httpx: IDNA hosts, escapes), its
        ``Host`` header, and the pool it goes through; kept per URL."""
        found = self._urls.get(url)
        if found is not None:
            return found
        parsed = httpx.URL(url)
        target = httpcore.URL(
            scheme=parsed.raw_scheme,
            host=parsed.raw_host,
            port=parsed.port,
            target=parsed.raw_path,
        )
        pool = self._direct
        proxy = self._proxies.get(parsed.scheme) or self._proxies.get("all")
        hostport = parsed.host if parsed.port is None else f"{parsed.host}:{parsed.port}"
        if proxy and not proxy_bypass(hostport):  # NO_PROXY
            pool = self._proxied[proxy]
        if len(self._urls) >= 4096:
            self._urls.clear()
        found = self._urls[url] = (target, parsed.netloc, pool)
        return found

    def post(
        self, url: str, body: bytes, headers: dict[str, str], *, timeout: float, cap: int
    ) -> Answer:
        """POST ``body``; the whole exchange within ``timeout`` seconds, the answer's body
        read as sent up to ``cap`` bytes (a longer one is not read: its connection is
        closed). Never raises for the endpoint's failures."""
        target, host, pool = self._route(url)
        limits = {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
        request = httpcore.Request(
            b"POST",
            target,
            headers=[
                (b"host", host),
                *(
                    (name.encode("latin-1"), value.encode("latin-1"))
                    for name, value in headers.items()
                ),
                (b"content-length", b"%d" % len(body)),
            ],
            content=body,
            extensions={"timeout": limits},
        )
        deadline = self._deadline
        deadline.at = time.monotonic() + timeout
        try:
            answer = pool.handle_request(request)
            try:
                head = bytearray()
                for chunk in answer.iter_stream():  # de-chunked, not decoded
                    head += chunk
                    if len(head) > cap:
                        break
            finally:
                answer.close()
        except httpcore.TimeoutException as exc:
            return Answer(
                None, error=f"timeout ({type(exc).__name__}): no whole answer in {timeout:g} s"
            )
        except _FAILURES as exc:
            return Answer(None, error=f"{type(exc).__name__}: {exc}"[:300])
        finally:
            deadline.at = math.inf
        found = {name.lower(): value for name, value in answer.headers}
        retry_after = found.get(b"retry-after")
        encoding = found.get(b"content-encoding", b"identity").strip().lower()
        return Answer(
            answer.status,
            None if retry_after is None else retry_after.decode("latin-1"),
            None if encoding == b"identity" else encoding.decode("latin-1"),
            bytes(head[:cap]),
        )

    def close(self) -> None:
        for pool in (self._direct, *self._proxied.values()):
            pool.close()
