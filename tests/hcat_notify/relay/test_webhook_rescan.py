"""A webhook added (or changed) has the pass read the outbox again from where that
webhook starts, not from where the oldest webhook does: with many webhooks and a long
history, each added one would otherwise read the history again."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import cast

from hcat_notify.config import Settings
from hcat_notify.relay import Relay, RelayConfig
from hcat_notify.store import Catalog
from tests.fixtures.counted_webhooks import CountedWebhooks
from tests.fixtures.webhook_receiver import Receiver, event_ids


def test_a_webhook_added_from_now_reads_no_history_again(
    hook_settings: Settings, solo_relay: Callable[..., Relay], receiver: Receiver
):
    with Catalog.open(hook_settings) as catalog:
        catalog.create_table("web.clicks", location="/w/clicks", partition_keys=["ds"])
        first = catalog.outbox.last_event_id() + 1
        catalog.webhooks.add("old", receiver.url + "/old", "web.*", from_event=first)
        history = [catalog.mark_set_done("web.clicks", {"ds": str(n)}) for n in range(40)]
        counted = CountedWebhooks(catalog, "page", lambda answer: len(answer[0]))
        with solo_relay(
            cast(Catalog, counted), RelayConfig(webhook_interval=60.0, batch_size=10)
        ) as relay:
            relay.drain()
            assert counted.total >= len(history)  # the old webhook's history, once
            read = counted.total
            for n in range(3):
                catalog.webhooks.add(f"new{n}", receiver.url + f"/new{n}", "web.*")
                latest = catalog.mark_set_done("web.clicks", {"ds": f"new{n}"})
                relay.drain()
            # each added webhook's pass read what came after it, not the history
            assert counted.total - read <= 3 * 2, counted.total - read
    got: dict[str, list[int]] = {}
    for request in receiver.ok():
        got.setdefault(request.path, []).extend(event_ids(request))
    assert got["/hook/old"] == [*history, *got["/hook/old"][len(history) :]]
    assert len(got["/hook/old"]) == len(set(got["/hook/old"])) == len(history) + 3
    assert got["/hook/new2"] == [latest]
    assert json.loads(receiver.ok()[-1].body)["id"] == str(latest)
