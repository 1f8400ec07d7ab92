"""The relay's loop on a scripted broker: the next page read and written while the
broker stores a full batch, a failed read-ahead, where a restarted relay reads on, and
no COMMIT while too much published is unrecorded."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, cast

import pytest

from hcat_notify.config import Settings
from hcat_notify.errors import StoreUnavailableError
from hcat_notify.relay import Relay, RelayConfig, RelayStats
from hcat_notify.store import Catalog, TableInfo
from hcat_notify.store.group import RelayGroup
from hcat_notify.store.records import OutboxEvent
from hcat_notify.writer import send_mark_set_done
from tests.fakes.broker import FakeBroker

Dones = Callable[[TableInfo, int], list[int]]


@pytest.fixture
def done_ids(dones: Callable[[TableInfo, int], list[OutboxEvent]]) -> Dones:
    return lambda table, count: [event.event_id for event in dones(table, count)]


class ReadLog:
    """Stands for the relay's catalog and notes each outbox read as (where,
    after_event_id): "in COMMIT" when made while a COMMIT awaits the broker's answer (a
    read-ahead), else "in loop". ``fail_ahead``: a read-ahead fails as if the database
    had gone away."""

    def __init__(self, catalog: Catalog, broker: FakeBroker, *, fail_ahead: bool = False):
        self._catalog = catalog
        self._broker = broker
        self._fail_ahead = fail_ahead
        self.reads: list[tuple[str, int]] = []

    @property
    def outbox(self) -> LoggedOutbox:
        return LoggedOutbox(self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._catalog, name)


class LoggedOutbox:
    """The catalog's outbox, its page reads noted in the :class:`ReadLog`."""

    def __init__(self, log: ReadLog) -> None:
        self._log = log

    def events_in_buckets(self, *args: Any, **kwargs: Any) -> list[OutboxEvent]:
        log = self._log
        committing = log._broker.committing
        log.reads.append(("in COMMIT" if committing else "in loop", kwargs["after_event_id"]))
        if committing and log._fail_ahead:
            raise StoreUnavailableError("database went away (test)")
        return log._catalog.outbox.events_in_buckets(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log._catalog.outbox, name)


def drained(
    settings: Settings, broker: FakeBroker, catalog: Catalog | ReadLog, count: int, **config: Any
) -> RelayStats:
    """Drain the outbox with one relay of ``config`` (``count`` events published)."""
    with Relay(
        settings,
        config=RelayConfig(**config),
        catalog=cast(Catalog, catalog),
        connection_factory=broker.connection,
    ) as relay:
        assert relay.drain() == count
    return relay.stats


def test_the_next_page_is_read_while_the_broker_stores_a_full_batch(
    settings: Settings, broker: FakeBroker, catalog: Catalog, clicks: TableInfo, done_ids: Dones
) -> None:
    """After a full batch the relay reads the next page between writing the COMMIT and
    its RECEIPT, and publishes that page next instead of reading it again."""
    ids = done_ids(clicks, 110)
    broker.on("COMMIT", delay=0.2)  # the broker stores each batch for a while
    log = ReadLog(catalog, broker)
    # five full batches and a short one
    drained(settings, broker, log, 110, batch_size=20)
    assert broker.delivered_ids() == ids
    # The first page and the last (empty) read in the loop; each full batch read the
    # next page during its COMMIT, the sixth (short) batch read nothing ahead.
    assert [where for where, _ in log.reads] == ["in loop"] + ["in COMMIT"] * 5 + ["in loop"]
    # ... and wrote that batch's frames then: each batch after the first went out ahead
    assert broker.transaction_log() == [("streamed", 20)] + [("prepared", 20)] * 4 + [
        ("prepared", 10)
    ]
    assert catalog.outbox.backlog() == (0, None)


def test_a_failed_read_ahead_is_read_again_and_nothing_is_lost(
    settings: Settings, broker: FakeBroker, catalog: Catalog, clicks: TableInfo, done_ids: Dones
) -> None:
    ids = done_ids(clicks, 50)
    broker.on("COMMIT", delay=0.2)
    log = ReadLog(catalog, broker, fail_ahead=True)
    stats = drained(settings, broker, log, 50, batch_size=20)
    assert stats.failures == 0
    failed = [after for where, after in log.reads if where == "in COMMIT"]
    assert len(failed) == 2  # after each of the two full batches
    assert broker.delivered_ids() == ids
    assert catalog.outbox.backlog() == (0, None)


def test_a_restarted_relay_reads_on_from_where_the_last_one_left(
    settings: Settings, broker: FakeBroker, catalog: Catalog, clicks: TableInfo, done_ids: Dones
) -> None:
    """Every event is in one topic, so 255 of the 256 buckets publish nothing: their
    positions move too, so the next relay starts reading after what was published, not
    at the first event of the outbox (which keeps every event it ever had)."""
    done = done_ids(clicks, 30)
    drained(settings, broker, catalog, 30, batch_size=5)
    later = send_mark_set_done(clicks.name, {"datestamp": "later"}, settings=settings)
    before = len(broker.delivered)
    log = ReadLog(catalog, broker)
    drained(settings, broker, log, 1, batch_size=5)
    assert broker.delivered_ids()[before:] == [later]
    assert log.reads[0] == ("in loop", done[-1])
    assert {b.published_through for b in catalog.group.buckets()} == {later}


def test_a_batch_is_committed_only_once_the_progress_before_it_is_written(
    settings: Settings,
    broker: FakeBroker,
    catalog: Catalog,
    clicks: TableInfo,
    done_ids: Dones,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Progress is written in the background, but however slow the database, no COMMIT
    goes out while, with its batch, more than a batch size of published events would be
    unrecorded: a relay killed at any moment leaves at most that many for the next owner
    to send again."""
    ids = done_ids(clicks, 35)
    slow_write = RelayGroup.record_progress
    at_commit: list[tuple[int, int]] = []  # (unrecorded published events, batch size)

    def record_progress(self: RelayGroup, *args: Any, **kwargs: Any) -> set[int]:
        time.sleep(0.2)  # a slow database
        return slow_write(self, *args, **kwargs)

    def on_commit(headers: Mapping[str, str]) -> None:
        recorded = catalog.group.progress().get(clicks.topic, 0)
        committed = broker.delivered_ids()  # every event id committed so far
        size = broker.transactions[headers["transaction"]].sends
        at_commit.append((sum(1 for i in committed if i > recorded), size))

    monkeypatch.setattr(RelayGroup, "record_progress", record_progress)
    broker.on("COMMIT", call=on_commit)
    drained(settings, broker, catalog, 35, batch_size=10)
    assert broker.delivered_ids() == ids
    assert [size for _, size in at_commit] == [10, 10, 10, 5]
    assert all(unrecorded + size <= 10 for unrecorded, size in at_commit), at_commit
