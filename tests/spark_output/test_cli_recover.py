"""hcat-notify recover on journal entries left by crashed writers (no Spark needed)."""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hcat_notify.cli import main
from hcat_notify.config import load_settings
from hcat_notify.store import Catalog
from spark_output.commit.moves import STAGING_DIR

pytestmark = pytest.mark.integration


def _pending(catalog: Catalog, root: Path, job: str, *, moved: bool, pid: int) -> None:
    """A journal entry as a writer leaves it when it dies after (or before) its moves."""
    staged = root / STAGING_DIR / job / "ds=1"
    final = root / "ds=1"
    (staged if not moved else final).mkdir(parents=True)
    ((staged if not moved else final) / "part-0.parquet").write_bytes(b"x" * 10)
    if moved:
        staged.parent.mkdir(parents=True, exist_ok=True)
    plan = {
        "owner": {"host": socket.gethostname(), "pid": pid},
        "staging": str(root / STAGING_DIR / job),
        "trash": str(root / "_hcat_trash" / job),
        "table_path": str(root),
        "table_uri": f"file://{root}",
        "partitions": [
            {
                "spec": "ds=1",
                "staged": str(staged),
                "final": str(final),
                "file_count": 1,
                "bytes": 10,
                "kind": "dir",
                "trash": str(root / "_hcat_trash" / job / "ds=1"),
            }
        ],
        "mark_set_done": {"ds": "1"},
    }
    catalog.commits.begin(
        job, "web.t", mode="overwrite", partitions=["ds=1"], plan=plan, started_at=datetime.now(UTC)
    )


def _run(capsys, db_url: str, *args: str) -> tuple[int, str, str]:
    code = main(["--db-url", db_url, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_recover_rolls_forward_when_the_moves_were_done(capsys, db_url: str, tmp_path: Path):
    root = tmp_path / "t"
    with Catalog.open(load_settings(home=tmp_path, db_url=db_url)) as catalog:
        catalog.create_table("web.t", location=str(root), partition_keys=["ds"])
        _pending(catalog, root, "job-dead", moved=True, pid=2**22 + 1)  # no such process
        code, out, _ = _run(capsys, db_url, "-o", "json", "recover")
        assert code == 0
        assert json.loads(out) == [
            {"job_id": "job-dead", "table": "web.t", "action": "rolled forward"}
        ]
        assert [p.spec.to_path() for p in catalog.list_partitions("web.t")] == ["ds=1"]
        assert [e.headers["HCAT_EVENT"] for e in catalog.outbox.events()] == [
            "CREATE_TABLE",
            "ADD_PARTITION",
            "MARK_SET_DONE",
        ]
        assert not (root / STAGING_DIR).exists()
        assert _run(capsys, db_url, "recover")[1] == "nothing to recover\n"


def test_recover_rolls_back_and_leaves_live_writers_alone(capsys, db_url: str, tmp_path: Path):
    root = tmp_path / "t"
    with Catalog.open(load_settings(home=tmp_path, db_url=db_url)) as catalog:
        catalog.create_table("web.t", location=str(root), partition_keys=["ds"])
        _pending(catalog, root, "job-live", moved=False, pid=os.getppid())  # a live process
        code, out, _ = _run(capsys, db_url, "recover", "web.t")
        assert (code, out) == (0, "job-live\tweb.t\tskipped (writer alive)\n")
        code, out, _ = _run(capsys, db_url, "recover", "web.t", "--force")
        assert (code, out) == (0, "job-live\tweb.t\trolled back\n")
        assert catalog.list_partitions("web.t") == []
        assert [e.headers["HCAT_EVENT"] for e in catalog.outbox.events()] == ["CREATE_TABLE"]
        assert not (root / "ds=1").exists()
        assert catalog.commits.pending() == []
        code, _, err = _run(capsys, db_url, "recover", "web.nope")
        assert code == 2
        assert "table web.nope is not registered" in err


def test_a_staging_entry_of_another_host_is_taken_only_with_force(
    capsys, db_url: str, tmp_path: Path
):
    # a write journals its staging before Spark writes, which may take hours: another
    # host's write to the table (which recovers first) must not remove it after an hour
    root = tmp_path / "t"
    staging = root / STAGING_DIR / "nightly"
    (staging / "ds=1").mkdir(parents=True)
    (staging / "ds=1" / "part-0.parquet").write_bytes(b"x")
    plan = {
        "owner": {"host": "another-host", "pid": 1}, "staging": str(staging),
        "trash": str(root / "_hcat_trash" / "nightly"), "table_path": str(root),
        "table_uri": f"file://{root}", "partitions": [], "stages_for": "nightly",
    }  # fmt: skip
    with Catalog.open(load_settings(home=tmp_path, db_url=db_url)) as catalog:
        catalog.create_table("web.t", location=str(root), partition_keys=["ds"])
        catalog.commits.begin(
            "nightly.staging", "web.t", mode="append", partitions=[], plan=plan,
            started_at=datetime.now(UTC) - timedelta(hours=5),
        )  # fmt: skip
    code, out, _ = _run(capsys, db_url, "-o", "json", "recover")
    assert (code, json.loads(out)) == (
        0, [{"job_id": "nightly.staging", "table": "web.t", "action": "skipped (writer alive)"}]
    )  # fmt: skip
    assert (staging / "ds=1" / "part-0.parquet").exists()
    code, out, _ = _run(capsys, db_url, "-o", "json", "recover", "--force")
    assert (code, json.loads(out)) == (
        0, [{"job_id": "nightly.staging", "table": "web.t", "action": "rolled back"}]
    )  # fmt: skip
    assert not (root / STAGING_DIR).exists()
