"""A partition's data files on the local filesystem are listed without following links:
a visible symbolic link is refused by name (what it points to may lie outside the
warehouse), never counted, compacted or exported; a data file is opened ``O_NOFOLLOW``.
docs/operations.md, "Warehouse roots"."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs
import pytest

from hcat_notify.cli import main
from hcat_notify.errors import LinkInPartitionError
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
