"""Webhooks as values: names, URLs, table patterns, event kinds, formats, secrets and the
Standard Webhooks signature (docs/webhooks.md).

The signature follows the Standard Webhooks specification: the headers ``webhook-id``,
``webhook-timestamp`` (unix seconds) and ``webhook-signature``, a space-separated list of
``v1,<base64 HMAC-SHA256 of "id.timestamp.body">``, keyed by the base64-decoded part of a
``whsec_`` secret; during a rotation one signature per secret.
"""

from __future__ import annotations

import base64
import fnmatch
import functools
import hashlib
import hmac
import ipaddress
import random
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from enum import StrEnum
from urllib.parse import urlsplit

from hcat_notify.errors import InvalidInputError
from hcat_notify.model.cloudevents import CLOUDEVENTS_BATCH_JSON, CLOUDEVENTS_JSON
from hcat_notify.model.events import EventType

__all__ = [
    "HIVE_JSON",
    "SECRET_PREFIX",
    "TablePatterns",
    "WebhookFormat",
    "WebhookState",
    "backoff_delay",
    "check_webhook_url",
    "new_secret",
    "parse_event_kinds",
    "parse_retry_after",
    "sign",
    "signature_headers",
    "validate_webhook_name",
]

HIVE_JSON = "application/json"
"""The ``content-type`` of a request of the ``hive`` format (the broker's body)."""
SECRET_PREFIX = "whsec_"  # noqa: S105 - the spec's prefix, not a secret
SECRET_BYTES = 24
MAX_NAME = 255
MAX_URL = 2048
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_PATTERN_PART = re.compile(r"[A-Za-z0-9_*]+")


class WebhookFormat(StrEnum):
    """What a webhook request carries."""

    CLOUDEVENTS = "cloudevents"  # one CloudEvent, structured mode (application/cloudevents+json)
    CLOUDEVENTS_BATCH = "cloudevents-batch"  # a JSON array (application/cloudevents-batch+json)
    HIVE = "hive"  # the Hive body as it goes on the broker, HCAT_* as HTTP headers

    @property
    def batched(self) -> bool:
        """Whether a request carries several events (else one request per event)."""
        return self is WebhookFormat.CLOUDEVENTS_BATCH

    @property
    def content_type(self) -> str:
        """The ``content-type`` of its requests."""
        if self is WebhookFormat.CLOUDEVENTS:
            return CLOUDEVENTS_JSON
        return CLOUDEVENTS_BATCH_JSON if self.batched else HIVE_JSON

    @classmethod
    def parse(cls, value: WebhookFormat | str) -> WebhookFormat:
        """The format named ``value``.

        Raises:
            InvalidInputError: no format has that name (the message lists them).
        """
        try:
            return cls(value)
        except ValueError:
            known = ", ".join(item.value for item in cls)
            raise InvalidInputError(f"unknown webhook format {value!r} ({known})") from None


class WebhookState(StrEnum):
    """Whether a webhook gets events."""

    ACTIVE = "active"
    PAUSED = "paused"  # by an operator (webhooks pause): resumed by webhooks resume
    DISABLED = "disabled"  # the endpoint answered 410 Gone: resumed by webhooks resume


def validate_webhook_name(name: str) -> str:
    """``name`` if usable as a webhook's name: letters, digits, ``.``, ``_``, ``-``.

    Raises:
        InvalidInputError: empty, too long, or other characters.
    """
    if not isinstance(name, str) or len(name) > MAX_NAME or not _NAME.fullmatch(name):
        raise InvalidInputError(
            f"invalid webhook name {name!r}: 1 to {MAX_NAME} letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def check_webhook_url(url: str, allowed_http_hosts: Iterable[str]) -> str:
    """``url`` if a webhook may be delivered to it: ``https://host[:port]/...``, or
    ``http://`` to a host the operator allows (``webhook_allow``).

    Raises:
        InvalidInputError: not an absolute http(s) URL with a host, credentials or a
            fragment in it, or plain HTTP to a host not allowed.
    """
    if not isinstance(url, str) or not url or len(url) > MAX_URL or not url.isprintable():
        raise InvalidInputError(f"invalid webhook URL {url!r}: an https:// URL")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidInputError(f"invalid webhook URL {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInputError(f"invalid webhook URL {url!r}: an https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise InvalidInputError(
            f"invalid webhook URL {url!r}: no credentials in it (requests are signed)"
        )
    if parts.fragment or " " in url:
        raise InvalidInputError(f"invalid webhook URL {url!r}: no fragment or spaces")
    if port == 0:
        raise InvalidInputError(f"invalid webhook URL {url!r}: port 0")
    host = parts.hostname.lower()
    if parts.scheme == "http" and host not in {h.lower() for h in allowed_http_hosts}:
        hint = " (loopback too must be listed)" if _loopback(host) else ""
        raise InvalidInputError(
            f"plain HTTP to {host} is not allowed: use https://, or list the host in "
            f"HCAT_NOTIFY_WEBHOOK_ALLOW{hint}"
        )
    return url


@dataclass(frozen=True)
class TablePatterns:
    """``db.table`` patterns (``*`` matches any run of characters), lower-cased."""

    patterns: tuple[str, ...]

    @classmethod
    def parse(cls, text: str | Sequence[str]) -> TablePatterns:
        """Patterns from ``'web.*,sales.orders'`` (or a list of them).

        Raises:
            InvalidInputError: none given, or one that is not ``db.table`` of letters,
                digits, ``_`` and ``*``.
        """
        items = text.split(",") if isinstance(text, str) else list(text)
        patterns = tuple(dict.fromkeys(item.strip().lower() for item in items if item.strip()))
        if not patterns:
            raise InvalidInputError(
                "give the tables as db.table patterns, e.g. 'web.*,sales.orders'"
            )
        for pattern in patterns:
            db, dot, table = pattern.partition(".")
            if not dot or not _PATTERN_PART.fullmatch(db) or not _PATTERN_PART.fullmatch(table):
                raise InvalidInputError(
                    f"malformed table pattern {pattern!r}: db.table, with * for any characters"
                )
        return cls(patterns)

    @functools.cached_property
    def _regex(self) -> re.Pattern[str]:
        return re.compile("|".join(fnmatch.translate(pattern) for pattern in self.patterns))

    def matches(self, table: str) -> bool:
        """Whether ``table`` (``db.table``) matches any pattern."""
        return self._regex.match(table.lower()) is not None


def parse_event_kinds(text: str | Sequence[str] | None) -> tuple[EventType, ...] | None:
    """Event kinds from ``'MARK_SET_DONE,ADD_PARTITION'`` (None or empty: every kind).

    Raises:
        InvalidInputError: an unknown kind (the message lists the known ones).
    """
    if text is None:
        return None
    items = text.split(",") if isinstance(text, str) else list(text)
    names = [item.strip().upper() for item in items if item.strip()]
    if not names:
        return None
    kinds = []
    for name in dict.fromkeys(names):
        try:
            kinds.append(EventType(name))
        except ValueError:
            known = ", ".join(kind.value for kind in EventType)
            raise InvalidInputError(f"unknown event kind {name!r} (known: {known})") from None
    return tuple(kinds)


def new_secret() -> str:
    """A new signing secret: ``whsec_`` and the base64 of 24 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<signature>``: the Standard Webhooks signature of one request."""
    payload = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), payload, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signature_headers(
    secrets_: Sequence[str], message_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` headers, one
    signature per secret (the current one first)."""
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(sign(s, message_id, timestamp, body) for s in secrets_),
    }


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date); None when
    absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


def backoff_delay(
    attempts: int,
    *,
    initial: float,
    maximum: float,
    retry_after: float | None = None,
    rng: random.Random | None = None,
) -> float:
    """Seconds before the next attempt after ``attempts`` failures: exponential with full
    jitter between half and all of it, at most ``maximum``; never sooner than the
    endpoint's ``Retry-After``."""
    ceiling = min(maximum, initial * 2.0 ** max(0, min(attempts - 1, 30)))
    delay = ceiling * (0.5 + 0.5 * (rng or random).random())
    if retry_after is not None:
        delay = max(delay, min(retry_after, maximum))
    return delay
