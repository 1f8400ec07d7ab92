"""The trust boundary between tables (SQLite and PostgreSQL): a managed table's or
partition's location may not be at, inside or around another table's; a purge keeps a
directory that holds, or lies inside, another registered location (also in a catalog
registered before that check, and through a symlinked warehouse root); an overwrite
never trashes another table's directory; partition locations are stored canonical, and
bad ones are refused with one line, nothing written. docs/operations.md, "Warehouse
roots"."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hcat_notify.config import load_settings
from hcat_notify.errors import InvalidInputError, LocationOutsideWarehouseError
from hcat_notify.lifecycle import drop_partitions, drop_table
from hcat_notify.store import Catalog, NewPartition
from tests.counts import row_counts
from tests.older_locations import as_an_older_version_stored

pytestmark = pytest.mark.integration


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    root = tmp_path / "wh"
    root.mkdir()
    return root


@pytest.fixture
def cat(db_url: str, tmp_path: Path, warehouse: Path) -> Iterator[Catalog]:
    settings = load_settings(
        home=tmp_path / "home", db_url=db_url, warehouse_roots=[str(warehouse)]
    )
    with Catalog.open(settings) as catalog:
        yield catalog


def _each_refused(attempts: Sequence[tuple[Callable[[], object], str]]) -> list[str]:
    """Each attempt's one-line refusal (matching its pattern)."""
    messages = []
    for attempt, problem in attempts:
        with pytest.raises(InvalidInputError, match=problem) as caught:
            attempt()
        assert "\n" not in str(caught.value)
        messages.append(str(caught.value))
    return messages


def _data(directory: Path, text: str = "precious") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "part-0.parquet").write_text(text)
    return directory / "part-0.parquet"


def _part(spec: str, location: str) -> NewPartition:
    key, _, value = spec.partition("=")
    return NewPartition({key: value}, location, file_count=1, total_bytes=8)


# -- finding 7: registration ------------------------------------------------------------------


def test_a_managed_location_at_inside_or_around_another_tables_is_refused(
    cat: Catalog, warehouse: Path
):
    cat.create_table("db.a", location=str(warehouse / "g/a"), partition_keys=["p"])
    cat.create_table(
        "db.e", location=str(warehouse / "ext"), partition_keys=["p"], table_type="EXTERNAL_TABLE"
    )
    cat.create_table("db.b", location=str(warehouse / "b"), partition_keys=["q"])
    before = row_counts(cat)

    def create(name: str, location: str) -> None:
        cat.create_table(name, location=location, partition_keys=["p"])

    refused = [
        (lambda: create("db.m2", str(warehouse / "ext/p=2")),
         r"'.*/wh/ext/p=2' lies inside the location of table db\.e"),
        (lambda: create("db.m3", str(warehouse / "g")),
         r"'.*/wh/g' contains the location of table db\.a"),
        (lambda: create("db.m4", f"file://{warehouse}/g/a/"),
         r"is already the location of table db\.a"),
        # A's unregistered partition, A's in-flight staging: B's partitions may not go there
        (lambda: cat.add_partitions("db.b", [_part("q=1", str(warehouse / "g/a/p=2"))]),
         r"partition q=1 of db\.b '.*/wh/g/a/p=2' lies inside the location of table db\.a"),
        (lambda: cat.add_partitions("db.b", [_part("q=2", f"file://{warehouse}/g/a/_hcat_staging/job1/p=3")]),
         r"has a '_hcat_staging' segment: that is a table's hidden job directory"),
        (lambda: cat.add_partitions("db.b", [_part("q=3", str(warehouse / "g"))]),
         r"'.*/wh/g' contains the location of table db\.a"),
        # the same place is said as such (it "lay inside" before)
        (lambda: cat.add_partitions("db.b", [_part("q=4", str(warehouse / "g/a"))]),
         r"partition q=4 of db\.b '.*/wh/g/a' is the same location as table db\.a \("),
    ]  # fmt: skip
    for message in _each_refused(refused):
        assert "nothing was registered" in message or "already" in message
    assert row_counts(cat) == before
    # what is normal stays allowed: a table's partitions inside its location or at
    # distinct paths elsewhere in the roots; an external table anywhere
    cat.add_partitions(
        "db.b",
        [_part("q=1", str(warehouse / "b/q=1")), _part("q=2", str(warehouse / "b_old/q=2"))],
    )
    cat.create_table(
        "db.e2",
        location=str(warehouse / "a/p=9"),
        partition_keys=["p"],
        table_type="EXTERNAL_TABLE",
    )


# -- finding 7: the purge -----------------------------------------------------------------------


def test_a_purge_keeps_directories_inside_another_tables_location(cat: Catalog, warehouse: Path):
    victim = _data(warehouse / "ext/p=2")  # the external table's data, not registered yet
    unregistered = _data(warehouse / "a/p=2")  # table a's data, not registered yet
    cat.create_table(
        "db.e", location=str(warehouse / "ext"), partition_keys=["p"], table_type="EXTERNAL_TABLE"
    )
    cat.create_table("db.a", location=str(warehouse / "a"), partition_keys=["p"])
    cat.create_table("db.m2", location=str(warehouse / "m2"), partition_keys=["p"])
    cat.create_table("db.b", location=str(warehouse / "b"), partition_keys=["q"])
    cat.add_partitions("db.b", [_part("q=1", str(warehouse / "b/q=1"))])
    # an older version registered these, before overlaps were refused
    as_an_older_version_stored(cat, "db.m2", str(warehouse / "ext/p=2"))
    as_an_older_version_stored(cat, "db.b", f"file://{warehouse}/a/p=2", path="q=1")

    _, purged = drop_table(cat, "db.m2", purge=True)
    assert purged.deleted == []
    assert len(purged.kept) == 1
    assert "lies inside table db.e" in purged.kept[0]
    assert victim.read_text() == "precious"

    _, purged = drop_partitions(cat, "db.b", {"q": "1"}, purge=True)
    assert purged.deleted == []
    assert "lies inside table db.a" in purged.kept[0]
    assert unregistered.read_text() == "precious"


def test_a_partition_purge_still_deletes_inside_its_own_table(cat: Catalog, warehouse: Path):
    mine = _data(warehouse / "a/p=1")
    cat.create_table("db.a", location=str(warehouse / "a"), partition_keys=["p"])
    cat.add_partitions("db.a", [_part("p=1", str(warehouse / "a/p=1"))])
    _, purged = drop_partitions(cat, "db.a", {"p": "1"}, purge=True)
    assert (purged.deleted, purged.kept) == ([str(warehouse / "a/p=1")], [])
    assert not mine.exists()


# -- finding 8: symlinks ----------------------------------------------------------------------


def test_holders_are_found_through_a_symlinked_warehouse_root(db_url: str, tmp_path: Path):
    real = tmp_path / "data9" / "w"
    real.mkdir(parents=True)
    link = tmp_path / "home9" / "w"
    link.parent.mkdir()
    link.symlink_to(real)
    settings = load_settings(home=tmp_path / "home", db_url=db_url, warehouse_roots=[str(link)])
    with Catalog.open(settings) as catalog:
        kept = _data(link / "db/a/p=1")
        info = catalog.create_table("db.a", location=str(link / "db/a"), partition_keys=["p"])
        assert info.location == str(real / "db/a")  # stored resolved: one spelling
        with pytest.raises(InvalidInputError, match=r"contains the location of table db\.a"):
            catalog.create_table("db.b", location=str(real / "db"), partition_keys=["p"])
        # a catalog an older version filled: a's location stored under the link's name
        catalog.create_table("db.b", location=str(real / "b"), partition_keys=["p"])
        as_an_older_version_stored(catalog, "db.a", str(link / "db/a"))
        as_an_older_version_stored(catalog, "db.b", str(real / "db"))
        _, purged = drop_table(catalog, "db.b", purge=True)
        assert purged.deleted == []
        assert "still used by table db.a" in purged.kept[0]
        assert kept.read_text() == "precious"


# -- finding 6: an overwrite --------------------------------------------------------------------


def test_an_overwrite_of_a_directory_holding_another_table_is_refused(
    cat: Catalog, warehouse: Path
):
    victim = _data(warehouse / "db/p=x/k=1")
    cat.create_table("db.b", location=str(warehouse / "db"), partition_keys=["p"])
    cat.create_table(
        "db.a",
        location=str(warehouse / "db/p=x"),
        partition_keys=["k"],
        table_type="EXTERNAL_TABLE",
    )
    cat.add_partitions("db.a", [_part("k=1", str(warehouse / "db/p=x/k=1"))])
    before = row_counts(cat)

    def begin(job: str, spec: str) -> None:
        cat.commits.begin(
            job, "db.b", mode="overwrite", partitions=[spec], plan={}, started_at=datetime.now(UTC)
        )

    with pytest.raises(
        InvalidInputError,
        match=r"would delete the directory .*/wh/db/p=x, which holds (table|partition k=1 of) db.a",
    ) as caught:
        begin("job1", "p=x")
    assert "\n" not in str(caught.value)
    assert row_counts(cat) == before
    assert cat.commits.pending() == []
    assert victim.read_text() == "precious"
    # overwriting one of its own partitions where it lives is what an overwrite is for
    cat.add_partitions("db.b", [_part("p=y", str(warehouse / "db/p=y"))])
    begin("job2", "p=y")
    assert [entry.job_id for entry in cat.commits.pending()] == ["job2"]


# -- findings 9, 10, 11: partition locations as stored ------------------------------------------


def test_partition_locations_are_stored_canonical_and_bad_ones_refused(
    cat: Catalog, warehouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    cat.create_table("db.b", location=str(warehouse / "b"), partition_keys=["p"])
    monkeypatch.chdir(warehouse / "..")
    before = row_counts(cat)
    for location, problem in [
        ("rel", "is a relative path"),
        ("wh/b/p=1", "is a relative path"),
        (f"{warehouse}/b/x\x00y", "contains a NUL character"),
        (f"{warehouse}/b/x\ny", "contains the control character U\\+000A"),
    ]:
        with pytest.raises(InvalidInputError, match=problem) as caught:
            cat.add_partitions("db.b", [_part("p=1", location)])
        assert "\n" not in str(caught.value).replace("\\n", "")
    assert row_counts(cat) == before
    (stored,) = cat.add_partitions("db.b", [_part("p=2", f"file://{warehouse}/./b//rel/")])
    assert stored.location == f"file://{warehouse}/b/rel"
    (stored,) = cat.add_partitions("db.b", [_part("p=3", f"file:{warehouse}/b/p=3")])
    assert stored.location == f"file://{warehouse}/b/p=3"
    assert [p.location for p in cat.list_partitions("db.b")] == [
        f"file://{warehouse}/b/rel",
        f"file://{warehouse}/b/p=3",
    ]


def test_a_file_colon_table_location_is_a_uri(cat: Catalog, warehouse: Path, monkeypatch):
    monkeypatch.chdir(warehouse)
    info = cat.create_table("db.t", location=f"file:{warehouse}/t", partition_keys=["p"])
    assert info.location == f"file://{warehouse}/t"
    assert not (warehouse / "file:").exists()


# -- second review, finding 5: local: spellings; finding 6: other tables' partitions ---------


def test_a_local_uri_through_a_link_is_the_directory_it_names(cat: Catalog, warehouse: Path):
    (warehouse / "sub").mkdir()
    (warehouse / "lnk").symlink_to(warehouse / "sub")
    info = cat.create_table("web.v", location=f"LOCAL://{warehouse}/lnk", partition_keys=["p"])
    assert info.location == f"file://{warehouse}/sub"
    with pytest.raises(InvalidInputError, match=r"is already the location of table web\.v"):
        cat.create_table("web.t", location=str(warehouse / "sub"), partition_keys=["p"])


def test_a_managed_location_at_or_around_another_tables_outside_partition_is_refused(
    cat: Catalog, warehouse: Path
):
    # second review, finding 6, an indexed lookup since migration 0023 (outside_key)
    shared = warehouse / "x" / "p1"
    _data(shared)
    cat.create_table("web.b", location=str(warehouse / "b"), partition_keys=["p"])
    cat.add_partitions("web.b", [_part("p=1", str(shared))])  # B's partition outside B
    cat.create_table("web.e", location=str(warehouse / "e"), partition_keys=["q"])
    before = row_counts(cat)
    refused = [
        (lambda: cat.add_partitions("web.e", [_part("q=2", str(shared))]),
         r"partition q=2 of web\.e '.*/wh/x/p1' is the same location as partition p=1 "
         r"of web\.b \("),
        (lambda: cat.add_partitions("web.e", [_part("q=3", str(shared / "deeper"))]),
         r"lies inside the location of partition p=1 of web\.b"),
        (lambda: cat.add_partitions("web.e", [_part("q=4", str(warehouse / "x"))]),
         r"'.*/wh/x' contains the location of partition p=1 of web\.b"),
        (lambda: cat.create_table("web.a", location=str(warehouse / "x"), partition_keys=["p"]),
         r"'.*/wh/x' contains the location of partition p=1 of web\.b"),
        (lambda: cat.create_table("web.c", location=str(shared), partition_keys=["p"]),
         r"is already the location of partition p=1 of web\.b"),
    ]  # fmt: skip
    _each_refused(refused)
    assert row_counts(cat) == before
    # beside it stays allowed, and so does B's own second partition next to it
    cat.add_partitions("web.e", [_part("q=2", str(warehouse / "x" / "p2"))])
    cat.add_partitions("web.b", [_part("p=2", str(warehouse / "x" / "p3"))])


def test_a_partition_inside_its_table_at_another_tables_partition_there_is_refused(
    cat: Catalog, warehouse: Path
):
    # an external table's partitions may lie anywhere, inside a managed table too
    cat.create_table("web.m", location=str(warehouse / "m"), partition_keys=["p"])
    cat.create_table(
        "web.x", location=str(warehouse / "x"), partition_keys=["q"], table_type="EXTERNAL_TABLE"
    )
    cat.add_partitions("web.x", [_part("q=1", str(warehouse / "m" / "p=1"))])
    before = row_counts(cat)
    _each_refused([
        (lambda: cat.add_partitions("web.m", [_part("p=1", str(warehouse / "m" / "p=1"))]),
         r"partition p=1 of web\.m '.*/wh/m/p=1' is the same location as partition q=1 of "
         r"web\.x"),
        (lambda: cat.add_partitions("web.m", [_part("p=2", str(warehouse / "m"))]),
         r"'.*/wh/m' contains the location of partition q=1 of web\.x"),
    ])  # fmt: skip
    assert row_counts(cat) == before
    cat.add_partitions("web.m", [_part("p=2", str(warehouse / "m" / "p=2"))])


def test_an_external_location_around_the_warehouse_or_a_managed_table_is_refused(
    cat: Catalog, warehouse: Path
):
    # second review, finding 7: it blocked every new managed table and every purge
    cat.create_table("db.b", location=str(warehouse / "g" / "b"), partition_keys=["p"])
    before = row_counts(cat)

    def external(name: str, location: str) -> None:
        cat.create_table(name, location=location, partition_keys=["p"], table_type="EXTERNAL_TABLE")

    _each_refused([
        (lambda: external("db.e3", str(warehouse)),
         r"is or holds the warehouse root .*/wh; an external location may lie anywhere"),
        (lambda: external("db.e4", str(warehouse.parent)), r"is or holds the warehouse root"),
        (lambda: external("db.e5", str(warehouse / "g")),
         r"'.*/wh/g' contains the location of managed table db\.b"),
    ])  # fmt: skip
    assert row_counts(cat) == before
    external("db.e6", str(warehouse / "g" / "b" / "inside"))  # inside a managed one: as before
    external("db.e7", str(warehouse / "e7"))
    external("db.e8", str(warehouse / "e7" / "nested"))  # external inside external: as before


# -- third review, LOW-MEDIUM: an append re-checks the partition's stored location -----------


def test_an_append_through_a_link_planted_in_a_partition_is_refused(
    cat: Catalog, warehouse: Path, tmp_path: Path
):
    outside = tmp_path / "outside"
    outside.mkdir()
    cat.create_table("db.t", location=str(warehouse / "t"), partition_keys=["p"])
    cat.add_partitions(
        "db.t", [_part("p=1", str(warehouse / "t/p=1")), _part("p=2", str(warehouse / "t/p=2"))]
    )
    (warehouse / "t").mkdir()
    (warehouse / "t/p=1").symlink_to(outside)  # planted after the registration

    def begin(job: str, spec: str) -> None:
        cat.commits.begin(
            job, "db.t", mode="append", partitions=[spec], plan={}, started_at=datetime.now(UTC)
        )

    with pytest.raises(LocationOutsideWarehouseError, match=r"partition p=1 of db\.t .*"
                       r"resolves through a symlink to .*/outside") as caught:  # fmt: skip
        begin("job1", "p=1")
    assert "\n" not in str(caught.value)
    assert cat.commits.pending() == []
    # journalled before the link was planted: the registration refuses it too
    begin("job2", "p=2")
    (warehouse / "t/p=2").symlink_to(outside)
    before = [(p.file_count, p.version) for p in cat.list_partitions("db.t")]
    with pytest.raises(LocationOutsideWarehouseError, match="resolves through a symlink"):
        cat.commits.complete("job2", [_part("p=2", str(warehouse / "t/p=2"))])
    assert [(p.file_count, p.version) for p in cat.list_partitions("db.t")] == before
    assert [entry.job_id for entry in cat.commits.pending()] == ["job2"]


def test_an_overwrite_in_place_completes_when_another_table_registered_there_meanwhile(
    cat: Catalog, warehouse: Path
):
    # the partition check of 0023 is for new places: an overwrite that keeps its
    # partition where it is makes no new overlap (the committer keeps its trash for the
    # other table; tests/spark_output/commit/test_move_links.py)
    cat.create_table("db.t", location=str(warehouse / "t"), partition_keys=["p"])
    cat.add_partitions("db.t", [_part("p=1", str(warehouse / "t/p=1"))])
    cat.create_table(
        "db.x", location=str(warehouse / "x"), partition_keys=["q"], table_type="EXTERNAL_TABLE"
    )
    cat.commits.begin(
        "job1", "db.t", mode="overwrite", partitions=["p=1"], plan={}, started_at=datetime.now(UTC)
    )
    cat.add_partitions("db.x", [_part("q=1", str(warehouse / "t/p=1"))])
    cat.commits.complete("job1", [_part("p=1", str(warehouse / "t/p=1"))])
    assert [p.version for p in cat.list_partitions("db.t")] == [2]
    with pytest.raises(InvalidInputError, match=r"is the same location as partition q=1 of db\.x"):
        cat.add_partitions("db.t", [_part("p=2", str(warehouse / "t/p=1"))])
