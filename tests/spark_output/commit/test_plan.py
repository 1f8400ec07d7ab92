"""CommitPlan: the journalled plan reads back exactly what was written, and old plans too."""

from __future__ import annotations

import json

import pytest

from spark_output.commit.plan import CommitPlan, FileMove, MoveKind, Owner, PartitionMove


def _plan() -> CommitPlan:
    return CommitPlan(
        owner=Owner("host-a", 4242),
        staging="/t/_hcat_staging/job",
        trash="/t/_hcat_trash/job",
        table_path="/t",
        table_uri="file:///t",
        partitions=(
            PartitionMove(
                spec="region=us%2Feast",
                staged="/t/_hcat_staging/job/region=us%2Feast",
                final="/t/region=us%2Feast",
                file_count=2,
                bytes=20,
                kind=MoveKind.FILES,
                new_dir=True,
                whole_dir=True,
                files=(
                    FileMove("/t/_hcat_staging/job/region=us%2Feast/a", "/t/region=us%2Feast/a"),
                    FileMove("/t/_hcat_staging/job/region=us%2Feast/b", "/t/region=us%2Feast/b"),
                ),
            ),
            PartitionMove(
                spec="region=x",
                staged="/t/_hcat_staging/job/region=x",
                final="/t/region=x",
                file_count=3,
                bytes=30,
                kind=MoveKind.DIR,
                archived=True,
                location="har://file-localhost/t/region=x/_hcat_archive.har",
                trash="/t/_hcat_trash/job/region=x",
            ),
        ),
        mark_set_done={"region": None},
    )


def test_a_plan_survives_the_journal_json():
    plan = _plan()
    stored = json.loads(json.dumps(plan.to_json()))  # as the journal's JSON column keeps it
    assert CommitPlan.from_json(stored) == plan
    assert plan.specs == ["region=us%2Feast", "region=x"]
    assert stored["partitions"][0]["files"][0] == [
        "/t/_hcat_staging/job/region=us%2Feast/a",
        "/t/region=us%2Feast/a",
    ]
    assert stored["partitions"][0]["whole_dir"] is True


def test_a_plan_journalled_without_optional_fields_reads_back():
    old = {
        "staging": "/t/_hcat_staging/job",
        "trash": "/t/_hcat_trash/job",
        "table_path": "/t",
        "partitions": [
            {
                "spec": "ds=1",
                "staged": "/s",
                "final": "/t/ds=1",
                "file_count": 1,
                "bytes": 10,
                "kind": "dir",
                "trash": "/t/_hcat_trash/job/ds=1",
            }
        ],
    }
    plan = CommitPlan.from_json(old)
    assert plan.table_uri == "/t"  # no table_uri: the path serves
    assert plan.owner == Owner("", -1)
    assert plan.partitions[0].kind is MoveKind.DIR
    assert (plan.partitions[0].archived, plan.partitions[0].location) == (False, None)
    assert plan.mark_set_done is None


def test_an_unknown_move_kind_is_refused():
    data = _plan().to_json()
    data["partitions"][0]["kind"] = "copy"
    with pytest.raises(ValueError, match="copy"):
        CommitPlan.from_json(data)
