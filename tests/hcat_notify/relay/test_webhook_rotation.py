"""A rotation signs at once: the first request a relay sends after ``rotate-secret``
returned carries both signatures, though the relay's pass would not read the webhooks
again for a minute (it reads what signs before each request)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from standardwebhooks.webhooks import Webhook

from hcat_notify.config import Settings
from hcat_notify.relay import Relay, RelayConfig
from hcat_notify.store import Catalog
from tests.fixtures.webhook_receiver import Receiver


@pytest.mark.parametrize("format_", ["cloudevents", "cloudevents-batch", "hive"])
def test_the_first_request_after_a_rotation_carries_both_signatures(
    hook_settings: Settings, solo_relay: Callable[..., Relay], receiver: Receiver, format_: str
):
    config = RelayConfig(webhook_interval=60.0)
    with Catalog.open(hook_settings) as catalog:
        catalog.create_table("web.clicks", location="/w/clicks", partition_keys=["ds"])
        _, old = catalog.webhooks.add("rot", receiver.url, "web.*", format=format_)
        with solo_relay(catalog, config) as relay:
            catalog.mark_set_done("web.clicks", {"ds": "1"})
            relay.drain()
            (before,) = receiver.ok()
            assert len(before.headers["webhook-signature"].split()) == 1
            _, new = catalog.webhooks.rotate_secret("rot")
            catalog.mark_set_done("web.clicks", {"ds": "2"})
            relay.drain()
            after = receiver.ok()[1:]
    assert len(after) == 1
    (request,) = after
    assert len(request.headers["webhook-signature"].split()) == 2
    for secret in (old, new):  # a receiver with either secret verifies it
        Webhook(secret).verify(request.body, request.headers)


def test_pausing_the_only_webhook_stops_its_requests_at_once(
    hook_settings: Settings, solo_relay: Callable[..., Relay], receiver: Receiver
):
    with Catalog.open(hook_settings) as catalog:
        catalog.create_table("web.clicks", location="/w/clicks", partition_keys=["ds"])
        catalog.webhooks.add("only", receiver.url, "web.*")
        with solo_relay(catalog, RelayConfig(webhook_interval=60.0)) as relay:
            catalog.mark_set_done("web.clicks", {"ds": "1"})
            relay.drain()
            catalog.webhooks.pause("only")  # seen with the next page, not in a minute
            catalog.mark_set_done("web.clicks", {"ds": "2"})
            relay.drain()
            assert relay.webhooks.error is None  # the pass goes on without webhooks
    assert [json.loads(r.body)["subject"] for r in receiver.ok()] == ["web.clicks/ds=1"]
