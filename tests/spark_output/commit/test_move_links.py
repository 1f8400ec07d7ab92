"""The committer's moves never follow a link planted meanwhile (third trust review, the
race: ow_race.py). A link planted in a component of a target before the moves, or
between two partitions' moves, is refused with one error naming it; nothing further is
moved, what was moved is put back, and nothing outside the warehouse changes."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from hcat_notify import (
    Catalog,
    NewPartition,
    PartitionSpec,
    TableInfo,
    load_settings,
    register_partitions,
)
from hcat_notify.errors import UnsafeMoveError
from spark_output.commit import committer as committer_module
from spark_output.commit.committer import PartitionCommitter
from spark_output.commit.moves import PlanPaths, apply_moves
from spark_output.commit.recovery import recover
from tests.older_locations import as_an_older_version_stored


@contextmanager
def _planted(directory: Path, target: Path) -> Iterator[None]:
    """``directory`` swapped for a link to ``target`` (the attacker), then swapped back."""
    directory.rename(directory.with_name(directory.name + ".real"))
    directory.symlink_to(target)
    try:
        yield
    finally:  # so that a write that followed the link would go on and commit
        directory.unlink()
        directory.with_name(directory.name + ".real").rename(directory)


def _overwrite(tmp_path: Path, table_dir: Path, groups: list[str], hook: Callable[[], None]) -> str:
    """An overwrite of ``g=<group>/p=1`` (each registered, holding ``part-0`` "old"), with
    ``hook`` installed before the commit; returns the error it raised, once checked that
    the write was undone and closed."""
    with Catalog.open(load_settings(home=tmp_path / "home", db_url=None)) as catalog:
        table = catalog.create_table("web.t", location=str(table_dir), partition_keys=["g", "p"])
        for group in groups:
            old = table_dir / f"g={group}" / "p=1"
            old.mkdir(parents=True)
            (old / "part-0.parquet").write_text("old")
            register_partitions(catalog, "web.t", [({"g": group, "p": "1"}, str(old))])
        committer = PartitionCommitter(catalog, table, job_id="job1", mode="overwrite")
        for group in groups:
            staged = Path(committer.staging) / f"g={group}" / "p=1"
            staged.mkdir(parents=True)
            (staged / "part-00000-x.parquet").write_text("new")
        hook()
        with pytest.raises(UnsafeMoveError) as raised:
            committer.commit(
                started_at=catalog.now(), max_partitions=10, mark_set_done=None,
                compact=None, phases={},
            )  # fmt: skip
        assert catalog.commits.pending() == []  # undone and closed
        assert [p.location for p in catalog.partitions.list("web.t")] == [
            f"file://{table_dir}/g={group}/p=1" for group in groups
        ]
    return str(raised.value)


def _as_it_was(table_dir: Path, groups: list[str]) -> None:
    """Every partition holds its old file only; the job's directories are gone."""
    for group in groups:
        assert os.listdir(table_dir / f"g={group}" / "p=1") == ["part-0.parquet"]
    assert sorted(os.listdir(table_dir)) == [f"g={group}" for group in groups]


def _victim_unchanged(victim: Path) -> None:
    assert sorted(os.listdir(victim)) == ["data", "p=1"]
    assert os.listdir(victim / "p=1") == ["precious"]
    assert (victim / "p=1" / "precious").read_text() == "outside"


def test_a_link_planted_before_the_moves_is_refused(
    tmp_path: Path, narrow_warehouse: Path, victim: Path, monkeypatch: pytest.MonkeyPatch
):
    table_dir = narrow_warehouse / "t"
    (victim / "p=1").mkdir()
    (victim / "p=1" / "precious").write_text("outside")
    real = apply_moves

    def planted_then_moved(*args: Any, **kwargs: Any) -> None:
        with _planted(table_dir / "g=1", victim):
            real(*args, **kwargs)

    def install() -> None:
        monkeypatch.setattr(committer_module, "apply_moves", planted_then_moved)

    error = _overwrite(tmp_path, table_dir, ["1"], install)
    assert error == f"{table_dir}/g=1 is a symbolic link; nothing is moved through or as a link"
    _as_it_was(table_dir, ["1"])
    _victim_unchanged(victim)


def test_a_link_planted_between_two_partitions_moves_is_refused_and_the_first_undone(
    tmp_path: Path, narrow_warehouse: Path, victim: Path, monkeypatch: pytest.MonkeyPatch
):
    table_dir = narrow_warehouse / "t"
    (victim / "p=1").mkdir()
    (victim / "p=1" / "precious").write_text("outside")
    real_apply, real_move = apply_moves, PlanPaths.move
    made: list[str] = []

    def plant_after_the_first_partition(paths: PlanPaths, source: str, target: str, **kw: Any):
        if len(made) == 2:  # g=1/p=1 to the trash, then the staged g=1/p=1 in its place
            (table_dir / "g=2").rename(table_dir / "g=2.real")
            (table_dir / "g=2").symlink_to(victim)
        made.append(target)
        real_move(paths, source, target, **kw)

    def moved_then_swapped_back(*args: Any, **kwargs: Any) -> None:
        try:
            real_apply(*args, **kwargs)
        finally:  # so that a write that followed the link would go on and commit
            (table_dir / "g=2").unlink()
            (table_dir / "g=2.real").rename(table_dir / "g=2")

    def install() -> None:
        monkeypatch.setattr(PlanPaths, "move", plant_after_the_first_partition)
        monkeypatch.setattr(committer_module, "apply_moves", moved_then_swapped_back)

    error = _overwrite(tmp_path, table_dir, ["1", "2"], install)
    assert error == f"{table_dir}/g=2 is a symbolic link; nothing is moved through or as a link"
    assert made[:2] == [f"{table_dir}/_hcat_trash/job1/g=1/p=1", f"{table_dir}/g=1/p=1"]
    _as_it_was(table_dir, ["1", "2"])
    _victim_unchanged(victim)


@pytest.mark.parametrize("where", ["in the trash", "at the partition"])
def test_the_trash_is_kept_when_another_table_holds_what_it_replaced(
    tmp_path: Path, narrow_warehouse: Path, monkeypatch: pytest.MonkeyPatch, where: str
):
    # the committer deleted its trash without asking, as every purge does, whether
    # another table holds it: an external table's partition registered in the trash
    # (or, once the overwrite's check passed, at the partition it replaces) lost its files
    table_dir = narrow_warehouse / "t"
    old = table_dir / "g=1" / "p=1"
    trashed = table_dir / "_hcat_trash" / "job1" / "g=1" / "p=1"
    with Catalog.open(load_settings(home=tmp_path / "home", db_url=None)) as catalog:
        table = catalog.create_table("web.t", location=str(table_dir), partition_keys=["g", "p"])
        old.mkdir(parents=True)
        (old / "part-0.parquet").write_text("old")
        register_partitions(catalog, "web.t", [({"g": "1", "p": "1"}, str(old))])
        catalog.create_table(
            "web.x", location=str(tmp_path / "x"), partition_keys=["q"],
            table_type="EXTERNAL_TABLE",
        )  # fmt: skip
        held = str(trashed if where == "in the trash" else old)

        def registered_meanwhile(*args: Any, **kwargs: Any) -> None:
            new = NewPartition(PartitionSpec.parse("q=1"), held, file_count=1, total_bytes=3)
            if where == "in the trash":  # refused today: by an older version
                new = NewPartition(new.spec, str(tmp_path / "x" / "q=1"), 1, 3)
            catalog.partitions.register("web.x", [new])  # as the API registers (sizes given)
            as_an_older_version_stored(catalog, "web.x", held, path="q=1")
            apply_moves(*args, **kwargs)

        monkeypatch.setattr(committer_module, "apply_moves", registered_meanwhile)
        committer = PartitionCommitter(catalog, table, job_id="job1", mode="overwrite")
        staged = Path(committer.staging) / "g=1" / "p=1"
        staged.mkdir(parents=True)
        (staged / "part-00000-x.parquet").write_text("new")
        committer.commit(
            started_at=catalog.now(), max_partitions=10, mark_set_done=None, compact=None,
            phases={},
        )  # fmt: skip
    assert (trashed / "part-0.parquet").read_text() == "old"  # kept, hidden from readers
    assert os.listdir(old) == ["part-00000-x.parquet"]
    assert not Path(committer.staging).exists()


def _append_g1(catalog: Catalog, table: TableInfo) -> PartitionCommitter:
    """An append of ``g=1`` (one staged file, and ``_SUCCESS``) by job ``job1``, committed."""
    committer = PartitionCommitter(catalog, table, job_id="job1", mode="append")
    staged = Path(committer.staging) / "g=1"
    staged.mkdir(parents=True)
    (staged / "part-00000-x.parquet").write_text("new")
    (Path(committer.staging) / "_SUCCESS").write_text("")
    committer.commit(
        started_at=catalog.now(), max_partitions=10, mark_set_done=None, compact=None,
        phases={},
    )  # fmt: skip
    return committer


@pytest.mark.parametrize(
    ("job_dir", "outcome"),
    [("_hcat_trash", "committed"), ("_hcat_staging", "committed"), ("_hcat_trash", "failed")],
)
def test_an_appends_cleanup_keeps_a_job_directory_another_table_holds(
    tmp_path: Path, narrow_warehouse: Path, job_dir: str, outcome: str
):
    # fifth review, finding 4: only an overwrite asked who holds its trash; an append's,
    # an import's and a failed write's cleanup deleted an external table registered in
    # the job's (predictable) staging or trash directory
    table_dir = narrow_warehouse / "t"
    external = table_dir / job_dir / "job1" / "_x"  # hidden: no staged partition
    (external / "q=1").mkdir(parents=True)
    (external / "q=1" / "part-0.parquet").write_text("external")
    with Catalog.open(load_settings(home=tmp_path / "home", db_url=None)) as catalog:
        table = catalog.create_table("web.t", location=str(table_dir), partition_keys=["g"])
        catalog.create_table(  # in a job directory: refused today, so by an older version
            "web.x", location=str(tmp_path / "e"), partition_keys=["q"],
            table_type="EXTERNAL_TABLE",
        )  # fmt: skip
        new = NewPartition(PartitionSpec.parse("q=1"), str(tmp_path / "e" / "q=1"), 1, 8)
        catalog.partitions.register("web.x", [new])
        as_an_older_version_stored(catalog, "web.x", str(external))
        as_an_older_version_stored(catalog, "web.x", str(external / "q=1"), path="q=1")
        committer = PartitionCommitter(catalog, table, job_id="job1", mode="append")
        staged = Path(committer.staging) / "g=1"
        staged.mkdir(parents=True)
        (staged / "part-00000-x.parquet").write_text("new")
        if outcome == "committed":
            committer.commit(
                started_at=catalog.now(), max_partitions=10, mark_set_done=None, compact=None,
                phases={},
            )  # fmt: skip
            assert os.listdir(table_dir / "g=1") == ["part-00000-x.parquet"]
        else:
            committer.cleanup()  # a write that failed before its commit
            assert not staged.exists()
    assert (external / "q=1" / "part-0.parquet").read_text() == "external"
    other = "_hcat_staging" if job_dir == "_hcat_trash" else "_hcat_trash"
    assert not (table_dir / other / "job1").exists()  # the job's other directory: removed


def test_a_partition_registered_around_the_table_keeps_no_job_directory(
    tmp_path: Path, narrow_warehouse: Path
):
    # a location at or around the table's own holds none of a job's directories: an
    # external table's partition registered around the table (not checked at
    # registration) would otherwise keep every job's staging and trash
    around = narrow_warehouse / "x"
    (around / "d.parquet").parent.mkdir()
    (around / "d.parquet").write_text("d")
    with Catalog.open(load_settings(home=tmp_path / "home", db_url=None)) as catalog:
        table = catalog.create_table("web.t", location=str(around / "t"), partition_keys=["g"])
        catalog.create_table(
            "web.x", location=str(tmp_path / "e"), partition_keys=["q"],
            table_type="EXTERNAL_TABLE",
        )  # fmt: skip
        register_partitions(catalog, "web.x", {"q=1": str(around)})
        _append_g1(catalog, table)
    assert sorted(os.listdir(around / "t")) == ["g=1"]


@pytest.mark.parametrize(
    ("job_dir", "registered"),
    [("_hcat_trash", "table"), ("_hcat_trash", "partition"), ("_hcat_staging", "table")],
)
def test_a_location_between_the_table_and_a_job_directory_keeps_it(
    tmp_path: Path,
    narrow_warehouse: Path,
    caplog: pytest.LogCaptureFixture,
    job_dir: str,
    registered: str,
):
    # sixth review, finding 3 (t11_import_trash_around.sh): an external table registered
    # at <table>/_hcat_trash, around the job's (predictable) trash, lost the files it
    # holds there: the cleanup took every location around a job directory for the
    # table's own. Only the table's location (and what contains it) is.
    table_dir = narrow_warehouse / "t"
    around = table_dir / job_dir
    held = around / "job1" / "_x" / "part-0.parquet"  # hidden: no staged partition
    held.parent.mkdir(parents=True)
    held.write_text("external")
    with Catalog.open(load_settings(home=tmp_path / "home", db_url=None)) as catalog:
        table = catalog.create_table("web.t", location=str(table_dir), partition_keys=["g"])
        # registered as an older version did: a location in a table's job directories is
        # refused today (h-keys2), but a catalog may hold one from before
        catalog.create_table(
            "web.x", location=str(tmp_path / "e"), partition_keys=["q"],
            table_type="EXTERNAL_TABLE",
        )  # fmt: skip
        if registered == "table":
            as_an_older_version_stored(catalog, "web.x", str(around))
        else:
            new = NewPartition(
                PartitionSpec.parse("q=1"), str(tmp_path / "e" / "q=1"), file_count=1,
                total_bytes=8,
            )  # fmt: skip
            catalog.partitions.register("web.x", [new])  # as the API registers (sizes given)
            as_an_older_version_stored(catalog, "web.x", str(around), path="q=1")
        _append_g1(catalog, table)
    assert os.listdir(table_dir / "g=1") == ["part-00000-x.parquet"]
    assert held.read_text() == "external"
    assert f"kept {around / 'job1'}: " in caplog.text  # and said so, naming its user
    assert "web.x" in caplog.text
    other = "_hcat_staging" if job_dir == "_hcat_trash" else "_hcat_trash"
    assert not (table_dir / other).exists()  # the job's other directory: removed


def test_a_staged_partition_reached_through_a_link_is_refused_before_compaction(
    tmp_path: Path, narrow_warehouse: Path, victim: Path
):
    # write-time compaction merges a staged partition's files and deletes the originals:
    # through a link planted in the staging, it deleted the files of the link's target
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_output.compaction.policy import CompactionPolicy
    from spark_output.compaction.staged import compact_staged

    outside = victim / "g" / "p=1"
    outside.mkdir(parents=True)
    for name in ("part-0.parquet", "part-1.parquet"):
        pq.write_table(pa.table({"id": [1, 2]}), outside / name)
    table_dir = narrow_warehouse / "t"
    with Catalog.open(load_settings(home=tmp_path / "home", db_url=None)) as catalog:
        table = catalog.create_table("web.t", location=str(table_dir), partition_keys=["g", "p"])
        committer = PartitionCommitter(catalog, table, job_id="job1", mode="append")
        staging = Path(committer.staging)
        staging.mkdir(parents=True)
        (staging / "g=1").symlink_to(victim / "g")
        policy = CompactionPolicy(min_files=2)

        def compact(fs: Any, staged: Any) -> Any:
            return compact_staged(fs, staged, policy=policy, storage_format="parquet")

        with pytest.raises(UnsafeMoveError, match=f"^{staging}/g=1 is a symbolic link"):
            committer.commit(
                started_at=catalog.now(), max_partitions=10, mark_set_done=None,
                compact=compact, phases={},
            )  # fmt: skip
        assert catalog.commits.pending() == []
    assert sorted(os.listdir(outside)) == ["part-0.parquet", "part-1.parquet"]


def test_what_cannot_be_put_back_without_a_link_stays_pending_for_recover(
    tmp_path: Path, narrow_warehouse: Path, victim: Path, monkeypatch: pytest.MonkeyPatch
):
    # the link is planted where the first partition was moved: its undo is refused too;
    # the entry stays pending with the staging and the trash (the old partition), and
    # recover puts everything back once the link is gone
    table_dir = narrow_warehouse / "t"
    (victim / "p=1").mkdir()
    (victim / "p=1" / "precious").write_text("outside")
    real_move = PlanPaths.move
    made: list[str] = []

    def plant_after_the_first_partition(paths: PlanPaths, source: str, target: str, **kw: Any):
        if len(made) == 2:  # g=1/p=1 swapped; g=1/p=2 is next, under the same g=1
            (table_dir / "g=1").rename(table_dir / "g=1.real")
            (table_dir / "g=1").symlink_to(victim)
        made.append(target)
        real_move(paths, source, target, **kw)

    monkeypatch.setattr(PlanPaths, "move", plant_after_the_first_partition)
    with Catalog.open(load_settings(home=tmp_path / "home", db_url=None)) as catalog:
        table = catalog.create_table("web.t", location=str(table_dir), partition_keys=["g", "p"])
        for spec in ("p=1", "p=2"):
            old = table_dir / "g=1" / spec
            old.mkdir(parents=True)
            (old / "part-0.parquet").write_text("old")
            register_partitions(catalog, "web.t", [({"g": "1", "p": spec[2:]}, str(old))])
        committer = PartitionCommitter(catalog, table, job_id="job1", mode="overwrite")
        for spec in ("p=1", "p=2"):
            (Path(committer.staging) / "g=1" / spec).mkdir(parents=True)
            (Path(committer.staging) / "g=1" / spec / "part-00000-x.parquet").write_text("new")
        with pytest.raises(UnsafeMoveError) as raised:
            committer.commit(
                started_at=catalog.now(), max_partitions=10, mark_set_done=None,
                compact=None, phases={},
            )  # fmt: skip
        link = f"{table_dir}/g=1 is a symbolic link; nothing is moved through or as a link"
        assert str(raised.value) == (
            f"{link}; undoing the write was refused too, and it stays pending "
            f"(hcat-notify recover reports it): {link}"
        )
        assert [entry.job_id for entry in catalog.commits.pending()] == ["job1"]
        _victim_unchanged(victim)
        assert os.listdir(table_dir / "_hcat_trash" / "job1" / "g=1" / "p=1") == ["part-0.parquet"]
        monkeypatch.undo()
        (table_dir / "g=1").unlink()  # the operator removes the link
        (table_dir / "g=1.real").rename(table_dir / "g=1")
        (outcome,) = recover(catalog, force=True)
        assert outcome.action == "rolled back"
    _as_it_was(table_dir, ["1"])
    assert sorted(os.listdir(table_dir / "g=1")) == ["p=1", "p=2"]
    assert os.listdir(table_dir / "g=1" / "p=2") == ["part-0.parquet"]
    _victim_unchanged(victim)
