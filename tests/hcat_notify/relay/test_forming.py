"""A new group's first assignment waits for members still joining, except for a relay
that is alone by design (``relay --once``); on SQLite and PostgreSQL."""

from __future__ import annotations

import logging

import pytest

from hcat_notify.config import Settings
from hcat_notify.relay import Relay, RelayConfig
from hcat_notify.store import Catalog


def test_relay_once_takes_every_bucket_without_waiting_for_members(
    settings: Settings, catalog: Catalog, caplog: pytest.LogCaptureFixture
):
    with (
        caplog.at_level(logging.INFO, logger="hcat_notify.relay.member"),
        Relay(settings, catalog=catalog, config=RelayConfig(heartbeat_interval=1.0)) as relay,
    ):
        assert relay.drain() == 0  # nothing pending: the broker is never asked
        owned = len(catalog.group.owned(relay.member_id))
    assert owned == catalog.group.info().bucket_count
    assert "group forming" not in caplog.text
    assert "relay buckets acquired" in caplog.text
