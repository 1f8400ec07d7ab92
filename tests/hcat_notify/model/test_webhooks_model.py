"""Webhook values: the signature agrees with the independent ``standardwebhooks``
package, secrets, URL and pattern checks, back-off and Retry-After."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from hcat_notify.errors import InvalidInputError
from hcat_notify.model.events import EventType
from hcat_notify.model.webhooks import (
    TablePatterns,
    backoff_delay,
    check_webhook_url,
    new_secret,
    parse_event_kinds,
    parse_retry_after,
    sign,
    signature_headers,
)


def test_signatures_verify_with_standardwebhooks_and_rotation_signs_twice():
    old, new = new_secret(), new_secret()
    assert old != new
    body = b'[{"id":"7"}]'
    now = int(time.time())
    headers = signature_headers([new, old], "7", now, body)
    assert headers["webhook-signature"].count("v1,") == 2
    for secret in (old, new):  # a receiver with either secret verifies
        Webhook(secret).verify(body, headers)
    stamp = datetime.fromtimestamp(now, UTC)
    assert Webhook(new).sign("7", stamp, body.decode()) == sign(new, "7", now, body)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new).verify(body + b" ", headers)


def test_urls():
    assert check_webhook_url("https://h.example/x?a=1", ()) == "https://h.example/x?a=1"
    assert check_webhook_url("http://127.0.0.1:80/x", ["127.0.0.1"])
    for bad, message in [
        ("http://h.example/x", "plain HTTP"),
        ("https:///x", "with a host"),
        ("https://h.example/x#f", "no fragment"),
        ("https://h.example:99999/x", "invalid webhook URL"),
        ("mailto:a@b", "https:// URL"),
    ]:
        with pytest.raises(InvalidInputError, match=message):
            check_webhook_url(bad, ())


def test_patterns_and_kinds():
    patterns = TablePatterns.parse(" Web.* , sales.orders ,")
    assert patterns.patterns == ("web.*", "sales.orders")
    assert patterns.matches("web.clicks")
    assert patterns.matches("SALES.orders")
    assert not patterns.matches("sales.order_lines")
    assert parse_event_kinds("mark_set_done, ADD_PARTITION") == (
        EventType.MARK_SET_DONE,
        EventType.ADD_PARTITION,
    )
    assert parse_event_kinds(None) is None
    with pytest.raises(InvalidInputError, match="give the tables"):
        TablePatterns.parse(" , ")


def test_backoff_grows_with_jitter_and_honours_retry_after():
    rng = random.Random(1)
    delays = [backoff_delay(n, initial=1, maximum=60, rng=rng) for n in range(1, 10)]
    for n, delay in enumerate(delays, start=1):
        ceiling = min(60, 2 ** (n - 1))
        assert ceiling / 2 <= delay <= ceiling
    assert backoff_delay(1, initial=1, maximum=60, retry_after=30, rng=rng) >= 30
    assert backoff_delay(1, initial=1, maximum=60, retry_after=3600, rng=rng) == 60
    assert parse_retry_after("5", 0) == 5
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1445412470) == 10
    assert parse_retry_after("soon", 0) is None
