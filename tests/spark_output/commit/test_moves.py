"""apply_moves / undo_moves / moves_done for an append to a partition that does not exist
yet: the staged directory is renamed whole unless a concurrent append created the
partition meanwhile, and undo puts back exactly this job's files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pyarrow import fs as pafs

from hcat_notify import Catalog, PartitionSpec, load_settings
from spark_output.commit import moves
from spark_output.commit.committer import PartitionCommitter, StagedPartition
from spark_output.commit.moves import apply_moves, moves_done, undo_moves
from spark_output.commit.plan import CommitPlan, FileMove, MoveKind, Owner, PartitionMove
from spark_output.fs import list_data_files, remove_empty_dir

NAMES = ("part-00000-a.parquet", "part-00001-a.parquet", "_hcat_compaction-job.json")


def _stage(root: Path) -> tuple[CommitPlan, Path, Path]:
    staged = root / "_hcat_staging" / "job" / "region=us"
    staged.mkdir(parents=True)
    for name in NAMES:
        (staged / name).write_text(name)
    for name in NAMES[:2]:
        (staged / f".{name}.crc").write_text("crc")
    final = root / "region=us"
    entry = PartitionMove(
        spec="region=us",
        staged=str(staged),
        final=str(final),
        file_count=2,
        bytes=40,
        kind=MoveKind.FILES,
        new_dir=True,
        whole_dir=True,
        files=tuple(FileMove(str(staged / name), str(final / name)) for name in NAMES),
    )
    plan = CommitPlan(
        owner=Owner("h", 1),
        staging=str(root / "_hcat_staging" / "job"),
        trash=str(root / "_hcat_trash" / "job"),
        table_path=str(root),
        table_uri=str(root),
        partitions=(entry,),
    )
    return plan, staged, final


def _listing(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def test_a_new_partition_is_renamed_whole_with_its_sidecars(tmp_path: Path) -> None:
    filesystem = pafs.LocalFileSystem()
    plan, staged, final = _stage(tmp_path)

    apply_moves(filesystem, plan)

    assert not staged.exists()
    assert _listing(final) == sorted(
        [*NAMES, ".part-00000-a.parquet.crc", ".part-00001-a.parquet.crc"]
    )
    assert moves_done(filesystem, plan)


def test_a_partition_created_meanwhile_gets_the_files_one_by_one(tmp_path: Path) -> None:
    filesystem = pafs.LocalFileSystem()
    plan, staged, final = _stage(tmp_path)
    final.mkdir()
    (final / "part-00000-other.parquet").write_text("theirs")  # a concurrent append

    apply_moves(filesystem, plan)

    assert _listing(final) == sorted([*NAMES, "part-00000-other.parquet"])
    assert (final / "part-00000-other.parquet").read_text() == "theirs"
    assert _listing(staged) == [".part-00000-a.parquet.crc", ".part-00001-a.parquet.crc"]
    assert moves_done(filesystem, plan)


def test_undo_of_a_whole_rename_puts_back_files_and_sidecars_and_removes_the_partition(
    tmp_path: Path,
) -> None:
    filesystem = pafs.LocalFileSystem()
    plan, staged, final = _stage(tmp_path)
    apply_moves(filesystem, plan)

    undo_moves(filesystem, plan)
    undo_moves(filesystem, plan)  # recovery may run it again

    assert not final.exists()
    assert _listing(staged) == sorted(
        [*NAMES, ".part-00000-a.parquet.crc", ".part-00001-a.parquet.crc"]
    )
    assert not moves_done(filesystem, plan)


def test_undo_leaves_a_concurrent_writers_files_where_they_are(tmp_path: Path) -> None:
    filesystem = pafs.LocalFileSystem()
    plan, staged, final = _stage(tmp_path)
    apply_moves(filesystem, plan)
    (final / "part-00000-other.parquet").write_text("theirs")  # appended after our rename

    undo_moves(filesystem, plan)

    assert _listing(final) == ["part-00000-other.parquet"]
    assert set(NAMES) <= set(_listing(staged))


def test_a_move_that_fails_before_any_rename_is_raised_and_changes_nothing(
    tmp_path: Path,
) -> None:
    filesystem = pafs.LocalFileSystem()
    plan, staged, _ = _stage(tmp_path)
    blocker = tmp_path / "date=1"
    blocker.write_text("a file where the partition's parent directory should be")
    entry = plan.partitions[0]
    final = blocker / "region=us"
    entry = dataclasses.replace(
        entry,
        final=str(final),
        files=tuple(FileMove(m.source, str(final / Path(m.target).name)) for m in entry.files),
    )

    with pytest.raises(OSError, match="date=1"):
        apply_moves(filesystem, dataclasses.replace(plan, partitions=(entry,)))

    assert set(NAMES) <= set(_listing(staged))
    assert blocker.read_text().startswith("a file")


def test_two_writers_past_the_check_the_second_rename_fails_and_moves_file_by_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    filesystem = pafs.LocalFileSystem()
    plan, staged, final = _stage(tmp_path)
    final.mkdir()
    (final / "part-00000-other.parquet").write_text("theirs")  # renamed in by the other
    real_exists = moves.PlanPaths.exists

    first = {"seen": False}

    def before_the_other_rename(  # the first check ran before the other writer's rename
        paths: moves.PlanPaths, path: str
    ) -> bool:
        if path == str(final) and not first["seen"]:
            first["seen"] = True
            return False
        return real_exists(paths, path)

    monkeypatch.setattr(moves.PlanPaths, "exists", before_the_other_rename)

    apply_moves(filesystem, plan)

    assert first["seen"]
    assert _listing(final) == sorted([*NAMES, "part-00000-other.parquet"])
    assert _listing(staged) == [".part-00000-a.parquet.crc", ".part-00001-a.parquet.crc"]
    assert (final / "part-00000-other.parquet").read_text() == "theirs"
    monkeypatch.setattr(moves.PlanPaths, "exists", real_exists)
    assert moves_done(filesystem, plan)


def test_remove_empty_dir_never_deletes_a_file(tmp_path: Path) -> None:
    filesystem = pafs.LocalFileSystem()
    full, empty = tmp_path / "full", tmp_path / "empty"
    full.mkdir()
    empty.mkdir()
    (full / "part-0.parquet").write_text("data")

    assert not remove_empty_dir(filesystem, str(full))
    assert remove_empty_dir(filesystem, str(empty))
    assert not remove_empty_dir(filesystem, str(tmp_path / "missing"))

    assert (full / "part-0.parquet").read_text() == "data"
    assert not empty.exists()


def test_the_plan_of_a_new_partition_renames_it_whole_with_its_manifest(tmp_path: Path) -> None:
    with Catalog.open(load_settings(home=tmp_path / "home", db_url=None)) as catalog:
        table = catalog.create_table(
            "web.clicks", location=str(tmp_path / "clicks"), partition_keys=["region"]
        )
        committer = PartitionCommitter(catalog, table, job_id="job", mode="append")
        directory = tmp_path / "clicks" / "_hcat_staging" / "job" / "region=us"
        directory.mkdir(parents=True)
        (directory / "part-00000-a.parquet").write_text("rows")
        (directory / "_hcat_compaction.json").write_text("{}")
        staged = StagedPartition(
            PartitionSpec.parse("region=us"),
            str(directory),
            list_data_files(pafs.LocalFileSystem(), str(directory)),
        )

        first = committer.plan([staged], mark_set_done=None).partitions[0]
        again = committer.plan([staged], mark_set_done=None).partitions[0]

    assert (first.kind, first.new_dir, first.whole_dir) == (MoveKind.FILES, True, True)
    assert again == first  # a second plan of the same staging finds the renamed manifest
    assert [Path(move.target).name for move in first.files] == [
        "part-00000-a.parquet",
        "_hcat_compaction-job.json",
    ]
    assert all(Path(move.source).parent == directory for move in first.files)
    assert sorted(path.name for path in directory.iterdir()) == [
        "_hcat_compaction-job.json",
        "part-00000-a.parquet",
    ]
