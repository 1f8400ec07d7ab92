"""Catalog behaviour suite: every test runs on a SQLite file and on PostgreSQL 15."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine

from hcat_notify.config import Settings, TopicStrategy, load_settings
from hcat_notify.errors import (
    ConflictError,
    InvalidIdentifierError,
    InvalidInputError,
    InvalidSpecError,
    PartitionExistsError,
    StoreUnavailableError,
    TableExistsError,
    TableNotFoundError,
    UnknownPartitionKeyError,
)
from hcat_notify.model.events import EventType
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store import Catalog, NewPartition
from hcat_notify.store.engine import current_revision, head_revision
from hcat_notify.store.models import Base, OutboxRow, PartitionRow, RetentionRow, TableRow
from tests.counts import row_counts
from tests.revisions import catalog_at

pytestmark = pytest.mark.integration


def _changes(catalog: Catalog):
    """Pending events other than the CREATE_TABLE of the tables a test made."""
    return [e for e in catalog.outbox.pending() if e.event_type is not EventType.CREATE_TABLE]


def _make_clicks(catalog: Catalog, **kwargs):
    return catalog.create_table(
        "web.clicks",
        location="/data/web/clicks",
        partition_keys=["datestamp", "region"],
        **kwargs,
    )


def _counts(catalog: Catalog) -> dict[str, int]:
    return row_counts(catalog, (TableRow, PartitionRow, RetentionRow, OutboxRow))


# -- schema ---------------------------------------------------------------------------


def test_first_use_applies_migrations_and_matches_the_models(catalog: Catalog):
    engine = create_engine(catalog.settings.database_url)
    try:
        assert current_revision(engine) == head_revision()
        with engine.connect() as connection:
            diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        assert diff == []
    finally:
        engine.dispose()


def test_reopening_is_idempotent(settings: Settings):
    with Catalog.open(settings) as first:
        _make_clicks(first)
    with Catalog.open(settings) as second:
        assert [str(t.name) for t in second.list_tables()] == ["web.clicks"]


# -- tables ---------------------------------------------------------------------------


def test_create_and_get_table(catalog: Catalog):
    created = _make_clicks(catalog, storage_format="ORC", retention=timedelta(days=3))
    got = catalog.get_table("WEB.Clicks")
    assert got == created
    assert str(got.name) == "web.clicks"
    assert got.partition_keys == ("datestamp", "region")
    assert got.storage_format == "orc"
    assert got.table_type == "MANAGED_TABLE"
    assert got.retention == timedelta(days=3)
    assert got.topic == "hcat.web.clicks"
    assert got.version == 1
    assert got.created_at.tzinfo is not None


def test_default_retention_is_seven_days(catalog: Catalog):
    assert _make_clicks(catalog).retention == timedelta(days=7)


def test_topic_override_property_and_strategies(db_url: str, tmp_path: Path):
    per_db = load_settings(
        home=tmp_path, db_url=db_url, topic_strategy="database", topic_prefix="Events"
    )
    with Catalog.open(per_db) as catalog:
        assert per_db.topic_strategy is TopicStrategy.DATABASE
        assert _make_clicks(catalog).topic == "events.web"
        special = catalog.create_table(
            "web.views", location="/v", partition_keys=["ds"], topic="Custom.Views"
        )
        assert special.topic == "custom.views"
        assert special.properties["hcat.msgbus.topic.name"] == "custom.views"


def test_the_topic_is_fixed_when_the_table_is_created(db_url: str, tmp_path: Path):
    creator = load_settings(home=tmp_path, db_url=db_url, topic_prefix="alpha")
    reader = load_settings(
        home=tmp_path, db_url=db_url, topic_prefix="beta", topic_strategy="single"
    )
    with Catalog.open(creator) as catalog:
        created = _make_clicks(catalog)
    with Catalog.open(reader) as catalog:
        assert catalog.get_table("web.clicks").topic == created.topic == "alpha.web.clicks"
        assert [t.topic for t in catalog.list_tables()] == ["alpha.web.clicks"]


def test_migration_fills_the_topic_of_existing_tables(empty_db_url: str, tmp_path: Path):
    """A catalog at revision 0004 (topics computed per process) gets its topics stored."""
    catalog_at(
        empty_db_url,
        "0004",
        "INSERT INTO hcat_tables (db_name, table_name, location, storage_format,"
        " partition_keys, table_type, properties, retention_seconds, created_at,"
        " updated_at, version) VALUES"
        " ('web', 'clicks', '/c', 'parquet', '[\"ds\"]', 'MANAGED_TABLE', '{}',"
        " 60, '2026-01-01 00:00:00', '2026-01-01 00:00:00', 1),"
        " ('web', 'views', '/v', 'parquet', '[\"ds\"]', 'MANAGED_TABLE',"
        ' \'{"hcat.msgbus.topic.name": "custom.views"}\','
        " 60, '2026-01-01 00:00:00', '2026-01-01 00:00:00', 1)",
    )
    settings = load_settings(home=tmp_path, db_url=empty_db_url, topic_prefix="ops")
    with Catalog.open(settings, upgrade=True) as catalog:  # as `hcat-notify db upgrade`
        assert {str(t.name): t.topic for t in catalog.list_tables()} == {
            "web.clicks": "ops.web.clicks",
            "web.views": "custom.views",
        }


def test_duplicate_table_is_rejected_and_changes_nothing(catalog: Catalog):
    _make_clicks(catalog)
    with pytest.raises(TableExistsError, match=r"web\.clicks is already registered"):
        catalog.create_table("web.clicks", location="/elsewhere", partition_keys=["ds"])
    assert catalog.get_table("web.clicks").location == "/data/web/clicks"


@pytest.mark.parametrize(
    ("name", "keys", "error", "match"),
    [
        ("web", ["ds"], InvalidIdentifierError, "expected DB.TABLE"),
        ("a.b.c", ["ds"], InvalidIdentifierError, "expected DB.TABLE"),
        ("web.cl icks", ["ds"], InvalidIdentifierError, "invalid table name"),
        ("we'b.clicks", ["ds"], InvalidIdentifierError, "invalid database name"),
        ('web."clicks"', ["ds"], InvalidIdentifierError, "invalid table name"),
        ("web.clicks", ["ds", "bad key"], InvalidIdentifierError, "invalid partition key"),
        ("web.clicks", [], InvalidInputError, "at least one partition key"),
        ("web.clicks", ["ds", "DS"], InvalidInputError, "given twice"),
    ],
)
def test_bad_table_definitions_write_nothing(catalog: Catalog, name, keys, error, match):
    with pytest.raises(error, match=match):
        catalog.create_table(name, location="/x", partition_keys=keys)
    assert catalog.list_tables() == []


def test_bad_format_and_retention_write_nothing(catalog: Catalog):
    with pytest.raises(InvalidInputError, match="unknown storage format 'avro'"):
        _make_clicks(catalog, storage_format="avro")
    for bad in (timedelta(0), timedelta(seconds=0.0001), timedelta(days=36_501), timedelta.max):
        with pytest.raises(InvalidInputError, match="retention must be between 1 second and"):
            _make_clicks(catalog, retention=bad)
    with pytest.raises(InvalidIdentifierError, match="invalid topic name"):
        _make_clicks(catalog, topic="hcat.>")
    assert catalog.list_tables() == []


def test_unknown_table(catalog: Catalog):
    with pytest.raises(TableNotFoundError, match=r"table web\.nope is not registered"):
        catalog.get_table("web.nope")
    with pytest.raises(TableNotFoundError):
        catalog.list_partitions("web.nope")
    with pytest.raises(TableNotFoundError):
        catalog.mark_set_done("web.nope", {"ds": "1"})
    assert _counts(catalog) == {
        "hcat_tables": 0,
        "hcat_partitions": 0,
        "hcat_mark_set_done": 0,
        "hcat_outbox": 0,
    }


def test_table_properties_compare_and_set(catalog: Catalog):
    table = _make_clicks(catalog)
    updated = catalog.tables.update_properties(
        "web.clicks", {"owner": "etl"}, expected_version=table.version
    )
    assert updated.version == table.version + 1
    assert updated.properties["owner"] == "etl"
    # A second writer that read the old version loses and changes nothing.
    with pytest.raises(ConflictError, match="expected version 1, found 2"):
        catalog.tables.update_properties(
            "web.clicks", {"owner": "other"}, expected_version=table.version
        )
    assert catalog.get_table("web.clicks").properties["owner"] == "etl"


def test_concurrent_compare_and_set_has_exactly_one_winner(catalog: Catalog):
    table = _make_clicks(catalog)
    barrier = threading.Barrier(4)
    outcomes: list[str] = []
    lock = threading.Lock()

    def writer(n: int) -> None:
        barrier.wait()
        try:
            catalog.tables.update_properties(
                "web.clicks", {"writer": str(n)}, expected_version=table.version
            )
            result = "won"
        except ConflictError:
            result = "lost"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(outcomes) == ["lost", "lost", "lost", "won"]
    assert catalog.get_table("web.clicks").version == table.version + 1


# -- partitions -------------------------------------------------------------------------


def test_add_partitions_registers_rows_and_announces_each(catalog: Catalog):
    _make_clicks(catalog)
    added = catalog.add_partitions(
        "web.clicks",
        [
            NewPartition(
                {"region": "us", "datestamp": "20110228"},
                "/data/web/clicks/datestamp=20110228/region=us",
                3,
                300,
            ),
            NewPartition(
                {"datestamp": "20110228", "region": "eu"},
                "/data/web/clicks/datestamp=20110228/region=eu",
                1,
                10,
            ),
        ],
        job_id="job-1",
    )
    assert [p.spec.to_path() for p in added] == [
        "datestamp=20110228/region=us",
        "datestamp=20110228/region=eu",
    ]
    assert [p.event_id for p in added] == [2, 3]  # 1 is the table's CREATE_TABLE
    listed = catalog.list_partitions("web.clicks")
    assert {p.spec.to_path() for p in listed} == {
        "datestamp=20110228/region=us",
        "datestamp=20110228/region=eu",
    }
    assert {p.job_id for p in listed} == {"job-1"}
    events = _changes(catalog)
    assert [e.event_type for e in events] == [EventType.ADD_PARTITION] * 2
    body = json.loads(events[0].body)
    assert body["partitions"] == [{"datestamp": "20110228", "region": "us"}]
    assert list(body["partitions"][0]) == ["datestamp", "region"]  # table key order
    assert body["location"] == "/data/web/clicks/datestamp=20110228/region=us"
    assert body["fileCount"] == 3
    assert body["bytes"] == 300
    assert events[0].headers["HCAT_EVENT_ID"] == "2"
    assert events[0].topic == "hcat.web.clicks"


def test_partition_filter_with_partial_spec(catalog: Catalog):
    _make_clicks(catalog)
    catalog.add_partitions(
        "web.clicks",
        [
            NewPartition({"datestamp": d, "region": r}, f"/p/{d}/{r}")
            for d in ("1", "2")
            for r in ("us", "eu")
        ],
    )
    assert len(catalog.list_partitions("web.clicks", {"datestamp": "1"})) == 2
    assert [
        p.spec.to_path()
        for p in catalog.list_partitions("web.clicks", {"region": "eu", "datestamp": "2"})
    ] == ["datestamp=2/region=eu"]
    with pytest.raises(UnknownPartitionKeyError, match="no partition key 'country'"):
        catalog.list_partitions("web.clicks", {"country": "x"})


def test_prefix_filter_is_exact_with_like_wildcards_in_values(catalog: Catalog):
    # list_partitions narrows by the path prefix in SQL; '%' and '_' in values (and the
    # escaping that turns '/' into '%2F') must not widen or shrink the match.
    _make_clicks(catalog)
    values = ["1", "1_", "1%", "1%2F", "1/x", "10", "_", "%", "a", "A"]
    catalog.add_partitions(
        "web.clicks",
        [
            NewPartition({"datestamp": d, "region": r}, f"/p/{i}")
            for i, d in enumerate(values)
            for r in ("us", "eu")
        ],
    )
    for value in values:
        listed = catalog.list_partitions("web.clicks", {"datestamp": value})
        assert {p.spec.as_dict()["datestamp"] for p in listed} == {value}
        assert {p.spec.as_dict()["region"] for p in listed} == {"us", "eu"}
        (one,) = catalog.list_partitions("web.clicks", {"datestamp": value, "region": "eu"})
        assert one.spec.as_dict() == {"datestamp": value, "region": "eu"}
    assert len(catalog.list_partitions("web.clicks", {"region": "us"})) == len(values)


def test_partitions_at_looks_up_exactly_the_given_specs(catalog: Catalog):
    _make_clicks(catalog)
    catalog.add_partitions(
        "web.clicks",
        [NewPartition({"datestamp": str(d), "region": "us"}, f"/p/{d}") for d in range(1200)],
    )
    wanted = [{"datestamp": str(d), "region": r} for d in range(0, 1300, 2) for r in ("us", "eu")]
    found = catalog.partitions.at("web.clicks", wanted)  # more specs than one IN chunk
    assert set(found) == {f"datestamp={d}/region=us" for d in range(0, 1200, 2)}
    assert found["datestamp=4/region=us"].location == "/p/4"
    assert catalog.partitions.at("web.clicks", []) == {}
    with pytest.raises(InvalidSpecError, match="missing partition key"):
        catalog.partitions.at("web.clicks", [{"datestamp": "1"}])


def test_existing_partition_rejects_the_whole_batch(catalog: Catalog):
    _make_clicks(catalog)
    catalog.add_partitions("web.clicks", [NewPartition({"datestamp": "1", "region": "us"}, "/a")])
    before = _counts(catalog)
    with pytest.raises(PartitionExistsError, match=r"datestamp=1/region=us of web\.clicks"):
        catalog.add_partitions(
            "web.clicks",
            [
                NewPartition({"datestamp": "2", "region": "us"}, "/b"),
                NewPartition({"datestamp": "1", "region": "us"}, "/c"),
            ],
        )
    assert _counts(catalog) == before


@pytest.mark.parametrize(
    ("spec", "error", "match"),
    [
        ({"datestamp": "1"}, InvalidSpecError, r"missing partition key\(s\) region"),
        ({"datestamp": "1", "region": "us", "country": "x"}, UnknownPartitionKeyError, "country"),
        ({}, InvalidSpecError, "empty partition spec"),
    ],
)
def test_bad_partition_specs_write_nothing(catalog: Catalog, spec, error, match):
    _make_clicks(catalog)
    with pytest.raises(error, match=match):
        catalog.add_partitions("web.clicks", [NewPartition(spec, "/x")])
    assert _counts(catalog)["hcat_partitions"] == 0
    assert _counts(catalog)["hcat_outbox"] == 1  # the table's CREATE_TABLE


@pytest.mark.parametrize(
    "value",
    [
        "a/b",
        "k=v",
        "100%",
        "line\nbreak",
        "ünïcødé 日本 🚀",
        "%2F",
        "__HIVE_DEFAULT_PARTITION__x",
        "quote'\"",
    ],
)
def test_awkward_values_round_trip_through_the_store(catalog: Catalog, value):
    _make_clicks(catalog)
    (added,) = catalog.add_partitions(
        "web.clicks", [NewPartition({"datestamp": value, "region": None}, "/x")]
    )
    (listed,) = catalog.list_partitions("web.clicks", {"datestamp": value})
    assert listed.spec.as_dict() == {"datestamp": value, "region": None}
    assert PartitionSpec.parse(listed.spec.to_path()) == listed.spec
    body = json.loads(_changes(catalog)[0].body)
    assert body["partitions"] == [{"datestamp": value, "region": "__HIVE_DEFAULT_PARTITION__"}]
    assert added.spec == listed.spec


def test_partition_compare_and_set(catalog: Catalog):
    _make_clicks(catalog)
    (part,) = catalog.add_partitions(
        "web.clicks", [NewPartition({"datestamp": "1", "region": "us"}, "/a", 40, 4000)]
    )
    archived = catalog.partitions.update(
        "web.clicks",
        part.spec,
        expected_version=part.version,
        location="har:///a.har",
        archived=True,
        file_count=1,
    )
    assert (archived.location, archived.archived, archived.file_count, archived.version) == (
        "har:///a.har",
        True,
        1,
        2,
    )
    with pytest.raises(ConflictError, match="changed by another process"):
        catalog.partitions.update(
            "web.clicks", part.spec, expected_version=part.version, location="/lost"
        )
    got = catalog.partitions.get("web.clicks", {"region": "us", "datestamp": "1"})
    assert got is not None
    assert got.location == "har:///a.har"


# -- mark-set-done and retention -------------------------------------------------------------


def test_mark_set_done_writes_retention_row_and_event_together(catalog: Catalog):
    _make_clicks(catalog, retention=timedelta(hours=5))
    event_id = catalog.mark_set_done("web.clicks", {"region": "us", "datestamp": "20110228"})
    (retained,) = catalog.retained_dones(["web.clicks"])
    assert retained.event_id == event_id
    assert retained.spec.to_path() == "datestamp=20110228/region=us"
    assert retained.expires_at - retained.created_at == timedelta(hours=5)
    (event,) = _changes(catalog)
    assert event.event_id == event_id
    assert event.event_type is EventType.MARK_SET_DONE
    assert event.headers["HCAT_SPEC"] == "datestamp=20110228/region=us"
    assert json.loads(event.body)["partitionSpec"] == {"datestamp": "20110228", "region": "us"}


def test_mark_set_done_keys_are_sorted_lexically(catalog: Catalog):
    catalog.create_table("web.logs", location="/l", partition_keys=["zone", "datestamp"])
    catalog.mark_set_done("web.logs", {"zone": "z1", "datestamp": "d"})
    (event,) = _changes(catalog)
    assert event.headers["HCAT_SPEC"] == "datestamp=d/zone=z1"
    assert list(json.loads(event.body)["partitionSpec"]) == ["datestamp", "zone"]


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({}, InvalidSpecError),
        ({"country": "x"}, UnknownPartitionKeyError),
        ({"datestamp": "a\x00b"}, InvalidSpecError),
    ],
)
def test_bad_mark_set_done_writes_nothing(catalog: Catalog, spec, error):
    _make_clicks(catalog)
    with pytest.raises(error):
        catalog.mark_set_done("web.clicks", spec)
    assert _counts(catalog)["hcat_mark_set_done"] == 0
    assert _counts(catalog)["hcat_outbox"] == 1  # the table's CREATE_TABLE


def test_covering_done_lookup(catalog: Catalog):
    _make_clicks(catalog)
    broad = catalog.mark_set_done("web.clicks", {"datestamp": "20110228"})
    catalog.mark_set_done("web.clicks", {"datestamp": "20110301", "region": "us"})
    covering = catalog.find_covering_done("web.clicks", {"region": "us", "datestamp": "20110228"})
    assert covering is not None
    assert covering.event_id == broad
    assert catalog.find_covering_done("web.clicks", {"datestamp": "20110228"}) is not None
    assert (
        catalog.find_covering_done("web.clicks", {"datestamp": "20110301"}) is None
    )  # narrower done only
    assert (
        catalog.find_covering_done("web.clicks", {"datestamp": "20110301", "region": "eu"}) is None
    )
    exact = catalog.find_covering_done("web.clicks", {"datestamp": "20110301", "region": "us"})
    assert exact is not None


def test_a_lookup_for_a_spec_that_skips_a_leading_key_is_refused(catalog: Catalog):
    """No done can cover ``region=us`` alone (keys datestamp, region: a done's spec is a
    prefix of them), so a wait for it could only time out: refused as ``mark-done``
    refuses that spec, alone and among many."""
    _make_clicks(catalog)
    message = "spec 'region=us' for table web.clicks skips the leading partition key datestamp"
    with pytest.raises(InvalidSpecError, match=message):
        catalog.find_covering_done("web.clicks", {"region": "us"})
    wanted: list[tuple[PartitionSpec, int | None]] = [
        (PartitionSpec.from_mapping({"region": "us"}), None),
        (PartitionSpec.from_mapping({"datestamp": "1"}), None),
    ]
    skipping, fitting = catalog.find_covering_dones("web.clicks", wanted)
    assert isinstance(skipping, InvalidSpecError)
    assert message in str(skipping)
    assert fitting is None


def test_covering_dones_of_many_specs_in_one_read_answer_as_each_alone(catalog: Catalog):
    """What long polls of many specs of one table read at a wake-up: per spec what its
    own lookup answers (a spec that does not fit the table: its error, the others
    still answered)."""
    _make_clicks(catalog)
    broad = catalog.mark_set_done("web.clicks", {"datestamp": "20110228"})
    catalog.mark_set_done("web.clicks", {"datestamp": "20110301", "region": "us"})
    wanted: list[tuple[PartitionSpec, int | None]] = [
        (PartitionSpec.from_mapping({"region": "us", "datestamp": "20110228"}), None),
        (PartitionSpec.from_mapping({"datestamp": "20110301"}), None),
        (PartitionSpec.from_mapping({"datestamp": "20110301", "region": "us"}), None),
        (PartitionSpec.from_mapping({"datestamp": "20110301", "region": "us"}), 2),
        (PartitionSpec.from_mapping({"nosuch": "1"}), None),
        (PartitionSpec.from_mapping({"datestamp": "20110228"}), 1),
    ]
    found = catalog.find_covering_dones("web.clicks", wanted)
    alone: list[object] = []
    for spec, minimum in wanted:
        try:
            alone.append(catalog.find_covering_done("web.clicks", spec, min_generation=minimum))
        except UnknownPartitionKeyError as exc:
            alone.append(type(exc))
    assert [type(f) if isinstance(f, Exception) else f for f in found] == alone
    assert getattr(found[0], "event_id", None) == broad
    assert alone[4] is UnknownPartitionKeyError
    with pytest.raises(TableNotFoundError):
        catalog.find_covering_dones("web.nosuch", wanted[:1])


class _Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_expired_dones_are_hidden_and_swept_in_batches(settings: Settings):
    clock = _Clock()
    with Catalog.open(settings) as opened:
        catalog = Catalog(opened._engine, settings, clock=clock)
        _make_clicks(catalog, retention=timedelta(days=1))
        old = [catalog.mark_set_done("web.clicks", {"datestamp": str(n)}) for n in range(5)]
        clock.now += timedelta(hours=20)
        fresh = catalog.mark_set_done("web.clicks", {"datestamp": "new"})
        clock.now += timedelta(hours=5)  # the first five are 25 h old: expired
        assert [d.event_id for d in catalog.retained_dones(["web.clicks"])] == [fresh]
        assert catalog.find_covering_done("web.clicks", {"datestamp": "0"}) is None
        assert catalog.dones.sweep_expired(batch_size=2, max_batches=1) == 2
        assert _counts(catalog)["hcat_mark_set_done"] == 4
        assert catalog.dones.sweep_expired(batch_size=2) == 3
        assert _counts(catalog)["hcat_mark_set_done"] == 1
        assert catalog.dones.sweep_expired() == 0
        # The outbox keeps its events: retention only governs the retention table.
        assert len(catalog.outbox.events()) == len(old) + 2  # and the CREATE_TABLE


def test_retained_dones_cursor_and_tables(catalog: Catalog):
    _make_clicks(catalog)
    catalog.create_table("web.views", location="/v", partition_keys=["ds"])
    first = catalog.mark_set_done("web.clicks", {"datestamp": "1"})
    second = catalog.mark_set_done("web.views", {"ds": "1"})
    third = catalog.mark_set_done("web.clicks", {"datestamp": "2"})
    assert [d.event_id for d in catalog.retained_dones(["web.clicks"])] == [first, third]
    assert [
        d.event_id
        for d in catalog.retained_dones(["web.clicks", "web.views"], after_event_id=first)
    ] == [
        second,
        third,
    ]


def test_a_cursor_beyond_the_newest_event_is_refused(catalog: Catalog):
    """Every read hands out positions at or below the newest event: one above it is
    mistyped (or of another catalog), and following it would skip every event up to it."""
    _make_clicks(catalog)
    newest = catalog.mark_set_done("web.clicks", {"datestamp": "1"})
    assert [e.event_id for e in catalog.catch_up(["web.clicks"], cursor=f"*:{newest - 1}")] == [
        newest
    ]
    assert list(catalog.catch_up(["web.clicks"], cursor=f"*:{newest}")) == []  # up to date
    for cursor in (f"*:{newest + 1}", "*:99999", "hcat.web.clicks:99999", "nosuch.topic:99999"):
        with pytest.raises(InvalidInputError, match=f"is beyond the newest event \\({newest}\\)"):
            catalog.catch_up(["web.clicks"], cursor=cursor)


# -- outbox -------------------------------------------------------------------------------


def test_event_ids_are_monotonic_across_kinds_and_writers(catalog: Catalog):
    _make_clicks(catalog)
    errors: list[Exception] = []

    def writer(n: int) -> None:
        try:
            for i in range(10):
                if i % 2:
                    catalog.mark_set_done("web.clicks", {"datestamp": f"{n}-{i}"})
                else:
                    catalog.add_partitions(
                        "web.clicks", [NewPartition({"datestamp": f"{n}-{i}", "region": "r"}, "/x")]
                    )
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    ids = [event.event_id for event in catalog.outbox.events(limit=1000)]
    assert ids == list(range(1, 32))  # the CREATE_TABLE, then 30: gapless, unique, in order


# -- unreachable databases -------------------------------------------------------------------


def test_unreachable_postgres_names_the_url(tmp_path: Path):
    settings = load_settings(
        home=tmp_path, db_url="postgresql+psycopg://hcat:secret@127.0.0.1:1/catalog"
    )
    with pytest.raises(StoreUnavailableError) as info:
        Catalog.open(settings)
    message = str(info.value)
    assert "postgresql+psycopg://hcat:***@127.0.0.1:1/catalog" in message
    assert "secret" not in message


def test_unwritable_sqlite_location_names_the_path(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    settings = load_settings(home=tmp_path, db_url=f"sqlite:///{blocker}/sub/catalog.db")
    with pytest.raises(StoreUnavailableError, match=str(blocker)):
        Catalog.open(settings)
