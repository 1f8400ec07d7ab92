"""Spark reads back exactly the partition values we escape, and we parse what Spark writes.

These tests pin :mod:`hcat_notify.model.specs` to Spark's own behaviour: partition discovery
(``spark.read.parquet`` on ``key=<escaped>`` directories), ``partitionBy`` on write, and
``ExternalCatalogUtils.escapePathName``/``unescapePathName`` called through the JVM.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hcat_notify.model.specs import (
    DEFAULT_PARTITION_NAME,
    PartitionSpec,
    escape_path_name,
    unescape_path_name,
)

pytestmark = pytest.mark.spark

INFERENCE = "spark.sql.sources.partitionColumnTypeInference.enabled"

TRICKY_VALUES: list[str | None] = [
    "a/b",
    "x=y",
    "50%",
    "%2F",  # a literal escape sequence must not be decoded twice
    "100%zz",
    "line\nbreak",
    "tab\t",
    "cr\r",
    "\x01ctl\x1f\x7f",
    "spa ce",
    " lead and trail ",
    "ünïcødé",
    "日本",
    "🎉👍🏽",
    "\"quote'",
    "#*?:[]{}^\\",
    "<>|~!@$&()+,;`",
    "_underscore",
    ".dot",
    "..",
    "20110228",
    "007",
    None,
]


def _rows() -> list[tuple[int, str | None, str | None]]:
    """(row id, datestamp, region): every value appears under both keys."""
    n = len(TRICKY_VALUES)
    return [(i, TRICKY_VALUES[i], TRICKY_VALUES[(i + 1) % n]) for i in range(n)]


def test_spark_reads_back_the_values_we_escape(
    spark: Any, spark_conf: Callable[[str, str], None], tmp_path: Path
) -> None:
    base = tmp_path / "table"
    expected: dict[int, tuple[str | None, str | None]] = {}
    for row_id, datestamp, region in _rows():
        spec = PartitionSpec.from_mapping({"datestamp": datestamp, "region": region})
        directory = base / spec.to_path()
        directory.mkdir(parents=True)
        pq.write_table(
            pa.table({"row_id": pa.array([row_id], pa.int32())}),
            directory / "part-00000.parquet",
        )
        expected[row_id] = (datestamp, region)

    # Directory names are exactly key=<escaped value>, one level per key.
    for row_id, datestamp, region in _rows():
        d = DEFAULT_PARTITION_NAME if datestamp is None else escape_path_name(datestamp)
        r = DEFAULT_PARTITION_NAME if region is None else escape_path_name(region)
        assert (base / f"datestamp={d}" / f"region={r}").is_dir(), row_id

    spark_conf(INFERENCE, "false")
    df = spark.read.parquet(str(base))
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("row_id", "int"),
        ("datestamp", "string"),
        ("region", "string"),
    ]
    got = {row.row_id: (row.datestamp, row.region) for row in df.collect()}
    assert got == expected


def _partition_dirs(base: Path) -> dict[str, list[Path]]:
    """Relative partition path -> parquet files in it."""
    found: dict[str, list[Path]] = {}
    for dirpath, _dirnames, filenames in os.walk(base):
        files = [Path(dirpath) / f for f in filenames if f.endswith(".parquet")]
        if files:
            found[Path(dirpath).relative_to(base).as_posix()] = files
    return found


def test_we_parse_the_directories_spark_writes(spark: Any, tmp_path: Path) -> None:
    rows = [*_rows(), (len(TRICKY_VALUES), "empty-region", "")]
    df = spark.createDataFrame(rows, "row_id int, datestamp string, region string")
    out = tmp_path / "written"
    df.coalesce(1).write.partitionBy("datestamp", "region").parquet(str(out))

    dirs = _partition_dirs(out)
    assert len(dirs) == len(rows)
    expected = {row_id: (d or None, r or None) for row_id, d, r in rows}
    seen: dict[int, tuple[str | None, str | None]] = {}
    for relative, files in dirs.items():
        spec = PartitionSpec.parse(relative)
        assert spec.keys == ("datestamp", "region")
        # Spark's directory name is byte-for-byte what we would have written.
        assert spec.to_path() == relative
        for file in files:
            for row_id in pq.read_table(file, columns=["row_id"]).column("row_id").to_pylist():
                seen[row_id] = (spec.as_dict()["datestamp"], spec.as_dict()["region"])
    assert seen == expected


def _jvm_catalog_utils(spark: Any) -> Any:
    return spark.sparkContext._jvm.org.apache.spark.sql.catalyst.catalog.ExternalCatalogUtils


def test_escape_matches_spark_for_every_char_up_to_u2ff(spark: Any) -> None:
    utils = _jvm_catalog_utils(spark)
    chars = "".join(chr(c) for c in range(1, 0x300))
    # One JVM call for all the chars: each escaped char becomes %XX, so compare per char
    # by escaping them separated by a char nobody escapes.
    joined = "\u00b7".join(chars)
    assert escape_path_name(joined) == utils.escapePathName(joined)
    samples = [v for v in TRICKY_VALUES if v is not None] + ["\ud7ff\ue000\uffff", "𝄞"]
    for value in samples:
        assert escape_path_name(value) == utils.escapePathName(value), repr(value)


@pytest.mark.parametrize(
    "text",
    [
        "%",
        "100%",
        "%4",
        "a%4",
        "%zz",
        "%G1",
        "%+1",
        "%-1",
        "% 1",
        "%%41",
        "%%",
        "%2f%2F",
        "%25%32%46",
        "%C3%A9",
        "%٣٣",
        "%e6%97%a5",
        "no percent",
        "",
    ],
)
def test_unescape_matches_spark(spark: Any, text: str) -> None:
    assert unescape_path_name(text) == _jvm_catalog_utils(spark).unescapePathName(text)
