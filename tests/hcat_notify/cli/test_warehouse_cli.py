"""The warehouse boundary through the command line (SQLite and PostgreSQL): locations
outside the roots, ``/``, ``..`` and symlinks refused with nothing registered; external
data and data outside the roots never purged; a purge keeps what another registered
partition or table still uses."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import create_engine, update

from hcat_notify.config import load_settings
from hcat_notify.store import Catalog
from hcat_notify.store.models import PartitionRow
from hcat_notify.warehouse import key_text


@pytest.fixture
def roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A narrow warehouse root; ``tmp_path/outside`` is outside it."""
    root = tmp_path / "warehouse"
    root.mkdir()
    monkeypatch.setenv("HCAT_NOTIFY_WAREHOUSE_ROOTS", str(root))
    return root


def _precious(directory: Path) -> Path:
    """A directory with data that belongs to nobody's table."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "part-0.parquet").write_bytes(b"ledger")
    return directory


def _catalog_state(db_url: str, tmp_path: Path) -> tuple[list[str], int]:
    with Catalog.open(load_settings(home=tmp_path / "home", db_url=db_url)) as catalog:
        tables = [str(info.name) for info in catalog.list_tables()]
        return tables, len(catalog.outbox.events(limit=10_000))


def _set_partition_location(db_url: str, spec: str, location: str, *, outside: bool) -> None:
    """Rewrite a partition row's location (and its key: ``outside`` its table's), as an
    older version's catalog may hold it after the upgrade to 0023."""
    engine = create_engine(db_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                update(PartitionRow)
                .where(PartitionRow.path_spec == spec)
                .values(location=location, outside_key=key_text(location) if outside else None)
            )
    finally:
        engine.dispose()


def _create(
    run: Callable[..., tuple[int, str, str]], name: str, location: str, *extra: str
) -> tuple[int, str, str]:
    return run("table", "create", name, "--location", location, "--partition-keys", "ds", *extra)


@pytest.mark.parametrize(
    ("location", "problem"),
    [
        ("{outside}", "is outside the warehouse roots"),
        ("/", "is the root of its filesystem"),
        ("file:///", "is the root of its filesystem"),
        ("{root}/../outside", "has a '..' segment"),
        ("file://{root}/../../../etc", "has a '..' segment"),
        ("{root}/link", "resolves through a symlink to"),
    ],
)
def test_table_locations_the_boundary_refuses(
    run, roots: Path, tmp_path: Path, db_url: str, location: str, problem: str
):
    outside = _precious(tmp_path / "outside")
    (roots / "link").symlink_to(outside)
    where = location.format(outside=outside, root=roots)
    before = _catalog_state(db_url, tmp_path)
    code, out, err = _create(run, "web.t", where)
    assert code == 2
    assert err.startswith("hcat-notify: error: ")
    assert problem in err
    assert err.count("\n") == 1
    assert out == ""
    assert _catalog_state(db_url, tmp_path) == before
    assert (outside / "part-0.parquet").read_bytes() == b"ledger"


def test_partition_locations_the_boundary_refuses(run, roots: Path, tmp_path: Path, db_url: str):
    outside = _precious(tmp_path / "outside")
    (roots / "clicks").mkdir()
    (roots / "clicks" / "ds=2").symlink_to(outside)
    assert _create(run, "web.clicks", str(roots / "clicks"))[0] == 0
    before = _catalog_state(db_url, tmp_path)
    for location, problem in [
        (str(outside), "is outside the warehouse roots"),
        (str(roots / "clicks" / "ds=2"), "resolves through a symlink to"),
        (f"{roots}/clicks/../../outside", "has a '..' segment"),
        ("", "location of partition ds=1 of web.clicks is empty"),  # said "outside" before
        (" ", "is empty"),
    ]:
        code, _, err = run("partitions", "add", "web.clicks", "ds=1", "--location", location)
        assert (code, err.count("\n")) == (2, 1)
        assert problem in err
    # discover finds the symlinked directory and refuses it by name before listing it
    # (fifth security review, finding 1): nothing registered
    code, _, err = run("partitions", "discover", "web.clicks")
    assert code == 2
    assert f"clicks/ds=2 is a symbolic link (to {outside})" in err
    assert _catalog_state(db_url, tmp_path) == before
    with Catalog.open(load_settings(db_url=db_url)) as catalog:
        assert catalog.list_partitions("web.clicks") == []


def test_external_data_is_never_purged(run, roots: Path, tmp_path: Path, db_url: str):
    outside = _precious(tmp_path / "outside" / "t")
    _precious(outside / "ds=1")
    code, _, err = _create(run, "web.ext", str(outside), "--external")
    assert (code, err) == (0, "")
    code, _, _ = run("partitions", "add", "web.ext", "ds=1", "--location", str(outside / "ds=1"))
    assert code == 0
    for args in (["partitions", "drop", "web.ext", "ds=1"], ["table", "drop", "web.ext"]):
        code, _, err = run(*args, "--purge")
        assert (code, err.count("\n")) == (2, 1)
        assert "EXTERNAL_TABLE" in err
    assert (outside / "ds=1" / "part-0.parquet").read_bytes() == b"ledger"
    assert "web.ext" in _catalog_state(db_url, tmp_path)[0]


def test_the_api_external_roots_do_not_bind_the_command_line(
    run, roots: Path, tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch
):
    """The operator's command line registers and measures an external table anywhere but
    around a root, whatever the HTTP API may (docs/api.md, "Locations over the API")."""
    monkeypatch.setenv("HCAT_NOTIFY_API_EXTERNAL_ROOTS", str(tmp_path / "landing"))
    outside = _precious(tmp_path / "etc" / "t")
    _precious(outside / "ds=1")
    code, _, err = _create(run, "web.etc", str(outside), "--external")
    assert (code, err) == (0, "")
    code, _, err = run("partitions", "add", "web.etc", "ds=1", "--location", str(outside / "ds=1"))
    assert (code, err) == (0, "")
    with Catalog.open(load_settings(db_url=db_url)) as catalog:
        assert [(p.file_count, p.total_bytes) for p in catalog.list_partitions("web.etc")] == [
            (1, 6)
        ]


def test_outside_warehouse_is_an_explicit_logged_exception_and_never_purged(
    run, roots: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    outside = _precious(tmp_path / "legacy" / "t")
    _precious(outside / "ds=1")
    with caplog.at_level(logging.WARNING, logger="hcat_notify.warehouse"):
        code, _, err = _create(run, "web.legacy", str(outside), "--outside-warehouse")
        assert code == 0, err
        code, _, err = run(
            "partitions",
            "add",
            "web.legacy",
            "ds=1",
            "--location",
            str(outside / "ds=1"),
            "--outside-warehouse",
        )
        assert code == 0, err
    warned = [r.getMessage() for r in caplog.records if "--outside-warehouse" in r.getMessage()]
    assert any(message.startswith("location of table web.legacy ") for message in warned)
    assert any(message.startswith("location of partition ds=1 ") for message in warned)
    assert all("outside the warehouse roots" in message for message in warned)
    code, out, _ = run("-o", "json", "table", "drop", "web.legacy", "--purge")
    data = json.loads(out)
    assert code == 0
    assert data["deleted"] == []
    assert len(data["kept"]) == 2
    assert all("outside the warehouse roots" in kept for kept in data["kept"])
    assert (outside / "ds=1" / "part-0.parquet").read_bytes() == b"ledger"


def test_a_purge_keeps_a_directory_another_partition_uses(run, roots: Path):
    shared = _precious(roots / "clicks" / "shared")
    assert _create(run, "web.clicks", str(roots / "clicks"))[0] == 0
    for ds in ("1", "2"):
        code, _, err = run("partitions", "add", "web.clicks", f"ds={ds}", "--location", str(shared))
        assert code == 0, err
    code, out, err = run("-o", "json", "partitions", "drop", "web.clicks", "ds=1", "--purge")
    data = json.loads(out)
    assert (code, data["deleted"]) == (0, [])
    assert len(data["kept"]) == 1
    assert "still used by partition ds=2 of web.clicks" in data["kept"][0]
    assert (shared / "part-0.parquet").read_bytes() == b"ledger"
    code, out, _ = run("partitions", "drop", "web.clicks", "ds=2", "--purge")
    assert code == 0
    assert out.startswith("dropped and purged ds=2")
    assert not shared.exists()


def test_a_table_purge_keeps_its_root_when_another_table_uses_it(run, roots: Path, db_url: str):
    root = roots / "clicks"
    _precious(root / "ds=1")
    _precious(root / "views" / "ds=1")  # another table's partition inside this root
    # registered before web.clicks was (a partition inside another table's location is
    # refused)
    assert _create(run, "web.views", str(roots / "views_table"))[0] == 0
    code, _, err = run(
        "partitions", "add", "web.views", "ds=1", "--location", str(root / "views" / "ds=1")
    )
    assert code == 0, err
    # a managed table around another table's partition is refused (second review,
    # finding 6; an indexed lookup since 0023); a catalog of an older version may hold
    # one all the same
    code, _, err = _create(run, "web.clicks", str(root))
    assert code == 2
    assert "contains the location of partition ds=1 of web.views" in err
    _set_partition_location(db_url, "ds=1", str(roots / "views_table" / "ds=1"), outside=False)
    assert _create(run, "web.clicks", str(root))[0] == 0
    _set_partition_location(db_url, "ds=1", f"file://{root / 'views' / 'ds=1'}", outside=True)
    for table, where in (("web.clicks", root / "ds=1"),):
        code, _, err = run("partitions", "add", table, "ds=1", "--location", str(where))
        assert code == 0, err
    code, out, err = run("-o", "json", "table", "drop", "web.clicks", "--purge")
    data = json.loads(out)
    assert code == 0, err
    assert data["deleted"] == [f"file://{root / 'ds=1'}"]
    assert len(data["kept"]) == 1
    assert "still used by partition ds=1 of web.views" in data["kept"][0]
    assert not (root / "ds=1").exists()
    assert (root / "views" / "ds=1" / "part-0.parquet").read_bytes() == b"ledger"


def test_a_purge_keeps_data_outside_roots_narrowed_since_registration(
    run, roots: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    old = _precious(tmp_path / "old" / "t")
    _precious(old / "ds=1")
    monkeypatch.setenv("HCAT_NOTIFY_WAREHOUSE_ROOTS", str(tmp_path))
    assert _create(run, "web.t", str(old))[0] == 0
    assert run("partitions", "add", "web.t", "ds=1", "--location", str(old / "ds=1"))[0] == 0
    monkeypatch.setenv("HCAT_NOTIFY_WAREHOUSE_ROOTS", str(roots))  # the operator narrowed them
    code, out, _ = run("-o", "json", "partitions", "drop", "web.t", "ds=1", "--purge")
    assert (code, json.loads(out)["deleted"]) == (0, [])
    assert "outside the warehouse roots" in json.loads(out)["kept"][0]
    assert (old / "ds=1" / "part-0.parquet").read_bytes() == b"ledger"
