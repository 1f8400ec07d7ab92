"""``hcat-notify partitions add|drop|discover``, ``table drop``: outcomes and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hcat_notify.config import load_settings
from hcat_notify.store import Catalog


@pytest.fixture
def table(run, tmp_path: Path) -> Path:
    root = tmp_path / "clicks"
    code, _, err = run(
        "table", "create", "web.clicks", "--location", str(root), "--partition-keys", "ds,region"
    )
    assert (code, err) == (0, "")
    return root


def _files(directory: Path, size: int = 7) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "part-0.parquet").write_bytes(b"x" * size)
    return directory


def _state(db_url: str, tmp_path: Path) -> tuple[list[str], int]:
    with Catalog.open(load_settings(home=tmp_path / "home", db_url=db_url)) as catalog:
        partitions = [p.spec.to_path() for p in catalog.list_partitions("web.clicks")]
        return partitions, len(catalog.outbox.events(limit=10_000))


def test_partitions_without_a_subcommand_still_lists(run, table: Path):
    code, out, _ = run(
        "partitions",
        "add",
        "web.clicks",
        "ds=1",
        "region=us",
        "--location",
        str(_files(table / "ds=1" / "region=us")),
    )
    assert code == 0
    assert out.startswith("registered ds=1/region=us")
    for args in (["partitions", "web.clicks"], ["partitions", "list", "web.clicks"]):
        code, out, _ = run(*args, "ds=1", "-o", "json")
        assert code == 0
        assert [p["spec"] for p in json.loads(out)] == ["ds=1/region=us"]
    code, out, _ = run("-o", "json", "partitions", "web.clicks")
    assert json.loads(out)[0]["file_count"] == 1
    code, out, _ = run("partitions", "--help")
    assert code == 0
    assert "discover" in out


def test_add_drop_and_discover_with_json_output(run, table: Path, db_url: str, tmp_path: Path):
    _files(table / "ds=1" / "region=us", 3)
    _files(table / "ds=1" / "region=eu", 4)
    code, out, _ = run("partitions", "discover", "web.clicks", "--dry-run", "-o", "json")
    dry = json.loads(out)
    assert (code, dry["registered"], len(dry["found"])) == (0, 0, 2)
    assert _state(db_url, tmp_path)[0] == []
    code, out, _ = run("-o", "json", "partitions", "discover", "web.clicks")
    assert (code, json.loads(out)["registered"]) == (0, 2)
    code, out, _ = run("-o", "json", "partitions", "drop", "web.clicks", "ds=1", "--purge")
    dropped = json.loads(out)
    assert code == 0
    assert [p["spec"] for p in dropped["dropped"]] == ["ds=1/region=eu", "ds=1/region=us"]
    assert len(dropped["event_ids"]) == 2
    assert not (table / "ds=1" / "region=us").exists()
    code, out, _ = run("-o", "json", "table", "drop", "web.clicks")
    assert (code, json.loads(out)["partitions"]) == (0, 0)
    assert len(json.loads(out)["event_ids"]) == 2  # the prefix topic and the table's


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["partitions", "add", "web.clicks", "ds=1", "region=us", "--location", "{missing}"],
            "partition directory not found",
        ),
        (
            ["partitions", "add", "web.clicks", "ds=1", "region=us", "--location", "{empty}"],
            "holds no data files",
        ),
        (
            ["partitions", "add", "web.clicks", "ds=1", "country=us", "--location", "{full}"],
            "no partition key 'country'",
        ),
        (
            ["partitions", "add", "web.clicks", "ds=0", "region=us", "--location", "{full}"],
            "already registered",
        ),
        (["partitions", "drop", "web.clicks", "ds=9"], "no partition of web.clicks matches ds=9"),
        (["partitions", "discover", "web.clicks"], "not a partition directory"),
        (["table", "drop", "web.nothing"], "table web.nothing is not registered"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_changes_nothing(
    run, table: Path, db_url: str, tmp_path: Path, args, message
):
    full = _files(tmp_path / "full")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "_SUCCESS").write_bytes(b"")
    assert (
        run("partitions", "add", "web.clicks", "ds=0", "region=us", "--location", str(full))[0] == 0
    )
    _files(table / "stray")  # a foreign directory in the table's location
    before = _state(db_url, tmp_path)
    filled = [a.format(missing=tmp_path / "missing", empty=empty, full=full) for a in args]
    code, out, err = run(*filled)
    assert (code, out) == (2, "")
    assert err.startswith("hcat-notify: error: ")
    assert err.count("\n") == 1
    assert message in err
    assert _state(db_url, tmp_path) == before
