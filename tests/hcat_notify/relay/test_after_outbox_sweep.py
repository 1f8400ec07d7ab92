"""After the outbox's retention deleted what was published and delivered, a relay
(a new member, reading its buckets from where they were published) publishes and
delivers what comes next, once each, in order (issue 31)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from hcat_notify.config import Settings
from hcat_notify.relay import Relay
from hcat_notify.store import Catalog
from tests.fakes.broker import FakeBroker
from tests.fixtures.webhook_receiver import Receiver, event_ids


class _Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_a_relay_publishes_and_delivers_what_follows_a_sweep(
    hook_settings: Settings,
    solo_relay: Callable[..., Relay],
    receiver: Receiver,
    broker: FakeBroker,
):
    clock = _Clock()
    with Catalog.open(hook_settings) as opened:
        catalog = Catalog(opened._engine, hook_settings, clock=clock)
        catalog.create_table(
            "web.clicks", location="/w/clicks", partition_keys=["ds"], retention=timedelta(hours=1)
        )
        catalog.webhooks.add("all", receiver.url, "web.*", from_event=1)
        old = [catalog.mark_set_done("web.clicks", {"ds": str(n)}) for n in range(3)]
        with solo_relay(catalog) as relay:
            relay.drain()
        clock.now += timedelta(days=2)
        swept = catalog.outbox.sweep(timedelta(days=1))
        assert swept.deleted == 1 + len(old)  # and the CREATE_TABLE
        assert catalog.outbox.events() == []
        new = [catalog.mark_set_done("web.clicks", {"ds": str(n)}) for n in range(3, 5)]
        with solo_relay(catalog) as relay:
            relay.drain()
        published = [e for e in broker.delivered_ids() if e in new or e in old]
        assert published == [*old, *new]  # once each, in order
        delivered = [e for request in receiver.ok() for e in event_ids(request)]
        assert [e for e in delivered if e in new or e in old] == [*old, *new]
        assert catalog.outbox.catch_up(["web.clicks"], cursor=f"hcat.web.clicks:{old[-1]}")
