"""Compaction never copies what a link planted in a partition points to: a partition
holding a visible link is refused by name (nothing archived or merged, the link and its
target left alone), and a link planted after the listing is not read (``O_NOFOLLOW``)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from hcat_notify.errors import LinkInPartitionError
from spark_output.compaction.har import create_har
from spark_output.compaction.partition import compact_partition
from spark_output.compaction.policy import CompactionPolicy
from spark_output.compaction.read import parquet_or_orc_rows, read_batches
from spark_output.fs import link_or_copy

LOCAL = pafs.LocalFileSystem()


def _partition(tmp_path: Path) -> tuple[Path, Path]:
    """Three small Parquet files, and a link ``part-9.parquet`` to a file outside."""
    directory = tmp_path / "t" / "k=1"
    directory.mkdir(parents=True)
    for number in range(3):
        pq.write_table(pa.table({"x": [number]}), directory / f"part-{number}.parquet")
    secret = tmp_path / "outside_secret.parquet"
    pq.write_table(pa.table({"x": [123456]}), secret)
    (directory / "part-9.parquet").symlink_to(secret)
    return directory, secret


def _state(directory: Path) -> dict[str, str]:
    return {p.name: str(p.readlink()) if p.is_symlink() else "file" for p in directory.iterdir()}


@pytest.mark.parametrize("mode", ["har", "merge"])
def test_a_partition_holding_a_link_is_not_compacted(
    tmp_path: Path, mode: Literal["merge", "har"]
) -> None:
    directory, secret = _partition(tmp_path)
    before = _state(directory)
    policy = CompactionPolicy(mode=mode, min_files=2)
    with pytest.raises(LinkInPartitionError, match=r"k=1/part-9\.parquet is a symbolic link"):
        compact_partition(
            LOCAL, str(directory), policy=policy, storage_format="parquet", force=True
        )
    assert _state(directory) == before  # nothing archived, merged or deleted
    assert pq.read_table(secret).to_pylist() == [{"x": 123456}]


def test_a_link_planted_after_the_listing_is_not_read(tmp_path: Path) -> None:
    directory, _ = _partition(tmp_path)
    link = str(directory / "part-9.parquet")
    names = ["part-0.parquet", "part-9.parquet"]  # as if listed before the link appeared
    with pytest.raises(LinkInPartitionError, match="never read through a link"):
        create_har(LOCAL, str(directory), str(tmp_path / "a.har"), names=names)
    assert not (tmp_path / "a.har").exists()
    with pytest.raises(LinkInPartitionError):
        list(read_batches(LOCAL, link, "parquet"))  # merge's read
    with pytest.raises(LinkInPartitionError):
        parquet_or_orc_rows(LOCAL, link, "parquet")


def test_link_or_copy_links_or_copies_only_a_regular_file_reached_without_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compaction's link (or copy, where hard links fail) of a listed file: made relative
    to directories reached from the base without following a link; a FIFO in the file's
    place, or its directory swapped for a link, is refused and nothing is made."""
    table = tmp_path / "t"
    source, target = table / "k=1", table / "_hcat_compacted"
    source.mkdir(parents=True)
    target.mkdir()
    (source / "part-0.parquet").write_bytes(b"PAR1 data")
    bases = [str(table)]
    link_or_copy(LOCAL, str(source / "part-0.parquet"), str(target / "a"), bases=bases)
    assert (target / "a").stat().st_ino == (source / "part-0.parquet").stat().st_ino
    with monkeypatch.context() as patched:
        patched.setattr(os, "link", _no_hard_links)
        link_or_copy(LOCAL, str(source / "part-0.parquet"), str(target / "b"), bases=bases)
    assert (target / "b").read_bytes() == b"PAR1 data"
    assert (target / "b").stat().st_ino != (source / "part-0.parquet").stat().st_ino
    os.mkfifo(source / "part-1.parquet")
    with pytest.raises(LinkInPartitionError, match=r"part-1\.parquet is not a regular file"):
        link_or_copy(LOCAL, str(source / "part-1.parquet"), str(target / "c"), bases=bases)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "part-0.parquet").write_bytes(b"secret")
    source.rename(table / ".k=1.orig")
    source.symlink_to(outside, target_is_directory=True)
    with pytest.raises(LinkInPartitionError, match=r"k=1 is a symbolic link"):
        link_or_copy(LOCAL, str(source / "part-0.parquet"), str(target / "d"), bases=bases)
    assert sorted(p.name for p in target.iterdir()) == ["a", "b"]


def _no_hard_links(*args: object, **kwargs: object) -> None:
    raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
