"""hcat-notify recover acts only on paths that are the job's own, checked against the
registry as it is when recovery runs (second trust review, docs/operations.md "Warehouse
roots"): a directory move only onto ``<table>/<spec>``, no target another table or
partition holds, only path specs, a new table's definition re-checked, never through a
link. A refused entry is left pending, reported, and the command exits 2."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, update

from hcat_notify import Warehouse, register_partitions
from hcat_notify.cli import main
from hcat_notify.cli.common import EXIT_ERROR
from hcat_notify.config import load_settings
from hcat_notify.errors import InvalidInputError
from hcat_notify.store import Catalog
from hcat_notify.store.journal import table_definition
from hcat_notify.store.models import CommitJournalRow, PartitionRow
from spark_output.commit import recovery
from spark_output.commit.moves import STAGING_DIR, TRASH_DIR, moves_done
from spark_output.commit.plan import CommitPlan, FileMove, MoveKind, Owner, PartitionMove
from spark_output.commit.recovery import plan_problem
from spark_output.fs import TableLocation

DEAD_PID = 2**22 + 1  # no such process: the entry counts as abandoned
REFUSED = "refused (left pending)"


def _open(tmp_path: Path, db_url: str) -> Catalog:
    return Catalog.open(load_settings(home=tmp_path / "home", db_url=db_url))


def _dir_move(spec: str, staged: Path, final: Path | str, **extra: object) -> PartitionMove:
    return PartitionMove(
        spec=spec, staged=str(staged), final=str(final), file_count=0, bytes=0,
        kind=MoveKind.DIR, **extra,  # type: ignore[arg-type]
    )  # fmt: skip


def _begin(
    catalog: Catalog,
    job: str,
    table: str,
    root: Path,
    moves: Sequence[PartitionMove],
    *,
    mode: str = "append",
    create_table: dict[str, object] | None = None,
) -> None:
    """A pending entry journalled through the catalog's API, as the reviewer's repro did."""
    plan = CommitPlan(
        owner=Owner(socket.gethostname(), DEAD_PID),
        staging=str(root / STAGING_DIR / job),
        trash=str(root / TRASH_DIR / job),
        table_path=str(root),
        table_uri=str(root),
        partitions=tuple(moves),
    )
    catalog.commits.begin(
        job, table, mode=mode, partitions=[m.spec for m in moves], plan=plan.to_json(),
        started_at=catalog.now(), create_table=create_table,
    )  # fmt: skip


def _recover(
    capsys: pytest.CaptureFixture[str], db_url: str
) -> tuple[int, dict[str, dict[str, str]]]:
    code = main(["--db-url", db_url, "-o", "json", "recover"])
    return code, {o["job_id"]: o for o in json.loads(capsys.readouterr().out)}


def _still_pending(tmp_path: Path, db_url: str) -> list[str]:
    with _open(tmp_path, db_url) as catalog:
        return sorted(entry.job_id for entry in catalog.commits.pending())


def test_recover_refuses_a_directory_move_onto_an_external_partition_outside_its_table(
    capsys, db_url: str, tmp_path: Path, narrow_warehouse: Path, victim: Path
):
    # review-trust2 finding 1 (recext.py): the victim is an external partition outside
    # every root; undoing a DIR move "onto" it would move it into the staging, then delete it
    external = tmp_path / "ext"
    external.mkdir()
    staging = external / STAGING_DIR / "evil"
    with _open(tmp_path, db_url) as catalog:
        catalog.create_table(
            "web.x", location=str(external), partition_keys=["q"], table_type="EXTERNAL_TABLE"
        )
        register_partitions(catalog, "web.x", [({"q": "1"}, str(victim / "data"))])
        _begin(catalog, "evil", "web.x", external, [
            _dir_move("q=1", staging / "q=1", victim / "data"),
            _dir_move("q=3", staging / "q=3", external / "q=3"),
        ])  # fmt: skip
    (staging / "q=3").mkdir(parents=True)  # one move not made: a rollback
    code, outcomes = _recover(capsys, db_url)
    assert (victim / "data" / "precious.txt").read_text() == "keep me\n"
    assert code == EXIT_ERROR
    assert outcomes["evil"]["action"] == REFUSED
    # recovery moves and deletes only inside the warehouse roots (third review: an
    # external table's own files outside them were deleted by a forged FILES move)
    assert outcomes["evil"]["reason"] == (
        f"the table's location {external} is outside the warehouse roots"
    )
    assert _still_pending(tmp_path, db_url) == ["evil"]


def test_recover_refuses_targets_another_table_holds(
    capsys, db_url: str, tmp_path: Path, narrow_warehouse: Path
):
    # finding 2 (recshared.py): web.e's partition q=2 registered (straight into the
    # database) at the directory of web.b's p=1; a DIR move onto it is refused as not
    # <table>/<spec>, a file-by-file append into it because web.b holds it
    shared = narrow_warehouse / "x" / "p1"
    shared.mkdir(parents=True)
    (shared / "part-0").write_text("victim B")
    root = narrow_warehouse / "e"
    (root / "q=2").mkdir(parents=True)
    (root / "q=2" / "part-0").write_text("e")
    staging = root / STAGING_DIR
    with _open(tmp_path, db_url) as catalog:
        catalog.create_table("web.b", location=str(narrow_warehouse / "b"), partition_keys=["p"])
        register_partitions(catalog, "web.b", [({"p": "1"}, str(shared))])
        catalog.create_table("web.e", location=str(root), partition_keys=["q"])
        register_partitions(catalog, "web.e", [({"q": "2"}, str(root / "q=2"))])
        _begin(catalog, "evil-dir", "web.e", root, [
            _dir_move("q=2", staging / "evil-dir" / "q=2", shared,
                      trash=str(root / TRASH_DIR / "evil-dir" / "q=2")),
            _dir_move("q=3", staging / "evil-dir" / "q=3", root / "q=3",
                      trash=str(root / TRASH_DIR / "evil-dir" / "q=3")),
        ])  # fmt: skip
        source = staging / "evil-files" / "q=2" / "part-1"
        files = PartitionMove(
            spec="q=2", staged=str(source.parent), final=str(shared), file_count=1, bytes=1,
            kind=MoveKind.FILES, files=(FileMove(str(source), str(shared / "part-0")),),
        )  # fmt: skip
        _begin(catalog, "evil-files", "web.e", root, [files])
    engine = create_engine(db_url)  # the partition row moved by whoever writes the database
    with engine.begin() as connection:
        connection.execute(update(PartitionRow).where(PartitionRow.path_spec == "q=2")
                           .values(location=str(shared)))  # fmt: skip
    engine.dispose()
    (staging / "evil-dir" / "q=3").mkdir(parents=True)
    code, outcomes = _recover(capsys, db_url)
    assert (shared / "part-0").read_text() == "victim B"
    assert code == EXIT_ERROR
    assert (
        outcomes["evil-dir"]["reason"]
        == f"partition q=2: its target {shared} is not {root / 'q=2'}"
    )
    assert outcomes["evil-files"]["reason"] == (
        f"partition q=2: its target {shared} is used by partition p=1 of web.b (file://{shared})"
    )
    assert _still_pending(tmp_path, db_url) == ["evil-dir", "evil-files"]


def test_recover_refuses_claims_that_are_not_partition_specs(
    capsys, db_url: str, tmp_path: Path, narrow_warehouse: Path
):
    # finding 3a (recdotdot.py): an entry creating web.n claims "../d"; its move's target
    # <table>/../d is web.d. Journal.begin refuses it now, so the entry is written as
    # whoever writes the database would
    victim = narrow_warehouse / "d" / "q=1"
    victim.mkdir(parents=True)
    (victim / "part-0").write_text("victim")
    new = narrow_warehouse / "n"
    staging, trash = new / STAGING_DIR / "evil", new / TRASH_DIR / "evil"
    (staging / "p=2").mkdir(parents=True)
    (staging / "p=2" / "part-0").write_text("x")
    moves = [
        _dir_move("../d", staging / "x", f"{new}/../d", trash=f"{trash}/../d"),
        _dir_move("p=2", staging / "p=2", new / "p=2"),
    ]
    with _open(tmp_path, db_url) as catalog:
        catalog.create_table("web.d", location=str(victim.parent), partition_keys=["q"])
        register_partitions(catalog, "web.d", [({"q": "1"}, str(victim))])
        definition = table_definition(location=str(new), partition_keys=["p"])
        with pytest.raises(InvalidInputError, match=r"malformed segment '\.\.' in partition path"):
            _begin(catalog, "evil", "web.n", new, moves, create_table=definition)
        _begin(catalog, "evil", "web.n", new, [moves[1]], create_table=definition)
    plan = CommitPlan.from_json(_entry_plan(tmp_path, db_url, "evil"))
    forged = CommitPlan(**{**plan.__dict__, "partitions": tuple(moves)})
    engine = create_engine(db_url)
    with engine.begin() as connection:
        connection.execute(update(CommitJournalRow).where(CommitJournalRow.job_id == "evil")
                           .values(partitions=["../d", "p=2"], plan=forged.to_json()))  # fmt: skip
    engine.dispose()
    code, outcomes = _recover(capsys, db_url)
    assert (victim / "part-0").read_text() == "victim"
    assert code == EXIT_ERROR
    assert outcomes["evil"]["reason"].startswith("it claims '../d', which is not a partition spec")
    assert _still_pending(tmp_path, db_url) == ["evil"]


def _entry_plan(tmp_path: Path, db_url: str, job: str) -> dict[str, object]:
    with _open(tmp_path, db_url) as catalog:
        entry = catalog.commits.get(job)
        assert entry is not None
        return dict(entry.plan)


def test_recover_rechecks_the_definition_of_a_table_the_entry_creates(
    capsys, db_url: str, tmp_path: Path, narrow_warehouse: Path
):
    # finding 3b (recdef.py): journalled while <W>/d was free; web.d registered there since
    d = narrow_warehouse / "d"
    staging = d / STAGING_DIR / "evil"
    with _open(tmp_path, db_url) as catalog:
        _begin(catalog, "evil", "web.n", d, [
            _dir_move("q=1", staging / "q=1", d / "q=1"),
            _dir_move("q=2", staging / "q=2", d / "q=2"),
        ], create_table=table_definition(location=str(d), partition_keys=["q"]))  # fmt: skip
        (d / "q=1").mkdir(parents=True)
        (d / "q=1" / "part-0").write_text("victim")
        catalog.create_table("web.d", location=str(d), partition_keys=["q"])
        register_partitions(catalog, "web.d", [({"q": "1"}, str(d / "q=1"))])
    (staging / "q=2").mkdir(parents=True)
    code, outcomes = _recover(capsys, db_url)
    assert (d / "q=1" / "part-0").read_text() == "victim"
    assert code == EXIT_ERROR
    assert outcomes["evil"]["reason"] == (
        f"the table it registers is refused now: location {d} is already the location of "
        "table web.d"
    )
    assert _still_pending(tmp_path, db_url) == ["evil"]


@pytest.mark.parametrize("planted", [TRASH_DIR, STAGING_DIR, "q=1"])
def test_recover_never_moves_through_a_link(
    capsys, db_url: str, tmp_path: Path, narrow_warehouse: Path, victim: Path, planted: str
):
    # finding 4 (trashlink.py): <table>/_hcat_trash (or the staging, or the target) is a
    # link planted to a directory outside; the overwrite's undo would move through it
    root = narrow_warehouse / "e"
    root.mkdir()
    (victim / "evil" / "q=1").mkdir(parents=True)
    (victim / "evil" / "q=1" / "precious").write_text("outside")
    os.symlink(victim if planted != "q=1" else victim / "evil" / "q=1", root / planted)
    with _open(tmp_path, db_url) as catalog:
        catalog.create_table("web.e", location=str(root), partition_keys=["q"])
        _begin(catalog, "evil", "web.e", root, [_dir_move(
            "q=1", root / STAGING_DIR / "evil" / "q=1", root / "q=1",
            trash=str(root / TRASH_DIR / "evil" / "q=1"),
        )], mode="overwrite")  # fmt: skip
    code, outcomes = _recover(capsys, db_url)
    assert (victim / "evil" / "q=1" / "precious").read_text() == "outside"
    assert code == EXIT_ERROR
    assert "runs through a symbolic link" in outcomes["evil"]["reason"]
    assert _still_pending(tmp_path, db_url) == ["evil"]


@pytest.mark.parametrize("claim", ["p=%41", "p=1/", "./p=1"])
def test_journal_refuses_claims_not_written_as_path_specs(
    db_url: str, tmp_path: Path, narrow_warehouse: Path, claim: str
):
    root = narrow_warehouse / "e"
    with _open(tmp_path, db_url) as catalog:
        catalog.create_table("web.e", location=str(root), partition_keys=["p"])
        with pytest.raises(InvalidInputError):
            _begin(catalog, "job", "web.e", root, [_dir_move(claim, root / "s", root / "p=1")])
        assert catalog.commits.pending() == []


def test_plans_the_committer_makes_for_moved_partitions_still_pass(
    db_url: str, tmp_path: Path, narrow_warehouse: Path
):
    # compaction moved p=1 to <table>/_hcat_compacted/...: an append goes file by file
    # there, an archived append swaps that directory; both stay recoverable
    root = narrow_warehouse / "e"
    moved = root / "_hcat_compacted" / "p=1" / "c1"
    moved.mkdir(parents=True)
    (moved / "part-0").write_text("e")
    staging = root / STAGING_DIR
    source = staging / "files" / "p=1" / "part-9"
    plans = {
        "files": PartitionMove(
            spec="p=1", staged=str(source.parent), final=str(moved), file_count=1, bytes=1,
            kind=MoveKind.FILES, files=(FileMove(str(source), str(moved / "part-9")),),
        ),
        "archive": _dir_move("p=1", staging / "archive" / "p=1", moved, archived=True,
                             trash=str(root / TRASH_DIR / "archive" / "p=1")),
    }  # fmt: skip
    with _open(tmp_path, db_url) as catalog:
        catalog.create_table("web.e", location=str(root), partition_keys=["p"])
        register_partitions(catalog, "web.e", [({"p": "1"}, str(moved))])
        for job, move in plans.items():
            _begin(catalog, job, "web.e", root, [move])
        location = TableLocation.parse(str(root))
        registered = {"p=1": f"file://{moved}"}
        warehouse = Warehouse.of(catalog.settings)
        for entry in catalog.commits.pending():
            plan = CommitPlan.from_json(entry.plan)
            assert plan_problem(entry, plan, location, registered, warehouse=warehouse) is None


def test_recover_acts_only_inside_the_roots_and_only_on_moves_the_committer_makes(
    capsys, db_url: str, tmp_path: Path, narrow_warehouse: Path, victim: Path
):
    # third review, finding 1: an entry registering a new EXTERNAL table at a directory
    # outside every root, its moves "made" (staged missing): the rollback moved the
    # directory into the staging and deleted it. And a DIR move without a trash (the
    # committer gives every one a trash) rolled a managed table's own files away.
    outside = victim / "data"
    (outside / "p=1").mkdir()
    (outside / "p=1" / "precious.txt").write_text("keep me too\n")
    with _open(tmp_path, db_url) as catalog:
        _begin(catalog, "ext-new", "web.n", outside, [
            _dir_move("p=1", outside / STAGING_DIR / "ext-new" / "p=1", outside / "p=1",
                      trash=str(outside / TRASH_DIR / "ext-new" / "p=1")),
            _dir_move("p=2", outside / STAGING_DIR / "ext-new" / "p=2", outside / "p=2",
                      trash=str(outside / TRASH_DIR / "ext-new" / "p=2")),
        ], create_table=table_definition(location=str(outside), partition_keys=["p"],
                                         table_type="EXTERNAL_TABLE"))  # fmt: skip
        root = narrow_warehouse / "m"
        (root / "p=1").mkdir(parents=True)
        (root / "p=1" / "part-0").write_text("committed")
        catalog.create_table("web.m", location=str(root), partition_keys=["p"])
        register_partitions(catalog, "web.m", [({"p": "1"}, str(root / "p=1"))])
        staging = root / STAGING_DIR / "no-trash"
        _begin(catalog, "no-trash", "web.m", root, [
            _dir_move("p=1", staging / "p=1", root / "p=1"),
            _dir_move("p=2", staging / "p=2", root / "p=2"),
        ])  # fmt: skip
    (staging / "p=2").mkdir(parents=True)  # one move not made: a rollback
    (outside / STAGING_DIR / "ext-new" / "p=2").mkdir(parents=True)
    code, outcomes = _recover(capsys, db_url)
    assert (outside / "precious.txt").read_text() == "keep me\n"
    assert (outside / "p=1" / "precious.txt").read_text() == "keep me too\n"
    assert (root / "p=1" / "part-0").read_text() == "committed"
    assert code == EXIT_ERROR
    assert outcomes["ext-new"]["reason"] == (
        f"the table's location {outside} is outside the warehouse roots"
    )
    assert outcomes["no-trash"]["reason"] == (
        "partition p=1: it moves a whole directory without a trash to put back"
    )
    assert _still_pending(tmp_path, db_url) == ["ext-new", "no-trash"]


def test_recover_refuses_a_link_planted_after_its_check(
    capsys, db_url: str, tmp_path: Path, narrow_warehouse: Path, victim: Path,
    monkeypatch: pytest.MonkeyPatch,
):  # fmt: skip
    # third review (race_mid.py): <table>/g=1 swapped for a link to a directory outside
    # after recovery's link check; the rollback moved the victim's p=1 into the staging
    # (rename(2) follows a link in an intermediate component) and deleted it with it
    root = narrow_warehouse / "e"
    (root / "g=1" / "p=1").mkdir(parents=True)
    (root / "g=1" / "p=1" / "part-0").write_text("moved in by the job")
    (victim / "p=1").mkdir()
    (victim / "p=1" / "precious").write_text("outside")
    staging, trash = root / STAGING_DIR / "evil", root / TRASH_DIR / "evil"
    (staging / "g=1" / "p=2").mkdir(parents=True)  # not moved yet: a rollback
    with _open(tmp_path, db_url) as catalog:
        catalog.create_table("web.e", location=str(root), partition_keys=["g", "p"])
        _begin(catalog, "evil", "web.e", root, [
            _dir_move(spec, staging / spec, root / spec, trash=str(trash / spec))
            for spec in ("g=1/p=1", "g=1/p=2")
        ], mode="overwrite")  # fmt: skip
    checked = moves_done

    def swapped_after_the_check(*args: Any, **kwargs: Any) -> bool:
        if not (root / "g=1").is_symlink():
            (root / "g=1").rename(root / "g=1.real")
            (root / "g=1").symlink_to(victim)
        return checked(*args, **kwargs)

    monkeypatch.setattr(recovery, "moves_done", swapped_after_the_check)
    code, outcomes = _recover(capsys, db_url)
    assert sorted(os.listdir(victim)) == ["data", "p=1"]
    assert (victim / "p=1" / "precious").read_text() == "outside"
    assert code == EXIT_ERROR
    assert outcomes["evil"]["action"] == REFUSED
    assert outcomes["evil"]["reason"] == (
        f"{root}/g=1 is a symbolic link; nothing is moved through or as a link"
    )
    assert _still_pending(tmp_path, db_url) == ["evil"]
    assert (staging / "g=1" / "p=2").is_dir()  # nothing of the job's deleted either


def test_recover_moves_back_only_the_directory_the_job_staged(
    capsys, db_url: str, tmp_path: Path, narrow_warehouse: Path
):
    # the journalled inode of a staged directory: a rollback does not move (and then
    # delete with the staging) another directory found at the target meanwhile
    root = narrow_warehouse / "e"
    staging = root / STAGING_DIR / "job"
    staged = staging / "p=1"
    staged.mkdir(parents=True)
    inode = os.stat(staged).st_ino
    staged.rename(tmp_path / "elsewhere")  # moved, then not the job's directory at p=1
    (root / "p=1").mkdir()
    (root / "p=1" / "part-0").write_text("not the job's")
    (staging / "p=2").mkdir()  # not moved yet: a rollback
    moves = [
        _dir_move(spec, staging / spec, root / spec, trash=str(root / TRASH_DIR / "job" / spec))
        for spec in ("p=1", "p=2")
    ]
    plan = CommitPlan(
        owner=Owner(socket.gethostname(), DEAD_PID), staging=str(staging),
        trash=str(root / TRASH_DIR / "job"), table_path=str(root), table_uri=str(root),
        partitions=tuple(moves),
    ).to_json()  # fmt: skip
    plan["partitions"][0]["staged_inode"] = inode  # what the committer journals
    with _open(tmp_path, db_url) as catalog:
        catalog.create_table("web.e", location=str(root), partition_keys=["p"])
        catalog.commits.begin(
            "job", "web.e", mode="overwrite", partitions=["p=1", "p=2"], plan=plan,
            started_at=catalog.now(),
        )  # fmt: skip
    code, outcomes = _recover(capsys, db_url)
    assert (root / "p=1" / "part-0").read_text() == "not the job's"
    assert code == EXIT_ERROR
    assert outcomes["job"]["action"] == REFUSED
    assert outcomes["job"]["reason"].startswith(
        f"{root}/p=1 is not the directory this job staged (inode "
    )
    assert _still_pending(tmp_path, db_url) == ["job"]
