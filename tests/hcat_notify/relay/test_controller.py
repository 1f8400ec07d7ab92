"""A relay's membership: losing the controller role is said; a stale fenced write does
not drop a bucket held at a newer epoch."""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from hcat_notify.config import Settings
from hcat_notify.relay import Relay, RelayConfig
from hcat_notify.store import Catalog


@contextmanager
def joined_relay(
    settings: Settings, catalog: Catalog, caplog: pytest.LogCaptureFixture, config: RelayConfig
) -> Iterator[Relay]:
    """A relay that has joined the group (nothing pending: no broker is asked), its
    membership's log captured."""
    with (
        caplog.at_level(logging.INFO, logger="hcat_notify.relay.member"),
        Relay(settings, catalog=catalog, config=config) as relay,
    ):
        assert relay.drain() == 0
        yield relay


def test_losing_the_controller_role_to_another_member_is_logged(
    settings: Settings, catalog: Catalog, caplog: pytest.LogCaptureFixture
):
    config = RelayConfig(heartbeat_interval=0.1, session_timeout=0.6)
    with joined_relay(settings, catalog, caplog, config) as relay:
        deadline = time.monotonic() + 30
        while catalog.group.info().controller_id != relay.member_id:
            assert time.monotonic() < deadline, "the relay never took the controller role"
            time.sleep(0.02)
        # another member's claim, as the catalog records it (one that took over while
        # this one's lease had lapsed, e.g. a paused process)
        db = sqlite3.connect(settings.database_url.removeprefix("sqlite:///"))
        with db:
            db.execute(
                "UPDATE hcat_relay_group SET controller_id = 'intruder', "
                "controller_epoch = controller_epoch + 1, controller_expires = ?, "
                "version = version + 1 WHERE id = 1",
                (catalog.group.info().now + 600,),
            )
        db.close()
        while "relay controller lost" not in caplog.text:
            assert time.monotonic() < deadline, "the lost role was never logged"
            time.sleep(0.02)
    assert f"relay controller lost member={relay.member_id}" in caplog.text
    assert "intruder controls the group now" in caplog.text


def test_a_stale_fenced_write_does_not_drop_a_bucket_held_at_a_newer_epoch(
    settings: Settings, catalog: Catalog, caplog: pytest.LogCaptureFixture
):
    config = RelayConfig(heartbeat_interval=30.0, session_timeout=60.0)
    with joined_relay(settings, catalog, caplog, config) as relay:
        member = relay.membership
        member.stop()  # no refresh from the catalog between what is done and checked here
        owned = member.owned()
        first, second = sorted(owned)[:2]
        # a write fenced at an epoch older than the one held now: the bucket stays
        member.lose({first: owned[first].epoch - 1})
        assert first in member.owned()
        assert "relay bucket lost" not in caplog.text
        # fenced at the epoch held: it is gone, and said so
        member.lose({second: owned[second].epoch})
        assert second not in member.owned()
        assert f"relay bucket lost bucket={second} " in caplog.text
