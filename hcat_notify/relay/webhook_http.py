"""How a relay POSTs to webhook endpoints: the requests a batch of events makes (the
format, the Standard Webhooks signature) and the transport that sends them (httpx, no
redirects followed, a timeout per request, answers read up to a small cap), behind a
seam a unit test fills with an in-memory double."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.request import getproxies

from hcat_notify.errors import ConfigError
from hcat_notify.model.cloudevents import dump_batch, dump_cloudevent
from hcat_notify.model.webhooks import HIVE_JSON, WebhookFormat, signature_headers
from hcat_notify.store.records import OutboxEvent
from hcat_notify.store.webhooks import WebhookTarget

__all__ = [
    "ANSWER_CAP",
    "HttpxPoster",
    "PostResult",
    "Poster",
    "WebhookRequest",
    "requests_for",
]

logger = logging.getLogger(__name__)

ANSWER_CAP = 4096
"""Bytes of an endpoint's answer read (kept for the error it reports); the rest is not."""
USER_AGENT = "hcat-notify-webhooks"
_DEFAULT_HEADERS = {
    "accept": "*/*",
    "accept-encoding": "gzip, deflate",
    "connection": "keep-alive",
    "user-agent": USER_AGENT,
}
"""What an ``httpx.Client`` adds to each request (its ``accept-encoding`` names brotli
and zstd too where their decoders are installed)."""
_MISSING_EXTRA = (
    "webhook delivery needs the [webhooks] extra: pip install 'hcat-notify[webhooks]' ({error})"
)


@dataclass(frozen=True)
class WebhookRequest:
    """One POST: its body and headers, and the last event it carries."""

    message_id: str
    body: bytes
    headers: dict[str, str]
    last_event_id: int
    events: int


@dataclass(frozen=True)
class PostResult:
    """What an endpoint answered (``status`` None: no answer: timeout, connection)."""

    status: int | None
    retry_after: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class Poster(Protocol):
    """Sends one request to a URL; never raises for the endpoint's failures."""

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> PostResult: ...

    def close(self) -> None: ...


def requests_for(
    target: WebhookTarget, events: Sequence[OutboxEvent], *, source: str
) -> list[WebhookRequest]:
    """The requests that carry ``events`` to ``target``, signed: one CloudEvents batch
    (``cloudevents-batch``), or one request per event: a structured-mode CloudEvent
    (``cloudevents``), or the Hive body with ``HCAT_*`` headers (``hive``)."""
    now = int(time.time())
    found: list[WebhookRequest] = []
    form = target.info.format
    if form is WebhookFormat.CLOUDEVENTS_BATCH:
        body = dump_batch(events, source=source)
        first, last = events[0].event_id, events[-1].event_id
        message_id = str(first) if first == last else f"{first}-{last}"
        if len({event.topic for event in events}) > 1:  # which topics' events it holds too
            ids = ",".join(str(event.event_id) for event in events).encode()
            message_id += "-" + hashlib.blake2s(ids, digest_size=6).hexdigest()
        headers = {"content-type": form.content_type}
        headers.update(signature_headers(target.secrets, message_id, now, body))
        return [WebhookRequest(message_id, body, headers, last, len(events))]
    for event in events:
        message_id = str(event.event_id)
        if form is WebhookFormat.CLOUDEVENTS:
            body = dump_cloudevent(event, source=source)
            headers = {"content-type": form.content_type}
        else:
            body = event.body.encode()
            headers = {"content-type": HIVE_JSON, **{k: str(v) for k, v in event.headers.items()}}
        headers.update(signature_headers(target.secrets, message_id, now, body))
        found.append(WebhookRequest(message_id, body, headers, event.event_id, 1))
    return found


class HttpxPoster:
    """Posts with httpx: no redirects, ``timeout`` per request, ``connections`` kept
    alive. Each request goes straight to one pooled ``httpx.HTTPTransport`` (what an
    ``httpx.Client`` sends through, without the client's per-request steps: URL
    merging, cookies, auth and redirect hooks, a third of a 100-event request's CPU);
    where the environment names a proxy (``HTTPS_PROXY`` and the like), through an
    ``httpx.Client`` that honours it, as before.

    Raises:
        ConfigError: httpx is not installed (the ``[webhooks]`` extra).
    """

    def __init__(self, *, timeout: float, connections: int) -> None:
        try:
            import httpx
        except ImportError as exc:
            raise ConfigError(_MISSING_EXTRA.format(error=exc)) from None
        self._httpx = httpx
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        self._client: Any = None
        self._transport: Any = None
        if getproxies():
            self._client = httpx.Client(
                timeout=httpx.Timeout(timeout),
                follow_redirects=False,
                limits=limits,
                headers={"user-agent": USER_AGENT},
            )
        else:
            self._transport = httpx.HTTPTransport(limits=limits)
        self._extensions = {"timeout": httpx.Timeout(timeout).as_dict()}
        self._urls: dict[str, Any] = {}  # url -> httpx.URL, parsed once

    @contextmanager
    def _answer(self, url: str, body: bytes, headers: dict[str, str]) -> Iterator[Any]:
        if self._client is not None:
            with self._client.stream("POST", url, content=body, headers=headers) as answer:
                yield answer
            return
        httpx = self._httpx
        parsed = self._urls.get(url)
        if parsed is None:
            if len(self._urls) >= 4096:
                self._urls.clear()
            parsed = self._urls[url] = httpx.URL(url)
        request = httpx.Request(
            "POST",
            parsed,
            content=body,
            headers={**_DEFAULT_HEADERS, **headers},
            extensions=self._extensions,
        )
        answer = self._transport.handle_request(request)
        try:
            yield answer
        finally:
            answer.close()

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> PostResult:
        httpx = self._httpx
        try:
            with self._answer(url, body, headers) as answer:
                head = b""
                for chunk in answer.iter_bytes():
                    head += chunk
                    if len(head) >= ANSWER_CAP:
                        break
                status = answer.status_code
                retry_after = answer.headers.get("retry-after")
        except httpx.TimeoutException as exc:
            return PostResult(None, error=f"timeout ({type(exc).__name__})")
        except httpx.HTTPError as exc:
            return PostResult(None, error=f"{type(exc).__name__}: {exc}"[:300])
        if 200 <= status < 300:
            return PostResult(status)
        text = head[:ANSWER_CAP].decode("utf-8", "replace").strip().replace("\n", " ")
        reason = f"HTTP {status}" + (f": {text[:200]}" if text else "")
        if 300 <= status < 400:
            reason += " (redirects are not followed)"
        return PostResult(status, retry_after, reason)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        if self._transport is not None:
            self._transport.close()
