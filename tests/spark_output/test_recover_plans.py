"""hcat-notify recover checks each journalled plan against the registry before it acts:
a plan that names paths which are not the job's own (written by whoever can write the
catalog database) is left pending and reported, and nothing outside is touched."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, select

from hcat_notify.cli import main
from hcat_notify.cli.common import EXIT_ERROR
from hcat_notify.config import load_settings
from hcat_notify.store import Catalog
from hcat_notify.store.models import CommitJournalRow, TableRow
from spark_output.commit.moves import STAGING_DIR, TRASH_DIR
from tests.fixtures.catalog_rows import bulk_insert

DEAD_PID = 2**22 + 1  # no such process: the entry counts as abandoned


def _plan(root: Path, job: str, **changes: Any) -> dict[str, Any]:
    plan: dict[str, Any] = {
        "owner": {"host": socket.gethostname(), "pid": DEAD_PID},
        "staging": str(root / STAGING_DIR / job),
        "trash": str(root / TRASH_DIR / job),
        "table_path": str(root),
        "table_uri": f"file://{root}",
        "partitions": [],
        "mark_set_done": None,
        "announce": None,
    }
    return plan | changes


def _table_id(db_url: str) -> int:
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(select(TableRow.id)).scalar_one())
    finally:
        engine.dispose()


def _journal(db_url: str, table_id: int, job: str, plan: dict[str, Any], specs: list[str]) -> None:
    """A pending entry written straight into the catalog, as anyone who can write the
    database could (no check of the writer's side applies)."""
    now = datetime.now(UTC)
    row = {
        "job_id": job,
        "table_id": table_id,
        "table_name": "web.e",
        "mode": "append",
        "state": "pending",
        "partitions": specs,
        "plan": plan,
        "started_at": now,
        "created_at": now,
        "updated_at": now,
        "version": 1,
    }
    bulk_insert(db_url, CommitJournalRow, [row])


def test_recover_refuses_plans_that_name_paths_outside_the_job(
    capsys, db_url: str, tmp_path: Path, narrow_warehouse: Path, victim: Path
):
    root = narrow_warehouse / "e"
    root.mkdir()
    precious = victim / "data" / "precious.txt"
    with Catalog.open(load_settings(home=tmp_path / "home", db_url=db_url)) as catalog:
        catalog.create_table("web.e", location=str(root), partition_keys=["p"])
    table_id = _table_id(db_url)
    staged = root / STAGING_DIR / "job-2" / "p=1"
    evil = {
        # the reviewer's repro: a staging entry whose staging is the victim
        "evil-1": (
            _plan(root, "evil-1", staging=str(victim), trash=str(victim), stages_for="evil-0"),
            [],
        ),
        "x.staging": (_plan(root, "x", staging=str(victim), stages_for="x"), []),
        # a write whose undo would move the victim's file into its staging, then delete it
        "job-2": (
            _plan(
                root,
                "job-2",
                partitions=[
                    {
                        "spec": "p=1",
                        "staged": str(staged),
                        "final": str(victim / "data"),
                        "file_count": 1,
                        "bytes": 8,
                        "kind": "files",
                        "new_dir": False,
                        "files": [[str(staged / "part-0"), str(precious)]],
                    }
                ],
            ),
            ["p=1"],
        ),
        "job-3": (_plan(root, "job-3", table_path=str(victim), table_uri=f"file://{victim}"), []),
    }
    for job, (plan, specs) in evil.items():
        _journal(db_url, table_id, job, plan, specs)

    code = main(["--db-url", db_url, "-o", "json", "recover"])
    outcomes = {o["job_id"]: o for o in json.loads(capsys.readouterr().out)}
    assert precious.read_text() == "keep me\n"
    assert code == EXIT_ERROR
    assert {job: o["action"] for job, o in outcomes.items()} == dict.fromkeys(
        evil, "refused (left pending)"
    )
    assert "whose staging entry it is not" in outcomes["evil-1"]["reason"]
    assert outcomes["x.staging"]["reason"] == (
        f"its staging {victim} is not {root / STAGING_DIR / 'x'}"
    )
    assert outcomes["job-2"]["reason"].startswith(f"partition p=1: its target {victim / 'data'} ")
    assert outcomes["job-3"]["reason"].startswith(f"its table file://{victim} is not ")
    with Catalog.open(load_settings(home=tmp_path / "home", db_url=db_url)) as catalog:
        assert sorted(entry.job_id for entry in catalog.commits.pending()) == sorted(evil)


def test_recover_still_removes_the_staging_of_a_well_formed_entry(
    capsys, db_url: str, tmp_path: Path, narrow_warehouse: Path
):
    root = narrow_warehouse / "e"
    staging = root / STAGING_DIR / "job-4"
    (staging / "p=1").mkdir(parents=True)
    (staging / "p=1" / "part-0").write_text("x")
    with Catalog.open(load_settings(home=tmp_path / "home", db_url=db_url)) as catalog:
        catalog.create_table("web.e", location=str(root), partition_keys=["p"])
    table_id = _table_id(db_url)
    _journal(db_url, table_id, "job-4.staging", _plan(root, "job-4", stages_for="job-4"), [])
    code = main(["--db-url", db_url, "-o", "json", "recover"])
    assert code == 0
    assert json.loads(capsys.readouterr().out) == [
        {"job_id": "job-4.staging", "table": "web.e", "action": "rolled back"}
    ]
    assert not staging.exists()
