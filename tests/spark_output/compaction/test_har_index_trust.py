"""An archive's index is untrusted input (an import's archives come from elsewhere): a part
must be a ``part-N`` file of the archive and every entry lie within it; a malformed
``_masterindex`` or ``_index`` line is a :class:`HarError`, never a ``ValueError``."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs
import pytest

from spark_output.compaction.har import HarEntry, HarError, list_har, read_har_file
from spark_output.compaction.har.index import index_bytes, is_part_name

LOCAL = pafs.LocalFileSystem()


def _archive(directory: Path, part: str, offset: int, length: int) -> Path:
    """An archive whose one file ``/f.csv`` is at ``part`` (``offset``, ``length``); its
    ``part-0`` holds 10 bytes."""
    directory.mkdir(parents=True)
    entries = [
        HarEntry(path="/", is_dir=True, children=("f.csv",)),
        HarEntry(path="/f.csv", is_dir=False, part=part, offset=offset, length=length),
    ]
    index, master = index_bytes(entries)
    (directory / "_index").write_bytes(index)
    (directory / "_masterindex").write_bytes(master)
    (directory / "part-0").write_bytes(b"0123456789")
    return directory


def test_part_names_are_those_of_our_writer_and_hadoop(tmp_path: Path) -> None:
    assert all(is_part_name(name) for name in ("part-0", "part-17"))
    bad = ("/etc/passwd", "../part-0", "part-0/../../x", "part-", "part-1x", "sub/part-0", "")
    assert not any(is_part_name(name) for name in bad)
    archive = _archive(tmp_path / "a.har", "part-0", 2, 8)  # its last byte: still inside
    assert read_har_file(LOCAL, str(archive), "f.csv") == b"23456789"


@pytest.mark.parametrize(
    ("part", "offset", "length", "problem"),
    [
        ("SECRET", 0, 5, "a part is a file part-N inside the archive"),  # an absolute path
        ("../../secret.txt", 0, 5, "a part is a file part-N inside the archive"),
        ("part-0", 4, 7, r"beyond the end of part-0 \(4\+7 > 10 B\)"),
        ("part-1", 0, 1, "names the part part-1, missing"),
        ("part-0", -1, 1, "negative offset or length"),
    ],
)
def test_an_entry_outside_its_archive_is_refused(
    tmp_path: Path, part: str, offset: int, length: int, problem: str
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET outside the warehouse\n")
    part = str(secret) if part == "SECRET" else part
    archive = _archive(tmp_path / "a.har", part, offset, length)
    with pytest.raises(HarError, match=problem):
        list_har(LOCAL, str(archive))
    with pytest.raises(HarError, match=problem):
        read_har_file(LOCAL, str(archive), "f.csv")


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("_masterindex", b"3 \n0 x y z \n", "malformed _masterindex"),
        ("_masterindex", b"three \n", "malformed _masterindex"),
        ("_masterindex", b"3 \n0 1 0 \n", "malformed _masterindex"),
        ("_masterindex", b"3 \n0 1 0 99999 \n", r"outside _index"),
        ("_masterindex", b"\xff\xfe \n", "malformed _masterindex"),
        ("_index", b"%2Ff.csv file part-0 zero 5 0+420+a+b \n", "malformed _index line"),
    ],
)
def test_a_malformed_index_is_a_har_error(
    tmp_path: Path, name: str, content: bytes, problem: str
) -> None:
    archive = _archive(tmp_path / "a.har", "part-0", 0, 5)
    if name == "_index":  # one range over the whole damaged index
        (archive / "_masterindex").write_bytes(f"3 \n0 1 0 {len(content)} \n".encode())
    (archive / name).write_bytes(content)
    with pytest.raises(HarError, match=problem):
        list_har(LOCAL, str(archive))
