"""How a relay POSTs to webhook endpoints: the requests a batch of events makes (the
format, the Standard Webhooks signature) and the poster that sends them (no redirects
followed, one deadline for the whole of each request, answers read as sent up to a
small cap, never decoded), behind a seam a unit test fills with an in-memory double."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

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
"""Bytes of an endpoint's answer body read, as sent (kept for the error it reports); the
rest is not read (its connection is closed)."""
USER_AGENT = "hcat-notify-webhooks"
_DEFAULT_HEADERS = {
    "accept": "*/*",
    "accept-encoding": "identity",
    "connection": "keep-alive",
    "user-agent": USER_AGENT,
}
"""What each request carries besides its own headers: ``identity`` asks for an answer
not compressed (one that is anyway is not decoded: a few hundred bytes of nested gzip
inflate to gigabytes)."""
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
    """What an endpoint answered (``status`` None: no answer: timeout, connection;
    ``refused``: nothing was sent, this relay's settings do not allow the URL)."""

    status: int | None
    retry_after: str | None = None
    error: str | None = None
    refused: bool = False

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
    """Posts over httpcore, the transport under httpx
    (:class:`~hcat_notify.relay.webhook_transport.Transport`): no redirects followed,
    the whole of each request (connect to the answer's last byte read) within
    ``timeout``, its answer read as sent (asked for ``identity``, never decoded) up to
    :data:`ANSWER_CAP`, ``connections`` kept alive; through the proxy the environment
    names (``HTTPS_PROXY`` and the like), if any.

    Raises:
        ConfigError: httpx is not installed (the ``[webhooks]`` extra), or the
            environment names a proxy of a scheme it cannot use.
    """

    def __init__(self, *, timeout: float, connections: int) -> None:
        try:
            from hcat_notify.relay.webhook_transport import Transport
        except ImportError as exc:
            raise ConfigError(_MISSING_EXTRA.format(error=exc)) from None
        try:
            self._transport = Transport(connections=connections)
        except ValueError as exc:
            raise ConfigError(f"webhook delivery: {exc}") from None
        self._timeout = timeout

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> PostResult:
        answer = self._transport.post(
            url, body, {**_DEFAULT_HEADERS, **headers}, timeout=self._timeout, cap=ANSWER_CAP
        )
        status = answer.status
        if status is None:
            return PostResult(None, error=answer.error)
        if 200 <= status < 300:
            return PostResult(status)
        reason = f"HTTP {status}"
        if answer.encoding is not None:
            reason += f" (a body in content-encoding {answer.encoding!r}, not decoded)"
        else:
            text = answer.head.decode("utf-8", "replace").strip().replace("\n", " ")
            reason += f": {text[:200]}" if text else ""
        if 300 <= status < 400:
            reason += " (redirects are not followed)"
        return PostResult(status, answer.retry_after, reason)

    def close(self) -> None:
        self._transport.close()
