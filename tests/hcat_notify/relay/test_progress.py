"""ProgressWriter: merges what is published into few fenced writes, off the publish path."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, cast

from hcat_notify.errors import StoreUnavailableError
from hcat_notify.relay.progress import ProgressWriter
from hcat_notify.store.catalog import Catalog
from hcat_notify.store.group import BucketProgress


class RecordingGroup:
    """Stands in for ``catalog.group``: records each write, fences the listed buckets."""

    def __init__(self, fenced: set[int] | None = None) -> None:
        self.writes: list[dict[int, BucketProgress]] = []
        self.fenced = fenced or set()
        self.written = threading.Event()

    def record_progress(self, member_id: str, updates: Mapping[int, BucketProgress]) -> set[int]:
        self.writes.append(dict(updates))
        self.written.set()
        return {bucket for bucket in updates if bucket in self.fenced}


class FakeCatalog:
    def __init__(self, group: RecordingGroup) -> None:
        self.group = group


def writer(group: RecordingGroup, **kwargs: Any) -> tuple[ProgressWriter, list[Mapping[int, int]]]:
    lost: list[Mapping[int, int]] = []
    catalog = cast(Catalog, FakeCatalog(group))
    return ProgressWriter(catalog, "m1", lost.append, **kwargs), lost


def test_a_trickle_of_batches_is_merged_into_one_write() -> None:
    group = RecordingGroup()
    progress, _ = writer(group, linger=3600.0, max_events=500)
    try:
        for event_id in range(1, 11):
            topic = f"hcat.db.t{event_id % 3}"
            progress.add({7: BucketProgress(2, event_id, {topic: event_id})}, events=1)
        assert group.writes == []  # still lingering
        assert progress.flush(timeout=30)
    finally:
        progress.close()
    assert group.writes == [
        {7: BucketProgress(2, 10, {"hcat.db.t1": 10, "hcat.db.t2": 8, "hcat.db.t0": 9})}
    ]


def test_a_batch_worth_of_events_is_written_without_lingering() -> None:
    group = RecordingGroup()
    progress, _ = writer(group, linger=3600.0, max_events=3)
    try:
        progress.add({1: BucketProgress(1, 5, {"hcat.db.a": 5})}, events=2)
        progress.add({1: BucketProgress(1, 9, {"hcat.db.a": 9})}, events=1)
        assert group.written.wait(30)
        assert group.writes == [{1: BucketProgress(1, 9, {"hcat.db.a": 9})}]
    finally:
        progress.close()


def test_a_newer_epoch_replaces_what_is_queued_and_fenced_buckets_are_reported() -> None:
    group = RecordingGroup(fenced={4})
    progress, lost = writer(group, linger=3600.0)
    try:
        progress.add({4: BucketProgress(1, 3, {"hcat.db.a": 3})})
        progress.add({4: BucketProgress(2, 2, {"hcat.db.b": 2})})
        progress.add({4: BucketProgress(1, 8, {"hcat.db.a": 8})})  # stale epoch: ignored
        assert progress.flush(timeout=30)
    finally:
        progress.close()
    assert group.writes == [{4: BucketProgress(2, 2, {"hcat.db.b": 2})}]
    assert lost == [{4: 2}]  # fenced at the epoch it wrote with


def test_close_writes_what_is_queued() -> None:
    group = RecordingGroup()
    progress, _ = writer(group, linger=3600.0)
    progress.add({0: BucketProgress(1, 1, {"hcat.db.a": 1})})
    progress.close()
    assert group.writes == [{0: BucketProgress(1, 1, {"hcat.db.a": 1})}]


def test_unwritten_at_most_lets_a_few_events_linger_and_writes_the_rest_at_once() -> None:
    group = RecordingGroup()
    progress, _ = writer(group, linger=3600.0, max_events=500)
    try:
        progress.add({1: BucketProgress(1, 4, {"hcat.db.a": 4})}, events=4)
        assert progress.unwritten_at_most(4, timeout=30)  # room for them: no write
        assert group.writes == []
        assert progress.unwritten_at_most(3, timeout=30)  # not: written now, not lingering
        assert group.writes == [{1: BucketProgress(1, 4, {"hcat.db.a": 4})}]
    finally:
        progress.close()


def test_unwritten_at_most_counts_a_failed_write_as_unwritten() -> None:
    class Failing(RecordingGroup):
        """Fails every write until ``allowed`` is set."""

        def __init__(self) -> None:
            super().__init__()
            self.allowed = threading.Event()
            self.failures = 0

        def record_progress(
            self, member_id: str, updates: Mapping[int, BucketProgress]
        ) -> set[int]:
            if not self.allowed.is_set():
                self.failures += 1
                raise StoreUnavailableError("database went away (test)")
            return super().record_progress(member_id, updates)

    group = Failing()
    progress, _ = writer(group, linger=3600.0)
    try:
        progress.add({2: BucketProgress(1, 7, {"hcat.db.a": 7})}, events=2)
        assert not progress.unwritten_at_most(0, timeout=0.3)
        assert group.failures >= 1
        assert group.writes == []
        group.allowed.set()
        assert progress.unwritten_at_most(0, timeout=30)
        assert group.writes == [{2: BucketProgress(1, 7, {"hcat.db.a": 7})}]
    finally:
        progress.close()
