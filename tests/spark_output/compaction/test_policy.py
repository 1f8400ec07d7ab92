"""CompactionPolicy: validation and the small-file trigger."""

from __future__ import annotations

from typing import Any

import pytest

from spark_output.compaction.policy import CompactionPolicy
from spark_output.errors import CompactionError, SparkOutputError
from spark_output.fs import FileStat

MiB = 1024 * 1024


def _stats(*sizes: int) -> list[FileStat]:
    return [FileStat(name=f"f{i}", path=f"/d/f{i}", size=s) for i, s in enumerate(sizes)]


def test_policy_defaults() -> None:
    policy = CompactionPolicy()
    assert policy.min_files == 10
    assert policy.small_file_bytes == 128 * MiB
    assert policy.target_file_bytes == 128 * MiB
    assert policy.mode == "merge"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_files": 1}, "min_files must be at least 2"),
        ({"min_files": True}, "min_files must be an int"),
        ({"min_files": 2.5}, "min_files must be an int"),
        ({"small_file_bytes": 0}, "small_file_bytes must be positive"),
        ({"target_file_bytes": -1}, "target_file_bytes must be positive"),
        ({"mode": "zip"}, "mode must be 'merge' or 'har'"),
    ],
)
def test_policy_validation(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(CompactionError, match=message) as info:
        CompactionPolicy(**kwargs)
    assert isinstance(info.value, SparkOutputError)


def test_triggers_counts_only_files_under_the_threshold() -> None:
    policy = CompactionPolicy(min_files=3, small_file_bytes=100)
    assert policy.triggers(_stats(10, 20, 99))
    assert not policy.triggers(_stats(10, 20))
    # files at or over the threshold neither count nor prevent the trigger
    assert not policy.triggers(_stats(10, 20, 100, 5000))
    assert policy.triggers(_stats(10, 20, 30, 100, 5000))
    assert not policy.triggers([])
    assert [f.size for f in policy.small_files(_stats(1, 100, 2))] == [1, 2]
