"""Hadoop Archives: the index format as Hadoop's HarFileSystem reads it, and Spark
reading archived partitions through ``har://`` URIs.

Expected hash values were computed with Java (``String.hashCode`` and
``HarFileSystem.getHarHash`` through the Spark JVM) and are pinned here; the Spark tests
also compare against the JVM directly.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from spark_output.compaction.har import (
    ARCHIVE_NAME,
    HarEntry,
    HarError,
    archive_partition,
    create_har,
    filesystem_uri,
    har_hash,
    har_location,
    har_uri,
    java_string_hash,
    java_url_encode,
    list_har,
    read_har_file,
)
from spark_output.compaction.manifest import MANIFEST_NAME
from spark_output.compaction.policy import CompactionPolicy
from spark_output.errors import CompactionError
from tests.spark_output.compaction.damage import damaged_archives

LOCAL = pafs.LocalFileSystem()
HAR_POLICY = CompactionPolicy(mode="har", min_files=2)


# --------------------------------------------------------------------------- encoding


@pytest.mark.parametrize(
    ("text", "encoded"),
    [
        ("/", "%2F"),
        ("/a b.csv", "%2Fa+b.csv"),
        ("az-AZ_09.*", "az-AZ_09.*"),
        ("~!'()", "%7E%21%27%28%29"),
        ("ü€", "%C3%BC%E2%82%AC"),
        ("𝄞", "%F0%9D%84%9E"),
        ("a+b%c", "a%2Bb%25c"),
        ("1700000000000 420 root root", "1700000000000+420+root+root"),
    ],
)
def test_java_url_encode(text: str, encoded: str) -> None:
    # java.net.URLEncoder.encode(text, "UTF-8")
    assert java_url_encode(text) == encoded


@pytest.mark.parametrize(
    ("text", "java_hash", "hadoop_hash"),
    [
        ("", 0, 0),
        ("/", 47, 47),
        ("hello", 99162322, 99162322),
        ("/a b.csv", 1504325356, 1504325356),
        ("/part-00000-abc-c000.csv", -1349885416, 797598232),
        ("/päth/ü€𝄞", -379472622, 1768011026),  # surrogate pair: two UTF-16 units
    ],
)
def test_hashes_match_java(text: str, java_hash: int, hadoop_hash: int) -> None:
    assert java_string_hash(text) == java_hash
    assert har_hash(text) == hadoop_hash


def test_index_lines_have_hadoops_layout() -> None:
    file_entry = HarEntry(
        path="/a b.csv",
        is_dir=False,
        part="part-0",
        offset=10,
        length=4,
        modification_time_ms=1700000000000,
        permission=420,
        owner="hdfs user",
        group="g",
    )
    # owner is encoded once inside the properties, then the properties again
    assert file_entry.index_line() == (
        "%2Fa+b.csv file part-0 10 4 1700000000000+420+hdfs%2Buser+g \n"
    )
    dir_entry = HarEntry(
        path="/",
        is_dir=True,
        modification_time_ms=5,
        permission=493,
        owner="u",
        group="g",
        children=("a b.csv", "x"),
    )
    assert dir_entry.index_line() == "%2F dir 5+493+u+g 0 0 a+b.csv x \n"


def _make_tree(root: Path) -> dict[str, bytes]:
    files = {
        "a b.csv": b"1,2\n",
        "ünï~code.csv": b"3,4\n",
        "sub/inner.txt": b"inner\n",
        "sub/deeper/empty": b"",
    }
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def test_create_and_list_round_trip(tmp_path: Path) -> None:
    source = tmp_path / "src"
    files = _make_tree(source)
    archive = tmp_path / "out.har"
    info = create_har(LOCAL, str(source), str(archive), part_size=5)
    assert sorted(os.listdir(archive)) == sorted(["_index", "_masterindex", *info.parts])
    assert len(info.parts) > 1  # part_size forces several parts
    assert info.files == 4
    assert info.directories == 3
    assert (archive / "_masterindex").read_bytes().startswith(b"3 \n")

    entries = list_har(LOCAL, str(archive))
    hashes = [har_hash(e.path) for e in entries]
    assert hashes == sorted(hashes)
    by_path = {e.path: e for e in entries}
    assert set(by_path) == {"/", "/sub", "/sub/deeper", *("/" + n for n in files)}
    assert by_path["/"].children == ("a b.csv", "sub", "ünï~code.csv")
    assert by_path["/sub"].children == ("deeper", "inner.txt")
    for name, data in files.items():
        assert read_har_file(LOCAL, str(archive), name) == data
        entry = by_path["/" + name]
        assert entry.length == len(data)
        assert entry.modification_time_ms == (source / name).stat().st_mtime_ns // 1_000_000
        assert entry.permission == 0o644

    with pytest.raises(HarError, match="already exists"):
        create_har(LOCAL, str(source), str(archive))
    with pytest.raises(HarError, match=r"\.har"):
        create_har(LOCAL, str(source), str(tmp_path / "out.zip"))


def test_master_index_blocks_of_1000_entries(tmp_path: Path) -> None:
    source = tmp_path / "many"
    source.mkdir()
    for number in range(1500):
        (source / f"f{number}").write_bytes(str(number).encode())
    archive = tmp_path / "many.har"
    create_har(LOCAL, str(source), str(archive))
    master = (archive / "_masterindex").read_text().split("\n")
    assert master[0] == "3 "
    ranges = [line.split(" ") for line in master[1:] if line]
    assert len(ranges) == 2  # 1501 entries: one block of 1000, then the rest
    index = (archive / "_index").read_bytes()
    lines = index.decode().splitlines()
    first, second = ranges
    assert first[0] == "0"
    assert int(first[2]) == 0
    assert int(first[3]) == int(second[2])
    assert int(second[3]) == len(index)
    assert second[0] == first[1]
    assert int(first[1]) == har_hash(lines[999].split(" ")[0].replace("%2F", "/"))
    assert len(list_har(LOCAL, str(archive))) == 1501


def test_har_uri_forms() -> None:
    assert har_uri("/data/t/p=1/x.har") == "har://file-localhost/data/t/p=1/x.har"
    assert har_uri("file:/data/x.har", "a/b") == "har://file-localhost/data/x.har/a/b"
    assert har_uri("file:///data/x.har/") == "har://file-localhost/data/x.har"
    assert har_uri("hdfs://nn:8020/w/x.har") == "har://hdfs-nn:8020/w/x.har"
    assert har_uri("s3a://bucket/w/x.har") == "har://s3a-bucket/w/x.har"
    assert har_location("file:///t/p=1/") == "har://file-localhost/t/p=1/_hcat_archive.har"
    assert har_location("/t/p=1") == "har://file-localhost/t/p=1/_hcat_archive.har"
    with pytest.raises(HarError):
        har_uri("relative/x.har")
    with pytest.raises(HarError):
        har_uri("/data/x.zip")
    assert filesystem_uri(LOCAL, "/a/b") == "file:/a/b"
    assert filesystem_uri(LOCAL, "/a", base_uri="hdfs://nn:8020") == "hdfs://nn:8020/a"


def test_archive_partition_corruption_keeps_originals(tmp_path: Path) -> None:
    directory = tmp_path / "datestamp=20110228"
    directory.mkdir()
    for number in range(3):
        (directory / f"part-{number}.csv").write_text(f"{number},x\n")
    (directory / "_SUCCESS").write_bytes(b"")
    before = {p.name: p.read_bytes() for p in directory.iterdir()}

    def corrupt(fs: pafs.FileSystem, path: str) -> None:
        with fs.open_input_stream(path) as f:
            data = bytearray(f.read())
        data[0] ^= 0xFF
        with fs.open_output_stream(path) as f:
            f.write(bytes(data))

    with damaged_archives(corrupt), pytest.raises(HarError) as info:
        archive_partition(LOCAL, str(directory), policy=HAR_POLICY)
    assert str(directory) in str(info.value)
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == before

    with pytest.raises(CompactionError, match="not 'har'"):
        archive_partition(LOCAL, str(directory), policy=CompactionPolicy())
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(HarError, match="no data files"):
        archive_partition(LOCAL, str(empty), policy=HAR_POLICY)


# --------------------------------------------------------------------------- Spark


def _rows(spark: Any, fmt: str, path: str) -> Counter[str]:
    return Counter(repr(r) for r in spark.read.format(fmt).load(path).collect())


def _archive_and_compare(spark: Any, directory: Path, fmt: str) -> Any:
    before = _rows(spark, fmt, str(directory))
    originals = sorted(p.name for p in directory.iterdir() if not p.name.startswith(("_", ".")))
    result = archive_partition(
        LOCAL,
        str(directory),
        policy=HAR_POLICY,
        storage_format=fmt if fmt in ("parquet", "orc") else None,
    )
    location = result.new_location
    assert location == f"har://file-localhost{directory}/{ARCHIVE_NAME}"
    remaining = sorted(os.listdir(directory))
    # Hadoop's checksum sidecars (.<name>.crc) of the archived files are gone too
    assert remaining == sorted(["._SUCCESS.crc", "_SUCCESS", MANIFEST_NAME, ARCHIVE_NAME])
    assert result.files_before == len(originals)

    after = _rows(spark, fmt, location)
    assert after == before
    # Hadoop lists exactly the original files, under their names and sizes
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(location)
    statuses = path.getFileSystem(conf).listStatus(path)
    listed = {s.getPath().getName(): s.getLen() for s in statuses}
    manifest = json.loads((directory / MANIFEST_NAME).read_text())["compactions"][-1]
    assert listed == {o["name"]: o["size"] for o in manifest["originals"]}
    assert sorted(listed) == originals
    return result


@pytest.mark.spark
def test_spark_reads_archived_csv_partition(spark: Any, tmp_path: Path) -> None:
    directory = tmp_path / "csv" / "datestamp=20110228"
    df = spark.range(0, 400, 1, 2).selectExpr(
        "id", "case when id % 3 = 0 then null else concat('v,', id) end as s", "id / 3.0d as d"
    )
    df.repartition(12).write.csv(str(directory))
    # a file name with a space and non-ASCII characters must survive the index encoding
    first = sorted(p for p in directory.iterdir() if p.name.startswith("part-"))[0]
    first.rename(directory / "part ünï~code+%41.csv")
    (directory / f".{first.name}.crc").unlink()  # Hadoop's checksum sidecar
    jvm = spark.sparkContext._jvm
    for name in ("/part ünï~code+%41.csv", "/" + first.name):
        assert jvm.org.apache.hadoop.fs.HarFileSystem.getHarHash(
            jvm.org.apache.hadoop.fs.Path(name)
        ) == har_hash(name)

    result = _archive_and_compare(spark, directory, "csv")
    assert result.rows is None
    assert sum(_rows(spark, "csv", result.new_location).values()) == 400


@pytest.mark.spark
def test_spark_reads_archived_parquet_partition_with_many_parts(spark: Any, tmp_path: Path) -> None:
    directory = tmp_path / "parquet" / "datestamp=20110228"
    df = spark.range(0, 500, 1, 2).selectExpr(
        "id",
        "cast(id * 1.5 as decimal(12, 2)) as dec",
        "timestamp_seconds(id * 3601) as ts",
        "case when id % 4 = 0 then null else array(concat('s', id)) end as arr",
    )
    df.repartition(15).write.parquet(str(directory))
    result = _archive_and_compare(spark, directory, "parquet")
    assert result.rows == 500
    assert result.files_after == 1  # one part file
    # one part file per archived file (part_size=1), read by Hadoop
    multi_source = tmp_path / "multi"
    spark.read.parquet(result.new_location).write.parquet(str(multi_source))
    before = _rows(spark, "parquet", str(multi_source))
    names = [n for n in os.listdir(multi_source) if not n.startswith(("_", "."))]
    multi = create_har(
        LOCAL, str(multi_source), str(tmp_path / "multi.har"), names=names, part_size=1
    )
    assert len(multi.parts) == len(names) > 1
    assert _rows(spark, "parquet", har_uri(str(tmp_path / "multi.har"))) == before
