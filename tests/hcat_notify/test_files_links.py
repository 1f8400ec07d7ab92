"""A partition's data files on the local filesystem are listed without following links:
a visible symbolic link is refused by name (what it points to may lie outside the
warehouse), never counted, compacted or exported; a data file is opened ``O_NOFOLLOW``.
docs/operations.md, "Warehouse roots"."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from hcat_notify import Catalog, discover_partitions
from hcat_notify.cli import main
from hcat_notify.errors import InvalidInputError, LinkInPartitionError
from hcat_notify.files import list_data_files, measure_partition, open_data_file

LOCAL = pafs.LocalFileSystem()


@pytest.fixture
def partition(tmp_path: Path) -> Path:
    """A partition directory with one data file, hidden files and a subdirectory."""
    directory = tmp_path / "t" / "ds=1"
    directory.mkdir(parents=True)
    (directory / "part-0.csv").write_text("a,1\n")
    (directory / "_SUCCESS").write_text("")
    (directory / "sub").mkdir()
    return directory


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "outside_secret.csv"
    secret.write_text("salary,123456\n")
    return secret


@pytest.mark.parametrize("points_to", ["file", "directory", "nothing"])
def test_a_visible_link_in_a_partition_is_refused_by_name(
    partition: Path, outside: Path, points_to: str
) -> None:
    target = {"file": outside, "directory": outside.parent, "nothing": outside.parent / "gone"}
    (partition / "_link").symlink_to(outside)  # hidden: no reader reads it
    assert [(f.name, f.size) for f in list_data_files(LOCAL, str(partition))] == [("part-0.csv", 4)]
    (partition / "part-9.csv").symlink_to(target[points_to])
    with pytest.raises(LinkInPartitionError, match=r"ds=1/part-9\.csv is a symbolic link \(to "):
        list_data_files(LOCAL, str(partition))
    with pytest.raises(LinkInPartitionError, match=r"part-9\.csv is a symbolic link"):
        measure_partition(str(partition))  # what 'partitions add' registers


def test_a_data_file_is_never_opened_through_a_link(partition: Path, outside: Path) -> None:
    with open_data_file(LOCAL, str(partition / "part-0.csv")) as stream:
        assert stream.read() == b"a,1\n"
    (partition / "part-9.csv").symlink_to(outside)  # planted after the listing
    with pytest.raises(LinkInPartitionError, match="never read through a link"):
        open_data_file(LOCAL, str(partition / "part-9.csv"))


@pytest.mark.integration
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_partitions_add_refuses_a_partition_holding_a_link(
    capsys: pytest.CaptureFixture[str], db_url: str, partition: Path, outside: Path
) -> None:
    (partition / "part-9.csv").symlink_to(outside)
    table = ["--db-url", db_url, "table", "create", "web.t", "--location"]
    assert main([*table, str(partition.parent), "--partition-keys", "ds"]) == 0
    capsys.readouterr()
    code = main(["--db-url", db_url, "partitions", "add", "web.t", "ds=1", "--location",
                 str(partition)])  # fmt: skip
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == (
        f"hcat-notify: error: {partition}/part-9.csv is a symbolic link (to {outside}); a "
        "partition's data files must be regular files in its directory, never links: "
        "replace it with the file or remove it\n"
    )
    assert main(["--db-url", db_url, "partitions", "list", "web.t"]) == 0
    assert capsys.readouterr().out == "no partitions\n"


def _data_dir(directory: Path, text: str = "a,1\n") -> Path:
    """``directory``, made with its parents, holding ``part-0.csv``."""
    directory.mkdir(parents=True)
    (directory / "part-0.csv").write_text(text)
    return directory


def _swap_for_link(directory: Path, to: Path) -> None:
    """What someone who can write in ``directory``'s parent does: move it aside, link."""
    directory.rename(directory.with_name(f".{directory.name}.orig"))
    directory.symlink_to(to, target_is_directory=True)


@pytest.fixture
def outside_dir(tmp_path: Path) -> Path:
    """A directory outside the table whose file is named like the partition's."""
    directory = tmp_path / "outside_dir"
    (directory / "k").mkdir(parents=True)
    (directory / "part-0.csv").write_text("salary,123456\n")
    (directory / "k" / "part-0.csv").write_text("salary,654321\n")
    return directory


@pytest.mark.parametrize("where", ["partition", "above"])
def test_a_directory_swapped_for_a_link_is_not_read_through(
    tmp_path: Path, partition: Path, outside_dir: Path, where: str
) -> None:
    """A partition's directory, or one above it below the base, replaced by a link to a
    directory outside: listing and opening are refused, naming the link; nothing read."""
    table = partition.parent  # tmp_path/t: the trusted base (a table's location)
    nested = _data_dir(table / "a=1" / "k")
    bases = [str(tmp_path), str(table)]
    if where == "partition":
        directory, link = partition, partition
        _swap_for_link(partition, outside_dir)
    else:
        directory, link = nested, nested.parent
        _swap_for_link(nested.parent, outside_dir)
    message = rf"{link} is a symbolic link \(to {outside_dir}\); a partition's directory"
    with pytest.raises(LinkInPartitionError, match=message):
        list_data_files(LOCAL, str(directory), bases=bases)
    with pytest.raises(LinkInPartitionError, match=message):
        open_data_file(LOCAL, str(directory / "part-0.csv"), bases=bases)
    if where == "partition":  # without bases, from its parent: the last component
        with pytest.raises(LinkInPartitionError, match=message):
            list_data_files(LOCAL, str(directory))
        with pytest.raises(LinkInPartitionError, match=message):
            measure_partition(f"file://{directory}")  # what 'partitions add' measures
    assert (outside_dir / "part-0.csv").read_text() == "salary,123456\n"


def test_a_base_that_is_a_link_is_trusted_and_the_link_below_it_named(
    tmp_path: Path, outside_dir: Path
) -> None:
    """A warehouse root may be a link (the operator's); a link below it is what is named."""
    real = _data_dir(tmp_path / "real" / "t" / "k=1")
    base = tmp_path / "root"
    base.symlink_to(tmp_path / "real", target_is_directory=True)
    partition = f"{base}/t/k=1"
    assert [f.name for f in list_data_files(LOCAL, partition, bases=[str(base)])] == ["part-0.csv"]
    _swap_for_link(real, outside_dir)
    with pytest.raises(LinkInPartitionError, match=rf"^{partition} is a symbolic link"):
        list_data_files(LOCAL, partition, bases=[str(base)])


def test_a_fifo_in_place_of_a_data_file_is_refused_not_waited_on(partition: Path) -> None:
    """A data file swapped for a FIFO after the listing: refused at once (an open that
    waited for a writer would hang the export or compaction for ever)."""
    listed = list_data_files(LOCAL, str(partition))
    path = partition / "part-0.csv"
    path.rename(partition / ".part-0.csv.orig")
    os.mkfifo(path)
    with pytest.raises(LinkInPartitionError, match=r"part-0\.csv is not a regular file"):
        open_data_file(LOCAL, listed[0].path, bases=[str(partition.parent)])
    with pytest.raises(LinkInPartitionError, match=r"part-0\.csv is not a regular file"):
        open_data_file(LOCAL, listed[0].path)


@pytest.mark.integration
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_discover_refuses_a_directory_above_a_partition_that_is_a_link(
    catalog: Catalog, tmp_path: Path
) -> None:
    table = _data_dir(tmp_path / "t" / "a=1" / "k=1").parent.parent
    outside = _data_dir(tmp_path / "outside" / "k=2", "salary,1\n").parent
    (table / "a=2").symlink_to(outside, target_is_directory=True)
    catalog.create_table("web.t", location=str(table), partition_keys=["a", "k"])
    with pytest.raises(InvalidInputError, match=rf"{table}/a=2 is a symbolic link \(to "):
        discover_partitions(catalog, "web.t")
    assert catalog.list_partitions("web.t") == []
