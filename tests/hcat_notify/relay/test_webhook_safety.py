"""The safety rules of delivery as a relay keeps them (docs/webhooks.md, "Safety"): a
plain-HTTP URL its own allow list does not name is not sent to (the lane parks with the
reason, nothing dropped); an answer dripped past ``webhook_timeout`` is a timeout,
recorded and retried, and the pass (``relay --once`` here) does not wait on it."""

from __future__ import annotations

import dataclasses
import time

from hcat_notify.config import Settings
from hcat_notify.relay import Relay
from hcat_notify.store import Catalog
from tests.fakes.broker import FakeBroker
from tests.fixtures.webhook_receiver import Receiver, event_ids


def test_plain_http_to_a_host_this_relay_does_not_allow_parks_with_the_reason(
    hook_settings: Settings, broker: FakeBroker, receiver: Receiver
):
    strict = dataclasses.replace(hook_settings, webhook_allow=())
    with Catalog.open(hook_settings) as catalog:  # registered where 127.0.0.1 is allowed
        catalog.create_table("web.clicks", location="/w/clicks", partition_keys=["ds"])
        catalog.webhooks.add("plain", receiver.url, "web.*")
        sent = [catalog.mark_set_done("web.clicks", {"ds": str(n)}) for n in range(2)]
        with Relay(
            strict, catalog=catalog, connection_factory=broker.connection, member_id="solo"
        ) as relay:
            relay.drain()
            assert relay.webhooks.stats.requests == 0
        assert receiver.received == []
        (topic,) = catalog.webhooks.topics("plain")
        ((name, parked),) = catalog.webhooks.parked()  # what status lists
        assert name == "plain"
        assert parked == topic
        assert topic.parked_at is not None
        assert topic.last_event_id < sent[0]  # nothing delivered, nothing given up
        assert topic.last_error is not None
        assert topic.last_error.startswith("not sent, refused by this relay's settings: ")
        assert "plain HTTP to 127.0.0.1 is not allowed" in topic.last_error
        # released, a relay that allows the host delivers every event
        catalog.webhooks.retry_parked("plain")
        with Relay(
            hook_settings, catalog=catalog, connection_factory=broker.connection, member_id="solo"
        ) as relay:
            relay.drain()
    assert [event_id for request in receiver.ok() for event_id in event_ids(request)] == sent


def test_an_answer_dripped_past_the_timeout_is_a_timeout_recorded_for_a_retry(
    hook_settings: Settings, broker: FakeBroker, receiver: Receiver
):
    # each read gets a piece within the timeout; the pass used to wait on it for the
    # 4 KiB of the cap (5 s here; for ever at a byte every 2 s), then record a 2xx
    quick = dataclasses.replace(hook_settings, webhook_timeout=0.5)
    receiver.answer = lambda _n: "drip-body"
    with Catalog.open(quick) as catalog:
        catalog.create_table("web.clicks", location="/w/clicks", partition_keys=["ds"])
        catalog.webhooks.add("drip", receiver.url, "web.*")
        catalog.mark_set_done("web.clicks", {"ds": "1"})
        with Relay(
            quick, catalog=catalog, connection_factory=broker.connection, member_id="solo"
        ) as relay:
            relay.drain()  # returns: the request was given up at its deadline
        assert receiver.hung_up.wait(10)  # the receiver saw the connection closed
        (topic,) = catalog.webhooks.topics("drip")
    assert len(receiver.received) == 1
    assert topic.last_error is not None
    assert topic.last_error.startswith("timeout"), topic.last_error
    assert topic.attempts == 1
    assert topic.parked_at is None
    assert topic.retry_at is not None
    assert topic.retry_at > time.time() - 1  # tried again after its backoff
