"""The relay group's status, the one judgment of who is alive: each member by the session
timeout it joined with, by the database's clock; on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from pathlib import Path

from hcat_notify.config import load_settings
from hcat_notify.relay import RelayConfig
from hcat_notify.store import Catalog
from hcat_notify.store.group import MemberReport
from tests.revisions import catalog_at


def _join(catalog: Catalog, member_id: str, session_timeout: float) -> None:
    catalog.group.join(MemberReport(member_id, "host", 1), session_timeout=session_timeout)


def test_each_member_is_alive_by_its_own_session_timeout(catalog: Catalog):
    _join(catalog, "patient", 600)
    _join(catalog, "hasty", 0.2)
    time.sleep(0.3)  # both silent since: longer than hasty's timeout, far below patient's
    status = catalog.group.status()
    assert [(m.member_id, m.session_timeout, m.alive) for m in status.members] == [
        ("hasty", 0.2, False),
        ("patient", 600, True),
    ]
    assert [m.member_id for m in status.live] == ["patient"]
    assert [m.member_id for m in status.silent] == ["hasty"]
    assert all(m.heartbeat_age >= 0.25 for m in status.members)
    # the members' own list judges them the same way
    assert [(m.member_id, m.alive) for m in catalog.group.members()] == [
        ("hasty", False),
        ("patient", True),
    ]
    # a reader may judge every member by one timeout of its own instead
    assert [m.alive for m in catalog.group.status(session_timeout=60).members] == [True, True]
    assert [m.alive for m in catalog.group.status(session_timeout=0.25).members] == [
        False,
        False,
    ]
    # a heartbeat that does not name a timeout keeps the one the member joined with
    catalog.group.heartbeat(MemberReport("hasty", "host", 1))
    assert [m.session_timeout for m in catalog.group.status().members] == [0.2, 600]


def test_a_heartbeat_may_record_the_timeout_and_a_new_row_has_the_relays_default(
    catalog: Catalog,
):
    catalog.group.heartbeat(MemberReport("old", "host", 1))  # as before timeouts were kept
    catalog.group.heartbeat(MemberReport("new", "host", 1), session_timeout=7.5)
    timeouts = {m.member_id: m.session_timeout for m in catalog.group.status().members}
    assert timeouts == {"new": 7.5, "old": RelayConfig().session_timeout}


def test_the_status_names_the_controller_the_owners_and_the_unassigned_buckets(
    catalog: Catalog,
):
    empty = catalog.group.status()
    assert (empty.members, empty.live, empty.owners()) == ((), [], {})
    assert empty.unassigned == list(range(256))
    _join(catalog, "a", 120)  # alive throughout, however loaded the machine
    _join(catalog, "b", 120)
    epoch = catalog.group.claim_controller("a", ttl=120)
    assert epoch is not None
    assert catalog.group.assign("a", epoch, {0: "a", 2: "a", 5: "b"})
    status = catalog.group.status()
    assert (status.info.controller_id, status.info.controller_epoch) == ("a", epoch)
    assert status.info.controller_alive
    assert status.info.bucket_count == 256 == len(status.buckets)
    assert status.owners() == {"a": [0, 2], "b": [5]}
    assert status.unassigned == [b for b in range(256) if b not in (0, 2, 5)]
    assert [m.member_id for m in status.live] == ["a", "b"]
    # ages are by the database's clock, which the status carries
    assert all(m.heartbeat_age >= 0 for m in status.members)
    assert abs(status.info.now - time.time()) < 60


def test_members_of_a_catalog_migrated_from_0010_get_the_default_timeout(
    empty_db_url: str, tmp_path: Path
):
    """A member row written before timeouts were recorded is judged by the default."""
    catalog_at(
        empty_db_url,
        "0010",
        "INSERT INTO hcat_relay_members (member_id, host, pid, started_at, heartbeat_at,"
        " events_per_second, backlog, topics, bucket_loads, oldest_unpublished, leaving)"
        " VALUES ('r1', 'host', 1, 0, 0, 0, 0, 0, '{}', NULL, false)",
    )
    with Catalog.open(load_settings(home=tmp_path, db_url=empty_db_url), upgrade=True) as catalog:
        (member,) = catalog.group.status().members
    assert (member.member_id, member.session_timeout, member.alive) == ("r1", 3.0, False)
