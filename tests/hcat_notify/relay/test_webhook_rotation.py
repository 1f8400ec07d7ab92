"""A rotation signs at once: the first request a relay sends after ``rotate-secret``
returned carries both signatures, though the relay's pass would not read the webhooks
again for a minute (it reads what signs before each request)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from standardwebhooks.webhooks import Webhook

from hcat_notify.config import Settings
from hcat_notify.relay import Relay, RelayConfig
from hcat_notify.store import Catalog
from tests.fakes.broker import FakeBroker
from tests.fixtures.webhook_receiver import Receiver


@pytest.mark.parametrize("format_", ["cloudevents", "cloudevents-batch", "hive"])
def test_the_first_request_after_a_rotation_carries_both_signatures(
    settings: Settings, broker: FakeBroker, format_: str
):
    settings = dataclasses.replace(settings, webhook_allow=("127.0.0.1",), webhook_timeout=5.0)
    config = RelayConfig(webhook_interval=60.0)
    receiver = Receiver()
    try:
        with Catalog.open(settings) as catalog:
            catalog.create_table("web.clicks", location="/w/clicks", partition_keys=["ds"])
            _, old = catalog.webhooks.add("rot", receiver.url, "web.*", format=format_)
            with Relay(
                settings,
                config=config,
                catalog=catalog,
                connection_factory=broker.connection,
                member_id="solo",
            ) as relay:
                catalog.mark_set_done("web.clicks", {"ds": "1"})
                relay.drain()
                (before,) = receiver.ok()
                assert len(before.headers["webhook-signature"].split()) == 1
                _, new = catalog.webhooks.rotate_secret("rot")
                catalog.mark_set_done("web.clicks", {"ds": "2"})
                relay.drain()
                after = receiver.ok()[1:]
    finally:
        receiver.close()
    assert len(after) == 1
    (request,) = after
    assert len(request.headers["webhook-signature"].split()) == 2
    for secret in (old, new):  # a receiver with either secret verifies it
        Webhook(secret).verify(request.body, request.headers)


def test_pausing_the_only_webhook_stops_its_requests_at_once(
    settings: Settings, broker: FakeBroker
):
    settings = dataclasses.replace(settings, webhook_allow=("127.0.0.1",), webhook_timeout=5.0)
    receiver = Receiver()
    try:
        with Catalog.open(settings) as catalog:
            catalog.create_table("web.clicks", location="/w/clicks", partition_keys=["ds"])
            catalog.webhooks.add("only", receiver.url, "web.*")
            with Relay(
                settings,
                config=RelayConfig(webhook_interval=60.0),
                catalog=catalog,
                connection_factory=broker.connection,
                member_id="solo",
            ) as relay:
                catalog.mark_set_done("web.clicks", {"ds": "1"})
                relay.drain()
                catalog.webhooks.pause("only")  # seen with the next page, not in a minute
                catalog.mark_set_done("web.clicks", {"ds": "2"})
                relay.drain()
                assert relay.webhooks.error is None  # the pass goes on without webhooks
    finally:
        receiver.close()
    assert [json.loads(r.body)["subject"] for r in receiver.ok()] == ["web.clicks/ds=1"]
