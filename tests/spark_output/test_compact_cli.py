"""hcat-notify compact: maintenance of existing partitions from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hcat_notify.cli import main
from hcat_notify.settings import load_settings
from hcat_notify.store import Catalog, NewPartition

pytestmark = pytest.mark.integration


@pytest.fixture
def table(tmp_path: Path, db_url: str):
    root = tmp_path / "t"
    with Catalog.open(load_settings(home=tmp_path, db_url=db_url)) as catalog:
        catalog.create_table("web.t", location=str(root), partition_keys=["ds"])
        for ds in ("1", "2"):
            directory = root / f"ds={ds}"
            directory.mkdir(parents=True)
            for n in range(12):
                pq.write_table(
                    pa.table({"id": [n * 10 + i for i in range(10)], "ds_copy": [ds] * 10}),
                    directory / f"part-{n:05d}.parquet",
                )
            catalog.add_partitions(
                "web.t", [NewPartition({"ds": ds}, f"file://{directory}", 12, 0)]
            )
    return root


def _run(capsys, db_url: str, *args: str) -> tuple[int, str, str]:
    code = main(["--db-url", db_url, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_dry_run_then_compact(capsys, db_url: str, table: Path, tmp_path: Path):
    before = sorted(str(p) for p in table.rglob("*"))
    code, out, _ = _run(capsys, db_url, "-o", "json", "compact", "web.t", "--dry-run")
    assert code == 0
    planned = json.loads(out)
    assert (planned["dry_run"], planned["considered"], planned["compacted"]) == (True, 2, 2)
    assert planned["files_before"] == 24
    assert sorted(str(p) for p in table.rglob("*")) == before  # nothing changed

    code, out, _ = _run(capsys, db_url, "compact", "web.t", "ds=1")
    assert code == 0, out
    assert (
        out.splitlines()[0] == "web.t: compacted 1 of 1 partition(s) (merge), 0 skipped, 0 failed"
    )
    with Catalog.open(load_settings(home=tmp_path, db_url=db_url)) as catalog:
        one = catalog.get_partition("web.t", {"ds": "1"})
        two = catalog.get_partition("web.t", {"ds": "2"})
    assert one is not None
    assert two is not None
    assert one.file_count == 1
    assert "_hcat_compacted" in one.location
    assert two.location == f"file://{table}/ds=2"  # not asked for: untouched
    rows = pq.read_table(one.location.removeprefix("file://")).column("id").to_pylist()
    assert sorted(rows) == list(range(120))


def test_compact_bad_input(capsys, db_url: str, table: Path):
    code, _, err = _run(capsys, db_url, "compact", "web.nope")
    assert code == 2
    assert err.startswith("hcat-notify: error: table web.nope is not registered")
    assert err.count("\n") == 1
    code, _, err = _run(capsys, db_url, "compact", "web.t", "hour=1")
    assert code == 2
    assert "no partition key 'hour'" in err
