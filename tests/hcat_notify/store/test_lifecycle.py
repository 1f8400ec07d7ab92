"""Every change to a table is announced: registering existing files, drops, table events,
appends and overwrites, imports that register their table. SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hcat_notify import register_partitions
from hcat_notify.errors import (
    ConcurrentWriteError,
    InvalidInputError,
    InvalidSpecError,
    LocationNotFoundError,
    PartitionExistsError,
    TableNotFoundError,
    UnknownPartitionKeyError,
)
from hcat_notify.lifecycle import discover_partitions, drop_partitions, drop_table
from hcat_notify.model.events import EventType
from hcat_notify.store import Catalog, NewPartition, table_definition
from tests.counts import row_counts
from tests.wire import validate_message

pytestmark = pytest.mark.integration


_counts = row_counts


def _events(catalog: Catalog, kind: EventType | None = None):
    return [e for e in catalog.outbox.events(limit=10_000) if kind is None or e.event_type is kind]


def _table(catalog: Catalog, root: Path, **kwargs):
    return catalog.create_table(
        "web.clicks", location=str(root), partition_keys=["datestamp", "region"], **kwargs
    )


def _files(directory: Path, *sizes: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for n, size in enumerate(sizes):
        (directory / f"part-{n}.parquet").write_bytes(b"x" * size)
    (directory / "_SUCCESS").write_bytes(b"")
    (directory / ".part-0.parquet.crc").write_bytes(b"crc")
    return directory


def test_create_table_announces_on_the_prefix_topic(catalog: Catalog, tmp_path: Path):
    info = _table(catalog, tmp_path / "t")
    assert info.prefix_topic == "hcat"
    (event,) = _events(catalog)
    assert (event.event_type, event.topic) == (EventType.CREATE_TABLE, "hcat")
    body = validate_message(event.headers, event.body)
    assert (body["db"], body["table"], body["tableTopic"]) == ("web", "clicks", info.topic)
    assert body["partitionKeys"] == ["datestamp", "region"]


def test_register_existing_files_measures_and_announces_in_one_go(catalog: Catalog, tmp_path: Path):
    _table(catalog, tmp_path / "t")
    where = _files(tmp_path / "elsewhere" / "us", 100, 23)
    registration = register_partitions(
        catalog,
        "web.clicks",
        {"datestamp=20110228/region=us": str(where)},
        mark_set_done={"datestamp": "20110228"},
    )
    (partition,) = registration.partitions
    assert (partition.file_count, partition.total_bytes) == (2, 123)  # hidden files skipped
    assert partition.location == f"file://{where}"
    (added,) = _events(catalog, EventType.ADD_PARTITION)
    body = validate_message(added.headers, added.body)
    assert (body["fileCount"], body["bytes"], body["location"]) == (2, 123, f"file://{where}")
    assert registration.event_ids == (added.event_id,)
    (done,) = _events(catalog, EventType.MARK_SET_DONE)
    assert registration.done_event_id == done.event_id > added.event_id


@pytest.mark.parametrize(
    ("spec", "make", "error", "match"),
    [
        ("datestamp=1/region=us", None, LocationNotFoundError, "not found"),
        ("datestamp=1/region=us", "hidden-only", LocationNotFoundError, "no data files"),
        ("datestamp=1/region=us/country=x", "files", UnknownPartitionKeyError, "country"),
        ("datestamp=1", "files", InvalidSpecError, "missing partition key"),
        ("datestamp=0/region=us", "files", PartitionExistsError, "already registered"),
    ],
)
def test_bad_registrations_change_nothing(
    catalog: Catalog, tmp_path: Path, spec, make, error, match
):
    _table(catalog, tmp_path / "t")
    register_partitions(
        catalog, "web.clicks", {"datestamp=0/region=us": str(_files(tmp_path / "zero", 1))}
    )
    where = tmp_path / "p"
    if make == "files":
        _files(where, 5)
    elif make == "hidden-only":
        _files(where)
    before = _counts(catalog)
    with pytest.raises(error, match=match):
        register_partitions(catalog, "web.clicks", {spec: str(where)})
    assert _counts(catalog) == before


def test_drop_a_partial_spec_drops_and_announces_every_match(catalog: Catalog, tmp_path: Path):
    _table(catalog, tmp_path / "t")
    catalog.add_partitions(
        "web.clicks",
        [NewPartition({"datestamp": d, "region": r}, f"/w/{d}/{r}") for d in "12" for r in "ab"],
    )
    dropped, purge = drop_partitions(catalog, "web.clicks", {"datestamp": "1"})
    assert [p.spec.to_path() for p in dropped.partitions] == [
        "datestamp=1/region=a",
        "datestamp=1/region=b",
    ]
    assert purge.deleted == []
    drops = _events(catalog, EventType.DROP_PARTITION)
    assert [e.event_id for e in drops] == list(dropped.event_ids)
    assert [json.loads(e.body)["partitions"] for e in drops] == [
        [{"datestamp": "1", "region": "a"}],
        [{"datestamp": "1", "region": "b"}],
    ]
    for event in drops:
        validate_message(event.headers, event.body)
    assert [p.spec.to_path() for p in catalog.list_partitions("web.clicks")] == [
        "datestamp=2/region=a",
        "datestamp=2/region=b",
    ]


def test_drop_of_an_unknown_spec_changes_nothing(catalog: Catalog, tmp_path: Path):
    _table(catalog, tmp_path / "t")
    catalog.add_partitions("web.clicks", [NewPartition({"datestamp": "1", "region": "a"}, "/w")])
    before = _counts(catalog)
    with pytest.raises(InvalidInputError, match=r"no partition of web\.clicks matches datestamp=9"):
        drop_partitions(catalog, "web.clicks", {"datestamp": "9"})
    with pytest.raises(UnknownPartitionKeyError):
        drop_partitions(catalog, "web.clicks", {"country": "x"})
    assert _counts(catalog) == before


def test_drop_with_purge_deletes_files_and_refuses_external_tables(
    catalog: Catalog, tmp_path: Path
):
    root = tmp_path / "t"
    _table(catalog, root)
    where = _files(root / "datestamp=1" / "region=a", 3)
    register_partitions(catalog, "web.clicks", {"datestamp=1/region=a": str(where)})
    _, purge = drop_partitions(catalog, "web.clicks", {"datestamp": "1"}, purge=True)
    assert not where.exists()
    assert purge.errors == []
    catalog.create_table(
        "web.ext", location=str(tmp_path / "x"), partition_keys=["ds"], table_type="EXTERNAL_TABLE"
    )
    kept = _files(tmp_path / "x" / "ds=1", 1)
    register_partitions(catalog, "web.ext", {"ds=1": str(kept)})
    before = _counts(catalog)
    with pytest.raises(InvalidInputError, match="EXTERNAL_TABLE"):
        drop_partitions(catalog, "web.ext", {"ds": "1"}, purge=True)
    assert _counts(catalog) == before
    assert kept.exists()


def test_drop_table_takes_retained_dones_and_tells_both_topics(catalog: Catalog, tmp_path: Path):
    root = tmp_path / "t"
    info = _table(catalog, root)
    register_partitions(
        catalog,
        "web.clicks",
        {"datestamp=1/region=a": str(_files(root / "datestamp=1" / "region=a", 1))},
    )
    catalog.mark_set_done("web.clicks", {"datestamp": "1"})
    dropped, purge = drop_table(catalog, "web.clicks", purge=True)
    assert len(dropped.partitions) == 1
    assert not root.exists()
    assert purge.deleted == [info.location]
    counts = _counts(catalog)
    assert (counts["hcat_tables"], counts["hcat_partitions"], counts["hcat_mark_set_done"]) == (
        0,
        0,
        0,
    )
    events = _events(catalog, EventType.DROP_TABLE)
    assert [e.topic for e in events] == ["hcat", info.topic]
    assert [e.event_id for e in events] == list(dropped.event_ids)
    body = validate_message(events[1].headers, events[1].body)
    assert (body["partitionCount"], body["purged"]) == (1, True)
    with pytest.raises(TableNotFoundError):
        catalog.get_table("web.clicks")
    with pytest.raises(TableNotFoundError):
        drop_table(catalog, "web.clicks")


def test_a_pending_write_blocks_drops(catalog: Catalog, tmp_path: Path):
    _table(catalog, tmp_path / "t")
    catalog.add_partitions("web.clicks", [NewPartition({"datestamp": "1", "region": "a"}, "/w")])
    catalog.commits.begin(
        "job-1",
        "web.clicks",
        mode="append",
        partitions=["datestamp=1/region=a"],
        plan={},
        started_at=datetime.now(UTC),
    )
    before = _counts(catalog)
    with pytest.raises(ConcurrentWriteError, match="job-1"):
        drop_partitions(catalog, "web.clicks", {"datestamp": "1"})
    with pytest.raises(ConcurrentWriteError, match="job-1"):
        drop_table(catalog, "web.clicks")
    assert _counts(catalog) == before


@pytest.mark.parametrize(("mode", "replace"), [("append", False), ("overwrite", True)])
def test_writes_to_existing_partitions_announce_an_insert(
    catalog: Catalog, tmp_path: Path, mode, replace
):
    _table(catalog, tmp_path / "t")
    spec = {"datestamp": "1", "region": "a"}
    catalog.add_partitions("web.clicks", [NewPartition(spec, "/w/a", 2, 20)])
    catalog.commits.begin(
        "job-2",
        "web.clicks",
        mode=mode,
        partitions=["datestamp=1/region=a"],
        plan={},
        started_at=datetime.now(UTC),
    )
    record = catalog.commits.complete(
        "job-2", [NewPartition(spec, "/w/a2", 1, 5, files=("/w/a2/part-9.parquet",))]
    )
    (insert,) = _events(catalog, EventType.INSERT)
    assert record.insert_event_ids == (insert.event_id,)
    assert record.event_ids == ()
    body = validate_message(insert.headers, insert.body)
    assert body["replace"] is replace
    assert body["files"] == ["/w/a2/part-9.parquet"]
    expected = (1, 5, "/w/a2") if replace else (3, 25, "/w/a")
    assert (body["fileCount"], body["bytes"], body["location"]) == expected
    assert (body["filesAdded"], body["bytesAdded"]) == (1, 5)


def test_a_partition_given_twice_to_complete_is_named_and_nothing_is_written(
    catalog: Catalog, tmp_path: Path
):
    _table(catalog, tmp_path / "t")
    catalog.commits.begin(
        "job-dup",
        "web.clicks",
        mode="append",
        partitions=["datestamp=1/region=a"],
        plan={},
        started_at=datetime.now(UTC),
    )
    spec = {"datestamp": "1", "region": "a"}
    before = _events(catalog)
    with pytest.raises(InvalidInputError, match=r"partition datestamp=1/region=a is given twice"):
        catalog.commits.complete(
            "job-dup", [NewPartition(spec, "/w/a", 1, 5), NewPartition(spec, "/w/a", 1, 5)]
        )
    assert catalog.list_partitions("web.clicks") == []
    assert _events(catalog) == before
    # the entry is still pending: completed right, it registers the partition once
    assert [e.job_id for e in catalog.commits.pending("web.clicks")] == ["job-dup"]
    catalog.commits.complete("job-dup", [NewPartition(spec, "/w/a", 1, 5)])
    assert [p.spec.to_path() for p in catalog.list_partitions("web.clicks")] == [
        "datestamp=1/region=a"
    ]


def test_a_write_announced_per_write_is_one_message_caught_up_once(
    catalog: Catalog, tmp_path: Path
):
    _table(catalog, tmp_path / "t", properties={"hcat.notify.announce": "write"})
    catalog.add_partitions(
        "web.clicks", [NewPartition({"datestamp": "1", "region": str(n)}, "/w") for n in range(50)]
    )
    (batch,) = _events(catalog, EventType.ADD_PARTITION)
    assert len(json.loads(batch.body)["partitions"]) == 50
    assert {p.event_id for p in catalog.list_partitions("web.clicks")} == {batch.event_id}
    catalog.partitions.drop("web.clicks", {"datestamp": "1", "region": "7"})
    caught = catalog.catch_up(["web.clicks"], cursor="*:0")
    assert [e.event_type for e in caught] == [EventType.ADD_PARTITION, EventType.DROP_PARTITION]
    assert [e.event_type for e in catalog.catch_up(["web.clicks"], cursor="*:0", limit=1)] == [
        EventType.ADD_PARTITION
    ]


def test_an_entry_that_creates_its_table_registers_it_on_completion(
    catalog: Catalog, tmp_path: Path
):
    definition = table_definition(location=str(tmp_path / "n"), partition_keys=["ds"])
    entry = catalog.commits.begin(
        "import-1",
        "web.new",
        mode="append",
        partitions=["ds=1"],
        plan={},
        started_at=datetime.now(UTC),
        create_table=definition,
    )
    assert entry.creates_table
    with pytest.raises(TableNotFoundError):
        catalog.get_table("web.new")
    assert [e.job_id for e in catalog.commits.pending("web.new")] == ["import-1"]
    record = catalog.commits.complete("import-1", [NewPartition({"ds": "1"}, "/n/ds=1", 1, 1)])
    assert catalog.get_table("web.new").partition_keys == ("ds",)
    kinds = [e.event_type for e in _events(catalog)]
    assert kinds == [EventType.CREATE_TABLE, EventType.ADD_PARTITION]
    assert record.table_event_ids == (_events(catalog)[0].event_id,)
    # an aborted one leaves no table behind
    catalog.commits.begin(
        "import-2",
        "web.other",
        mode="append",
        partitions=[],
        plan={},
        started_at=datetime.now(UTC),
        create_table=table_definition(location=str(tmp_path / "o"), partition_keys=["ds"]),
    )
    assert catalog.commits.abort("import-2")
    with pytest.raises(TableNotFoundError):
        catalog.get_table("web.other")


def _tree(root: Path) -> None:
    _files(root / "datestamp=20110228" / "region=us%2Feast", 10)  # the value us/east
    _files(root / "datestamp=20110228" / "region=eu", 20)
    _files(root / "datestamp=20110228" / "region=__HIVE_DEFAULT_PARTITION__", 1)
    _files(root / "datestamp=20110301" / "region=empty")  # hidden files only
    _files(root / "_hcat_staging" / "job" / "datestamp=1" / "region=x", 5)
    _files(root / ".hidden" / "region=x", 5)


def test_discover_registers_what_spark_wrote_and_skips_hidden(catalog: Catalog, tmp_path: Path):
    root = tmp_path / "t"
    _table(catalog, root)
    _tree(root)
    dry = discover_partitions(catalog, "web.clicks", dry_run=True)
    assert dry.registration is None
    assert _counts(catalog)["hcat_partitions"] == 0
    found = discover_partitions(catalog, "web.clicks")
    values = [p.spec.as_dict() for p in catalog.list_partitions("web.clicks")]
    assert sorted(values, key=str) == sorted(
        [
            {"datestamp": "20110228", "region": None},
            {"datestamp": "20110228", "region": "eu"},
            {"datestamp": "20110228", "region": "us/east"},
        ],
        key=str,
    )
    assert found.empty == ("datestamp=20110301/region=empty",)
    assert found.registration is not None
    assert len(_events(catalog, EventType.ADD_PARTITION)) == 3
    again = discover_partitions(catalog, "web.clicks")
    assert (again.found, again.registration) == ((), None)


def test_discover_refuses_foreign_directories_unless_told(catalog: Catalog, tmp_path: Path):
    root = tmp_path / "t"
    _table(catalog, root)
    _tree(root)
    _files(root / "datestamp=20110228" / "country=fr", 1)  # another key
    _files(root / "backup", 1)  # not k=v at all
    before = _counts(catalog)
    with pytest.raises(
        InvalidSpecError, match=r"not a partition directory.*nothing was registered"
    ):
        discover_partitions(catalog, "web.clicks")
    assert _counts(catalog) == before
    found = discover_partitions(catalog, "web.clicks", skip_foreign=True)
    assert sorted(path for path, _ in found.foreign) == ["backup", "datestamp=20110228/country=fr"]
    assert len(catalog.list_partitions("web.clicks")) == 3
