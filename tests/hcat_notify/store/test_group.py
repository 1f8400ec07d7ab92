"""The relay group's rows: controller lease and epochs, fenced assignment, fenced
progress, published-ness from progress; on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest

from hcat_notify.config import Settings
from hcat_notify.errors import InvalidInputError
from hcat_notify.model.topics import topic_bucket
from hcat_notify.relay import Relay
from hcat_notify.store import Catalog
from hcat_notify.store.group import BucketProgress, MemberReport


def _member(catalog: Catalog, member_id: str) -> None:
    catalog.group.heartbeat(MemberReport(member_id, "host", 1))


@pytest.fixture
def clicks(catalog: Catalog) -> str:
    catalog.create_table("web.clicks", location="/c", partition_keys=["ds"])
    return "hcat.web.clicks"


def test_a_new_catalog_has_256_buckets_nobody_owns(catalog: Catalog):
    info = catalog.group.info()
    assert info.bucket_count == 256
    assert info.controller_id is None
    buckets = catalog.group.buckets()
    assert [b.bucket for b in buckets] == list(range(256))
    assert {b.owner for b in buckets} == {None}


def test_the_bucket_count_is_fixed_at_creation(settings: Settings, catalog: Catalog):
    import dataclasses

    with pytest.raises(InvalidInputError, match="has 256 relay buckets, fixed when it was created"):
        Relay(dataclasses.replace(settings, relay_buckets=128))
    assert catalog.group.info().bucket_count == 256  # nothing changed


def test_heartbeats_are_aged_by_the_database_clock(catalog: Catalog):
    _member(catalog, "a")
    time.sleep(0.3)
    (member,) = catalog.group.members()
    assert member.member_id == "a"
    assert 0.25 < member.heartbeat_age < 5
    _member(catalog, "a")
    assert catalog.group.members()[0].heartbeat_age < 0.25


def test_a_member_id_in_use_by_a_live_process_is_refused(catalog: Catalog):
    here = socket.gethostname()
    catalog.group.join(MemberReport("r", "elsewhere", 7), session_timeout=5)
    before = [(m.member_id, m.host, m.pid) for m in catalog.group.members()]
    with pytest.raises(InvalidInputError, match=r"relay member id 'r' is in use by elsewhere:7"):
        catalog.group.join(MemberReport("r", here, os.getpid()), session_timeout=5)
    assert [(m.member_id, m.host, m.pid) for m in catalog.group.members()] == before
    # the same process again (a restart of its loop) is no conflict
    catalog.group.join(MemberReport("r", "elsewhere", 7), session_timeout=5)
    # a silent owner, or a dead process on this host, gives the id up at once
    time.sleep(0.3)
    catalog.group.join(MemberReport("r", here, os.getpid()), session_timeout=0.25)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    catalog.group.join(MemberReport("d", here, dead.pid), session_timeout=60)
    catalog.group.join(MemberReport("d", here, os.getpid()), session_timeout=60)
    assert {(m.member_id, m.pid) for m in catalog.group.members()} == {
        ("r", os.getpid()),
        ("d", os.getpid()),
    }


def test_one_controller_whose_epoch_grows_at_every_change(catalog: Catalog):
    # Leases long enough for a loaded machine while a holds the role; the last renewal
    # shortens it, so that its expiry needs only a short sleep (an expiry only gets
    # more certain as the machine is slower).
    first = catalog.group.claim_controller("a", ttl=60)
    assert first == 1
    assert catalog.group.claim_controller("b", ttl=60) is None  # a holds it
    assert catalog.group.claim_controller("a", ttl=0.3) == 1  # renewal keeps the epoch
    time.sleep(0.4)
    assert catalog.group.claim_controller("b", ttl=5) == 2  # expired: b takes it
    assert catalog.group.claim_controller("a", ttl=5) is None
    catalog.group.resign_controller("b", 2)
    assert catalog.group.claim_controller("a", ttl=5) == 3


def test_a_deposed_controller_changes_nothing(catalog: Catalog):
    _member(catalog, "a")
    _member(catalog, "b")
    old = catalog.group.claim_controller("a", ttl=0.3)
    assert old is not None
    time.sleep(0.4)
    new = catalog.group.claim_controller("b", ttl=5)
    assert new == old + 1
    assert catalog.group.assign("a", old, {0: "a", 1: "a"}) is False
    assert {b.owner for b in catalog.group.buckets()} == {None}
    assert catalog.group.assign("b", new, {0: "b"}) is True
    bucket = catalog.group.buckets()[0]
    assert (bucket.owner, bucket.epoch) == ("b", 1)


def test_progress_is_fenced_by_the_bucket_epoch(catalog: Catalog, clicks: str):
    ids = [catalog.mark_set_done("web.clicks", {"ds": str(n)}) for n in range(4)]
    bucket = topic_bucket(clicks, 256)
    _member(catalog, "a")
    _member(catalog, "b")
    epoch = catalog.group.claim_controller("a", ttl=30)
    assert epoch is not None
    assert catalog.group.assign("a", epoch, {bucket: "a"})
    mine = catalog.group.owned("a")[bucket]
    assert (
        catalog.group.record_progress(
            "a", {bucket: BucketProgress(mine.epoch, ids[1], {clicks: ids[1]})}
        )
        == set()
    )
    assert catalog.group.progress() == {clicks: ids[1]}
    # stamped by the database's clock (the same host's here)
    published_at = catalog.outbox.last_published_by_topic()[clicks]
    assert abs((published_at - datetime.now(UTC)).total_seconds()) < 60
    # the table's CREATE_TABLE waits on the prefix topic, in another bucket
    assert [e.event_id for e in catalog.outbox.pending() if e.topic == clicks] == ids[2:]
    assert catalog.outbox.backlog()[0] == 3
    # The bucket moves to b: a's later writes change nothing, and a learns it.
    assert catalog.group.assign("a", epoch, {bucket: "b"})
    lost = catalog.group.record_progress(
        "a", {bucket: BucketProgress(mine.epoch, ids[3], {clicks: ids[3]})}
    )
    assert lost == {bucket}
    assert catalog.group.progress() == {clicks: ids[1]}
    # b resumes from the recorded progress; progress never goes backwards.
    theirs = catalog.group.owned("b")[bucket]
    assert theirs.epoch == mine.epoch + 1
    assert theirs.published_through == ids[1]
    assert (
        catalog.group.record_progress(
            "b", {bucket: BucketProgress(theirs.epoch, ids[0], {clicks: ids[0]})}
        )
        == set()
    )
    assert catalog.group.progress() == {clicks: ids[1]}
    assert catalog.group.release("b") == [bucket]
    assert catalog.group.buckets()[bucket].owner is None


def test_positions_of_buckets_without_topics_move_fenced_and_never_back(catalog: Catalog):
    _member(catalog, "a")
    _member(catalog, "b")
    epoch = catalog.group.claim_controller("a", ttl=30)
    assert epoch is not None
    assert catalog.group.assign("a", epoch, {0: "a", 1: "a", 2: "a", 3: "b"})
    owned = catalog.group.owned("a")
    moved = {b: BucketProgress(owned[b].epoch, 40, {}) for b in (0, 1)}
    moved[2] = BucketProgress(owned[2].epoch, 30, {})  # a topic held back there
    moved[3] = BucketProgress(owned[0].epoch, 40, {})  # b's bucket: a's write is fenced
    assert catalog.group.record_progress("a", moved) == set()
    assert catalog.group.progress() == {}  # no topic written
    positions = {b.bucket: b.published_through for b in catalog.group.buckets()[:5]}
    assert positions == {0: 40, 1: 40, 2: 30, 3: 0, 4: 0}
    # never backwards; a stale epoch (bucket 1 moved away and back) changes nothing
    assert catalog.group.assign("a", epoch, {1: "b"})
    assert catalog.group.assign("a", epoch, {1: "a"})
    stale = {0: BucketProgress(owned[0].epoch, 10, {}), 1: BucketProgress(owned[1].epoch, 90, {})}
    assert catalog.group.record_progress("a", stale) == set()
    assert [b.published_through for b in catalog.group.buckets()[:2]] == [40, 40]


def test_a_leaving_member_gives_everything_up(catalog: Catalog):
    _member(catalog, "a")
    epoch = catalog.group.claim_controller("a", ttl=30)
    assert epoch is not None
    assert catalog.group.assign("a", epoch, {3: "a", 4: "a"})
    assert sorted(catalog.group.leave("a")) == [3, 4]
    assert catalog.group.members() == []
    assert catalog.group.info().controller_id is None
    assert {b.owner for b in catalog.group.buckets()} == {None}


def test_a_reassignment_locks_its_buckets_in_bucket_order(catalog: Catalog, settings: Settings):
    """As the publisher's and the webhook recorder's fences take them: one update per kind
    of move took them in another order, and on PostgreSQL a rebalance could deadlock with
    a publisher (both retried; the round was lost)."""
    from typing import Any

    from sqlalchemy import Engine, event

    _member(catalog, "a")
    _member(catalog, "b")
    epoch = catalog.group.claim_controller("a", ttl=30)
    assert epoch is not None
    statements: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "hcat_relay_buckets" in statement:
            statements.append((statement, parameters))

    event.listen(Engine, "before_cursor_execute", capture)
    try:
        assert catalog.group.assign("a", epoch, {200: "a", 3: "b", 50: "a", 7: "b"})
    finally:
        event.remove(Engine, "before_cursor_execute", capture)
    owners = {b.bucket: (b.owner, b.epoch) for b in catalog.group.buckets()}
    assert [owners[b] for b in (3, 7, 50, 200)] == [("b", 1), ("b", 1), ("a", 1), ("a", 1)]
    verbs = [statement.split()[0].upper() for statement, _ in statements]
    if settings.database_url.startswith("postgresql"):
        assert verbs == ["SELECT", "UPDATE", "UPDATE"]
        locking, parameters = statements[0]
        assert "ORDER BY" in locking
        assert locking.rstrip().endswith("FOR UPDATE")
        assert list(parameters.values()) == [3, 7, 50, 200]
    else:
        assert verbs == ["UPDATE", "UPDATE"]  # one writer at a time: nothing to order
