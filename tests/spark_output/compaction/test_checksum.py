"""The order-independent checksum that verifies a merge."""

from __future__ import annotations

import math
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_output.compaction.checksum import compute_checksum
from spark_output.compaction.merge import merge_partition
from spark_output.compaction.policy import CompactionPolicy
from spark_output.errors import CompactionError
from spark_output.fs import list_data_files as data_files

LOCAL = pafs.LocalFileSystem()


def _nested_table(rows: list[dict[str, Any]]) -> pa.Table:
    schema = pa.schema(
        [
            ("i", pa.int64()),
            ("f", pa.float64()),
            ("s", pa.string()),
            ("b", pa.bool_()),
            ("dec", pa.decimal128(20, 3)),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("l", pa.list_(pa.string())),
            ("st", pa.struct([("x", pa.int32()), ("y", pa.list_(pa.float32()))])),
            ("m", pa.map_(pa.string(), pa.int64())),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def _write_parquet_files(directory: Path, table: pa.Table, pieces: list[int]) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    start = 0
    for number, size in enumerate(pieces):
        path = str(directory / f"part-{number:05d}.parquet")
        pq.write_table(table.slice(start, size), path, row_group_size=max(1, size // 2 or 1))
        paths.append(path)
        start += size
    return paths


_text = st.one_of(st.none(), st.text(max_size=6))
_row = st.fixed_dictionaries(
    {
        "i": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
        "f": st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
        "s": _text,
        "b": st.one_of(st.none(), st.booleans()),
        "dec": st.one_of(
            st.none(),
            st.decimals(
                min_value=Decimal("-1e16"), max_value=Decimal("1e16"), places=3, allow_nan=False
            ),
        ),
        "ts": st.none(),
        "l": st.one_of(st.none(), st.lists(_text, max_size=3)),
        "st": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {
                    "x": st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
                    "y": st.one_of(
                        st.none(), st.lists(st.floats(width=32, allow_nan=True), max_size=2)
                    ),
                }
            ),
        ),
        "m": st.one_of(
            st.none(), st.lists(st.tuples(st.text(max_size=3), st.integers(0, 9)), max_size=2)
        ),
    }
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=st.lists(_row, min_size=1, max_size=25), seed=st.integers(0, 2**32))
def test_checksum_is_order_and_layout_independent(
    tmp_path_factory: pytest.TempPathFactory, rows: list[dict[str, Any]], seed: int
) -> None:
    rng = random.Random(seed)
    base = tmp_path_factory.mktemp("checksum")
    table = _nested_table(rows)
    shuffled = list(rows)
    rng.shuffle(shuffled)
    cut = rng.randint(0, len(rows))
    one = _write_parquet_files(base / "one", table, [len(rows)])
    two = _write_parquet_files(base / "two", _nested_table(shuffled), [cut, len(rows) - cut])
    assert compute_checksum(LOCAL, one, "parquet") == compute_checksum(LOCAL, two, "parquet")
    assert compute_checksum(LOCAL, one, "parquet")[0] == len(rows)


def _table_checksum(tmp_path: Path, name: str, table: pa.Table) -> int:
    path = str(tmp_path / f"{name}.parquet")
    pq.write_table(table, path)
    return compute_checksum(LOCAL, [path], "parquet")[1]


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ([[None]], [None]),
        ([[]], [None]),
        ([["ab", "c"]], [["a", "bc"]]),
        ([["a", "b"]], [["b", "a"]]),
        ([[""]], [[]]),
        ([["\x00"]], [[""]]),
    ],
)
def test_checksum_distinguishes_nested_values(
    tmp_path: Path, left: list[Any], right: list[Any]
) -> None:
    t = pa.list_(pa.string())
    a = _table_checksum(tmp_path, "a", pa.table({"c": pa.array(left, t)}))
    b = _table_checksum(tmp_path, "b", pa.table({"c": pa.array(right, t)}))
    assert a != b


def test_checksum_values_nulls_and_nan(tmp_path: Path) -> None:
    def checksum(name: str, values: list[Any], type_: pa.DataType) -> int:
        return _table_checksum(tmp_path, name, pa.table({"c": pa.array(values, type_)}))

    nan_a = checksum("nan_a", [float("nan")], pa.float64())
    neg_nan = -float("nan")
    assert math.isnan(neg_nan)
    assert checksum("nan_b", [neg_nan], pa.float64()) == nan_a
    assert checksum("zero", [0.0], pa.float64()) != checksum("null", [None], pa.float64())
    assert checksum("one", [1], pa.int64()) != checksum("two", [2], pa.int64())
    struct = pa.struct([("x", pa.int32())])
    assert checksum("s_null", [None], struct) != checksum("s_inner_null", [{"x": None}], struct)
    # column order matters, as does which column a value is in
    ab = _table_checksum(tmp_path, "ab", pa.table({"a": [1], "b": [2]}))
    ba = _table_checksum(tmp_path, "ba", pa.table({"a": [2], "b": [1]}))
    assert ab != ba
    # multiset, not set: duplicates count
    once = _table_checksum(tmp_path, "once", pa.table({"a": [1]}))
    twice = _table_checksum(tmp_path, "twice", pa.table({"a": [1, 1]}))
    assert once != twice


def test_checksum_same_for_dictionary_and_plain_encoded_strings(tmp_path: Path) -> None:
    # Dictionary-encoded string columns are read as Arrow dictionaries and hashed per
    # distinct value; the checksum must not depend on how the file stored them, nor on
    # how many row groups (each with its own dictionary) the file has.
    values = [None if i % 7 == 0 else f"v{i % 13}" for i in range(500)]
    table = pa.table({"s": values, "b": pa.array([v.encode() if v else None for v in values])})
    plain = str(tmp_path / "plain.parquet")
    encoded = str(tmp_path / "encoded.parquet")
    pq.write_table(table, plain, use_dictionary=False)
    pq.write_table(table, encoded, use_dictionary=True, row_group_size=37)
    assert not pq.ParquetFile(plain).metadata.row_group(0).column(0).has_dictionary_page
    assert pq.ParquetFile(encoded).metadata.num_row_groups > 10
    assert compute_checksum(LOCAL, [plain], "parquet") == compute_checksum(
        LOCAL, [encoded], "parquet"
    )
    changed = table.set_column(0, "s", pa.array(["x" if v == "v3" else v for v in values]))
    pq.write_table(changed, encoded, use_dictionary=True, row_group_size=37)
    assert compute_checksum(LOCAL, [plain], "parquet") != compute_checksum(
        LOCAL, [encoded], "parquet"
    )


def test_merge_keeps_dictionaries_only_where_they_paid(tmp_path: Path) -> None:
    # Unique ids gain nothing from a dictionary (the writer would fall back to plain
    # anyway): the merged file writes them plain. Low-cardinality strings and
    # integers stay dictionary-encoded; a column the writer stored plain stays plain.
    directory = tmp_path / "p"
    directory.mkdir()
    for number in range(12):
        ids = range(number * 2000, (number + 1) * 2000)
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "code": pa.array([i % 5 for i in ids], pa.int64()),
                "page": [f"/page/{i % 11}" for i in ids],
                "note": [f"n{i % 3}" for i in ids],
            }
        )
        pq.write_table(
            table,
            str(directory / f"part-{number:05d}.parquet"),
            use_dictionary=["id", "code", "page"],
        )
    rows_before = compute_checksum(
        LOCAL, [f.path for f in data_files(LOCAL, str(directory))], "parquet"
    )
    result = merge_partition(
        LOCAL, str(directory), storage_format="parquet", policy=CompactionPolicy()
    )
    (merged,) = result.new_files
    group = pq.ParquetFile(str(directory / merged)).metadata.row_group(0)
    dictionary = {
        group.column(i).path_in_schema: group.column(i).has_dictionary_page
        for i in range(group.num_columns)
    }
    assert dictionary == {"id": False, "code": True, "page": True, "note": False}
    assert compute_checksum(LOCAL, [str(directory / merged)], "parquet") == rows_before
    # strings were read as dictionaries for hashing, but are written back as plain strings
    assert pq.read_schema(str(directory / merged)).field("page").type == pa.string()


def test_checksum_rejects_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(CompactionError, match="storage_format"):
        compute_checksum(LOCAL, [], "csv")
