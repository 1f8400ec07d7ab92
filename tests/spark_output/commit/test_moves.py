"""apply_moves / undo_moves / moves_done for an append to a partition that does not exist
yet: the staged directory is renamed whole unless a concurrent append created the
partition meanwhile, and undo puts back exactly this job's files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pyarrow import fs as pafs

from spark_output.commit.moves import apply_moves, moves_done, undo_moves
from spark_output.commit.plan import CommitPlan, FileMove, MoveKind, Owner, PartitionMove

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
    assert moves_done(filesystem, plan.partitions[0])


def test_a_partition_created_meanwhile_gets_the_files_one_by_one(tmp_path: Path) -> None:
    filesystem = pafs.LocalFileSystem()
    plan, staged, final = _stage(tmp_path)
    final.mkdir()
    (final / "part-00000-other.parquet").write_text("theirs")  # a concurrent append

    apply_moves(filesystem, plan)

    assert _listing(final) == sorted([*NAMES, "part-00000-other.parquet"])
    assert (final / "part-00000-other.parquet").read_text() == "theirs"
    assert _listing(staged) == [".part-00000-a.parquet.crc", ".part-00001-a.parquet.crc"]
    assert moves_done(filesystem, plan.partitions[0])


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
    assert not moves_done(filesystem, plan.partitions[0])


def test_undo_leaves_a_concurrent_writers_files_where_they_are(tmp_path: Path) -> None:
    filesystem = pafs.LocalFileSystem()
    plan, staged, final = _stage(tmp_path)
    apply_moves(filesystem, plan)
    (final / "part-00000-other.parquet").write_text("theirs")  # appended after our rename

    undo_moves(filesystem, plan)

    assert _listing(final) == ["part-00000-other.parquet"]
    assert set(NAMES) <= set(_listing(staged))


def test_a_failed_rename_that_is_not_a_collision_is_raised_and_undone(tmp_path: Path) -> None:
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
